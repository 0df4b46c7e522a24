"""The modules a run imports compile no regular expression at import: each
compile is ~0.5-1M instructions of every run's start, and most patterns are
never matched in one (they are `fast.lazy_re.lazy`, compiled on first use).
The driver's preload compiles only the patterns every run matches (the
command's placeholders), once, so a daemon's forked runs inherit them."""

from __future__ import annotations

import ast
import subprocess
import sys

SPY = """\
import re, sys
compiled = []
real = re._compile
def spy(pattern, flags):
    caller = sys._getframe(1)
    while caller.f_globals.get("__name__", "").startswith("re"):
        caller = caller.f_back
    if caller.f_globals.get("__name__", "").startswith("loopctl"):  # not the stdlib's
        compiled.append(pattern)
    return real(pattern, flags)
re._compile = spy
import loopctl.cli.direct, loopctl.engine.firing, loopctl.storage.lease
import loopctl.engine.supervisor as supervisor
print(repr(compiled))
compiled.clear()
supervisor.preload()
print(repr(compiled))
"""


def test_the_run_path_compiles_no_pattern_at_import() -> None:
    proc = subprocess.run([sys.executable, "-c", SPY], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    at_import, in_preload = proc.stdout.splitlines()
    assert at_import == "[]", at_import
    from loopctl.agents import command

    assert sorted(ast.literal_eval(in_preload)) == sorted(
        [command.PLACEHOLDER.pattern, command.TAKES_PROMPT.pattern]), in_preload
