"""loopctl.domain.dates: datetime's classes from the C module, so that the
run path does not execute CPython 3.10/3.11's pure-Python datetime.py."""

from __future__ import annotations

import datetime as stdlib
import subprocess
import sys

import pytest

from loopctl.domain import dates


def test_they_are_the_datetime_modules_own_classes() -> None:
    for name in dates.__all__:
        assert getattr(dates, name) is getattr(stdlib, name)


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's C module")
def test_the_run_path_does_not_import_the_datetime_module() -> None:
    code = ("import sys\nimport loopctl.cli.direct, loopctl.engine.firing, loopctl.storage.lease\n"
            "import loopctl.engine.supervisor as s\ns.preload()\n"
            "from loopctl.domain.timestamps import iso, parse_iso\n"
            "assert iso(parse_iso('2026-12-04T18:00:00Z')) == '2026-12-04T18:00:00Z'\n"
            "print('datetime' in sys.modules, '_datetime' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"]
