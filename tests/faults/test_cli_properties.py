"""Fault 18 at the CLI: random text as `start` arguments, through the real
command-line parser in-process (`loopctl.cli.app.run_app`; a subprocess per
example would be too slow). Whatever is typed, the answer is exit 0 or 2
with one line on stderr and no traceback, and what `start` accepts is a
definition loopctl can read back. The parsers themselves are property-tested
in tests/domain/test_input_properties.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from loopctl.cli.app import run_app

# What a real argv can carry: no NUL. (Bytes that are not UTF-8 arrive as
# lone surrogates; see the test after the property.)
typed = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=["Cs"]),
                max_size=30)
valid_names = st.from_regex(r"\A[a-z0-9][a-z0-9._-]{0,40}\Z")
valid_every = st.sampled_from(["1s", "45s", "10m", "1h30m", "2d", "1w", "auto"])
valid_cron = st.sampled_from(["* * * * *", "*/5 1-3 * * 1-5", "0 0 29 2 *", "@daily",
                              "0 9 * * mon-fri"])
valid_tz = st.sampled_from([None, "UTC", "America/New_York", "Asia/Kolkata"])
valid_env = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,8}=[^\x00]{0,20}\Z")
# Near misses as well as noise.
odd_every = st.one_of(typed, st.from_regex(
    r"\A-?[0-9]{0,12}(\.[0-9])?[smhdwx ]?([0-9]{1,3}[smh])?\Z"))
odd_cron = st.one_of(typed, st.sampled_from([
    "0 0 31 2 *", "@reboot", "* * * * * *", "61 * * * *", "0 0 L * *", "* * *", ""]))
odd_tz = st.one_of(typed, st.sampled_from(["../etc", "/etc/localtime", "Mars/Olympus", ""]))


@st.composite
def start_args(draw: st.DrawFn) -> list[str]:
    """`start` arguments, valid but for (at most) one field of random text."""
    odd = draw(st.sampled_from(["none", "prompt", "name", "every", "cron", "tz", "env"]))
    prompt = draw(typed if odd == "prompt" else st.just("the prompt"))
    name = draw(typed if odd == "name" else valid_names)
    env = draw(typed if odd == "env" else valid_env)
    args = ["start", prompt, "--name", name, "--command", "true", "--env", env]
    if odd in ("cron", "tz") or (odd != "every" and draw(st.booleans())):
        args += ["--cron", draw(odd_cron if odd == "cron" else valid_cron)]
        tz = draw(odd_tz if odd == "tz" else valid_tz)
        args += ["--tz", tz] if tz is not None else []
    else:
        args += ["--every", draw(odd_every if odd == "every" else valid_every)]
    return args


def loopctl(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        run_app(args)
    code = done.value.code
    return (code if isinstance(code, int) else 0), capsys.readouterr().err


@pytest.mark.slow
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(args=start_args())
@example(args=["start", "p", "--name", "ok", "--command", "true", "--env", "A=b",
               "--every", "10m"])
@example(args=["start", "-", "--name", "x", "--command", "true", "--env", "A=",
               "--cron", "0 0 31 2 *"])
def test_start_with_any_text_exits_0_or_2_in_one_line(
        home: Path, capsys: pytest.CaptureFixture[str], args: list[str]) -> None:
    code, err = loopctl(args, capsys)
    event(f"exit {code}")
    assert code in (0, 2), (args, code, err)
    assert "Traceback" not in err, (args, err)
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("loopctl: error:"), (args, err)
        return
    # Accepted: at most the documented warning for an `--env KEY` unset here
    # (issue 29), one line each, and nothing else.
    assert all(line.startswith("warning: --env ") for line in err.splitlines()), (args, err)
    # What was accepted reads back: the file is valid, the loop is there.
    code, err = loopctl(["validate"], capsys)
    assert code == 0, (args, err)
    code, err = loopctl(["status", args[3]], capsys)
    assert code == 0, (args, err)
    code, err = loopctl(["rm", args[3]], capsys)  # the next example starts afresh
    assert code == 0, (args, err)


@pytest.mark.parametrize("where", ["prompt", "env"])
def test_start_with_non_utf8_text_never_breaks_loops_yaml(
        home: Path, capsys: pytest.CaptureFixture[str], where: str) -> None:
    code, err = loopctl(["start", "p", "--name", "fine", "--every", "1h",
                         "--command", "true"], capsys)
    assert code == 0, err
    bad = "caf\udce9"  # b"caf\xe9" (Latin-1) as Python decodes a non-UTF-8 argv
    prompt, env = (bad, "A=b") if where == "prompt" else ("p", f"A={bad}")
    code, err = loopctl(["start", prompt, "--name", "odd", "--every", "1h",
                         "--env", env, "--command", "true"], capsys)
    assert code in (0, 2), err
    code, err = loopctl(["status", "fine"], capsys)
    assert code == 0, err
