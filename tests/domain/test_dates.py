"""loopctl.fast.dates: datetime's classes from the C module, so that the
run path does not execute CPython 3.10/3.11's pure-Python datetime.py."""

from __future__ import annotations

import datetime as stdlib
import sys

import pytest
from run_path_support import loaded_after_the_run_path

from loopctl.fast import dates


def test_they_are_the_datetime_modules_own_classes() -> None:
    for name in dates.__all__:
        assert getattr(dates, name) is getattr(stdlib, name)


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's C module")
def test_the_run_path_does_not_import_the_datetime_module() -> None:
    then = ("from loopctl.domain.timestamps import iso, parse_iso\n"
            "assert iso(parse_iso('2026-12-04T18:00:00Z')) == '2026-12-04T18:00:00Z'\n")
    assert loaded_after_the_run_path(then, ["datetime", "_datetime"]) == ["False", "True"]
