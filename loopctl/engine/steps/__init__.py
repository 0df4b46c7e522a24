"""The steps of one run, in the order the supervisor takes them.

prepare (the worktree) -> launch (claim, prompt, spawn) -> wait -> read output
-> read decision -> hand off (commit, push, PR) -> settle (record, state,
events, pruning). Each step is a module of small functions that take what
they need and return data; only `loopctl.engine.supervisor` orders them, so a
new step (a check, a gate, a sandbox) is one module plus one line there.
"""
