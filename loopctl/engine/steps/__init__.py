"""The steps of one run, in the order the supervisor takes them.

prepare (the worktree) -> gate -> launch (prompt, argv, env; then start the
agent) -> wait -> output (what it said; its decision) -> notes -> protect ->
check -> handoff (commit, push, PR) -> settle (record, state, events,
pruning). Each step is a module of small functions that take what they need
and return a value; only `loopctl.engine.supervisor` orders them and hands
each step's value to the steps after it, and it imports a step only for a
loop that uses its feature. No step imports another step
(tests/house/test_step_layout.py): what several share lives beside this package
(engine/run_context.py: the context, the claim and the steps' values;
engine/launch_support.py, engine/containment/confining.py, engine/run_bounds.py,
engine/run_signals.py, engine/side_command.py). So a new step is one module
here plus one line in the supervisor (and a field of `Done` when a later
step or the record needs its value).
"""
