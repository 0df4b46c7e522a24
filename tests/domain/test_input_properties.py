"""Property tests (fault suite item 18): whatever a user types or a file holds,
loopctl answers with one of its own errors, never a traceback.

User input must fail with `UsageError` (exit 2); unreadable files with
`UnreadableError` (exit 3). Anything else escaping is a bug.
"""

from __future__ import annotations

import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from loopctl.domain.durations import MAX_SECONDS, parse_duration
from loopctl.domain.errors import EXIT_UNREADABLE, EXIT_USAGE, UnreadableError, UsageError
from loopctl.domain.loop_raw import to_raw
from loopctl.domain.model import (
    KEYS,
    NAME_RE,
    PRESETS,
    LoopDef,
    check_cron,
    check_name,
    parse_loop,
)
from loopctl.storage.definitions import load_yaml_doc
from loopctl.storage.statefile import read_state_file
from loopctl.storage.store import Store
from loopctl.storage.yamlio import dump_yaml_doc, parse_yaml_text

# 100 generated examples beside each property's explicit @example edges
# (every CI run draws new ones).
FAST = settings(max_examples=100, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One folder for every example of a property (pytest cleans it up)."""
    return tmp_path_factory.mktemp("props")




def usage_error(exc: UsageError) -> None:
    assert exc.code == EXIT_USAGE
    assert exc.message and "\n" not in exc.message.strip()


def unreadable_error(exc: UnreadableError) -> None:
    assert exc.code == EXIT_UNREADABLE
    assert exc.message


# -- durations -------------------------------------------------------------------

duration_like = st.from_regex(r"\A\s?-?[0-9]{0,14}(\.[0-9])?([wdhmsx][0-9]{0,6}){0,4}\s?\Z")
digit_like = st.text(alphabet=st.characters(categories=["Nd", "No", "Nl"]), min_size=1,
                     max_size=6)
anything = st.one_of(
    st.text(), duration_like, digit_like, st.integers(), st.floats(), st.booleans(),
    st.none(), st.lists(st.integers(), max_size=2), st.binary(max_size=5),
)


@FAST
@given(anything)
@example("²")
@example("1" * 5000)
@example("0" * 4400 + "5m")
def test_parse_duration_accepts_or_raises_usage_error(value: Any) -> None:
    try:
        seconds = parse_duration(value)
    except UsageError as exc:
        usage_error(exc)
        return
    assert isinstance(seconds, int) and not isinstance(seconds, bool)
    assert 1 <= seconds <= MAX_SECONDS


# -- names -----------------------------------------------------------------------


@FAST
@given(st.one_of(st.text(), st.from_regex(r"\A[a-z0-9._/-]{0,70}\Z"), st.integers(),
                 st.none()))
@example("../x")
@example("a/b")
@example("x" * 65)
def test_check_name_accepts_only_safe_directory_names(name: Any) -> None:
    try:
        checked = check_name(name)
    except UsageError as exc:
        usage_error(exc)
        return
    assert checked == name
    assert 1 <= len(checked) <= 64
    assert "/" not in checked and "\x00" not in checked
    assert not checked.startswith((".", "-"))
    assert checked not in (".", "..")
    assert NAME_RE.fullmatch(checked)


# -- cron ------------------------------------------------------------------------

CRON_TOKENS = ["*", "*/5", "*/0", "0", "59", "60", "1-5", "5-1", "L", "31", "30", "29",
               "2", "12", "13", "MON", "sun", "jan", "?", "#", "5#6", "1#1", "1W", "",
               "-1", "0-", ",", "1,2", "*/", "7", "8", "0-59/15", "99999999999"]
cron_like = st.lists(st.sampled_from(CRON_TOKENS), min_size=0, max_size=7).map(" ".join)


@FAST
@given(st.one_of(st.text(), cron_like, st.sampled_from(
    ["@daily", "@hourly", "@reboot", "@weekly", "@yearly", "@every 5m", "@"])))
@example("0 0 31 2 *")
@example("* * * * * *")
def test_check_cron_accepts_or_raises_usage_error(expr: str) -> None:
    try:
        text = check_cron(expr)
    except UsageError as exc:
        usage_error(exc)
        return
    assert isinstance(text, str)
    from croniter import croniter

    # Whatever was accepted must produce a next time.
    croniter(text, datetime(2026, 1, 1)).get_next(datetime)


# -- loop definitions --------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=12),
    st.sampled_from(["10m", "1h30m", "auto", "0", "-5m", "*/5 * * * *", "0 0 31 2 *",
                     "UTC", "Europe/Berlin", "Nowhere/City", "../etc", "queue", "skip",
                     "replace", "one", "none", "2026-11-30T03:00:00Z", "x{prompt}",
                     "echo {nope}", "'unclosed", "", "  ", *PRESETS]),
    st.datetimes(timezones=st.one_of(st.none(), st.just(timezone.utc))),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8)
keys = st.one_of(st.sampled_from(sorted(KEYS)), st.text(max_size=10))
base = st.fixed_dictionaries({
    "prompt": st.one_of(st.text(max_size=30), st.just("do the thing")),
    "every": st.one_of(st.sampled_from(["10m", "auto", "1s", "2d"]), values),
})
raw_loops = st.one_of(
    st.dictionaries(keys, values, max_size=8),
    st.tuples(base, st.dictionaries(keys, values, max_size=5)).map(lambda t: {**t[0], **t[1]}),
    values,
)
loop_names = st.one_of(st.from_regex(r"\A[a-z0-9][a-z0-9._-]{0,10}\Z"), st.text(max_size=8),
                       st.integers())


@FAST
@given(loop_names, raw_loops)
def test_parse_loop_accepts_or_raises_usage_error(name: Any, raw: Any) -> None:
    try:
        loop = parse_loop(name, raw)
    except UsageError as exc:
        usage_error(exc)
        return
    assert isinstance(loop, LoopDef)
    assert loop.name == name
    assert (loop.every is None) != (loop.cron is None) or loop.auto
    assert loop.min_delay <= loop.max_delay


durations = st.one_of(st.integers(1, 10 * 365 * 86400),
                      st.sampled_from(["1s", "45s", "10m", "1h30m", "2d", "1w", "3650d"]))
env_names = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,8}\Z")
valid_raw = st.one_of(
    st.fixed_dictionaries({"prompt": st.text(min_size=1).filter(str.strip),
                           "every": st.one_of(durations, st.just("auto"))}),
    st.fixed_dictionaries({"prompt_file": st.text(min_size=1),
                           "cron": st.sampled_from(["*/10 * * * *", "30 1 * * *", "@daily",
                                                    "0 9 * * MON-FRI", "0 0 29 2 *"]),
                           "tz": st.sampled_from(["UTC", "America/New_York", "Asia/Kolkata"])}),
).flatmap(lambda required: st.fixed_dictionaries({k: st.just(v) for k, v in required.items()},
                                                 optional={
    "agent": st.sampled_from(PRESETS), "cwd": st.text(min_size=1),
    "env": st.dictionaries(env_names, st.text(), max_size=3),
    "timeout": durations, "for": durations, "after": durations, "keepalive": durations,
    "max_runs": st.integers(0, 10**9), "max_failures": st.integers(0, 100),
    "no_progress": st.integers(0, 100), "keep_runs": st.integers(1, 1000),
    "budget_usd": st.floats(0.01, 1e6), "until": st.text(), "model": st.text(),
    "overlap": st.sampled_from(["queue", "skip", "replace"]),
    "catch_up": st.sampled_from(["one", "none"]), "raw": st.booleans(),
    "continue_session": st.booleans(), "yolo": st.booleans(),
    "agent_args": st.lists(st.text(), max_size=3),
    "created_at": st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                               timezones=st.just(timezone.utc)).map(
        lambda d: d.strftime("%Y-%m-%dT%H:%M:%SZ")),
}))


@FAST
@given(st.from_regex(r"\A[a-z0-9][a-z0-9._-]{0,10}\Z"), st.one_of(valid_raw, raw_loops))
def test_an_accepted_definition_survives_a_yaml_rewrite(name: str, raw: Any) -> None:
    # What the store writes back for a valid loop must read back as the same loop.
    try:
        loop = parse_loop(name, raw)
    except UsageError:
        return
    text = dump_yaml_doc({"version": 1, "loops": {name: to_raw(loop)}})
    again = parse_yaml_text(text, "rewritten")["loops"][name]
    reparsed = parse_loop(name, again)
    expected = loop.to_dict()
    got = reparsed.to_dict()
    if not loop.auto:  # delay bounds only mean something for `every: auto`
        for key in ("min_delay", "max_delay"):
            expected.pop(key)
            got.pop(key)
    assert got == expected


@pytest.mark.parametrize("text", [
    pytest.param("a\x85b", id="nel"),
    pytest.param("a\u2028b", id="line-separator"),
    pytest.param("line1\nline2 ", id="trailing-space-multiline"),
    pytest.param("a\r\nb", id="crlf"),
    pytest.param("tab\there", id="tab"),
    pytest.param("\ufeffx", id="bom"),
])
def test_rewrite_keeps_odd_characters_in_the_prompt(text: str) -> None:
    raw = {"prompt": text, "every": "10m"}
    written = dump_yaml_doc({"version": 1, "loops": {"job": raw}})
    assert parse_yaml_text(written, "rewritten")["loops"]["job"]["prompt"] == text


# -- files -----------------------------------------------------------------------

YAML_BITS = [
    "version: 1\n", "version: 2\n", "loops:\n", "  job:\n", "    prompt: hi\n",
    "    every: 10m\n", "    every: ", "2026-02-30\n", "2026-01-01 25:00:00\n",
    "!!int x\n", "!!float x\n", "!!bool x\n", "!!timestamp x\n", "!!binary x\n",
    "!!python/object:os.system {}\n", "&a [*a]\n", "*a\n", "<<: *a\n", "? [a]\n: b\n",
    "{", "[", "'", '"', "\t", "- ", ": ", "\x00", "\ufeff", "#", "---\n", "...\n",
    "%YAML 1.1\n", "!<tag:yaml.org,2002:int> x\n", "on_attention: [1]\n", "x: y\n",
    "job: {every: 1h, prompt: p}\n", "  ", "\n",
]
yaml_like = st.lists(st.sampled_from(YAML_BITS), max_size=10).map("".join)
file_bytes = st.one_of(st.binary(max_size=200), st.text().map(str.encode),
                       yaml_like.map(str.encode))


@FAST
@given(st.one_of(st.text(), yaml_like))
@example("a: 2026-02-30\n")
@example("a: !!int x\n")
@example("a: !!bool x\n")
@example("a: !!timestamp x\n")
@example("[" * 5000)
def test_parse_yaml_text_returns_data_or_unreadable(text: str) -> None:
    try:
        data = parse_yaml_text(text, "loops.yaml")
    except UnreadableError as exc:
        unreadable_error(exc)
        return
    assert_plain_data(data)


def assert_plain_data(value: Any, depth: int = 0) -> None:
    """What the safe loader may give: plain data, no Python objects."""
    from datetime import date

    assert depth < 10_000
    if isinstance(value, dict):
        for key, item in value.items():
            assert_plain_data(key, depth + 1)
            assert_plain_data(item, depth + 1)
    elif isinstance(value, list):
        for item in value:
            assert_plain_data(item, depth + 1)
    else:
        assert value is None or isinstance(value, (str, int, float, bool, bytes, date))


@FAST
@given(file_bytes)
@example(b"version: 1\nloops:\n  job:\n    created_at: 2026-02-30\n")
@example(b"version: !!int one\n")
@example(b"\xff\xfe\x00")
@example(b"")
def test_load_yaml_doc_returns_a_mapping_or_unreadable(scratch: Path, data: bytes) -> None:
    path = scratch / "loops.yaml"
    path.write_bytes(data)
    try:
        doc = load_yaml_doc(path)
    except UnreadableError as exc:
        unreadable_error(exc)
        assert str(path) in exc.message
        return
    assert isinstance(doc, dict)
    assert doc["version"] == 1
    assert isinstance(doc["loops"], dict)


@FAST
@given(file_bytes)
@example(b"version: 1\nloops:\n  job: {prompt: p, every: 2026-02-30}\n")
@example(b"version: 1\nloops:\n  1: {prompt: p, every: 1h}\n  ../x: {}\n")
def test_reading_definitions_never_raises_anything_else(scratch: Path, data: bytes) -> None:
    folder = Path(tempfile.mkdtemp(dir=scratch))
    from loopctl.storage.paths import Paths

    store = Store(Paths(config_dir=folder, state_dir=folder / "state"))
    store.paths.loops_file.write_bytes(data)
    try:
        defs = store.read_defs()
    except UnreadableError as exc:
        unreadable_error(exc)
        return
    assert set(defs.loops).isdisjoint(defs.invalid)
    for name, loop in defs.loops.items():
        assert loop.name == name


@FAST
@given(st.one_of(st.binary(max_size=200), st.text().map(str.encode),
                 st.sampled_from([b"{}", b"[]", b"null", b'{"version": 1}',
                                  b'{"version": 1, "loops": []}'])))
@example(b"[" * 3000)
def test_reading_state_returns_a_state_or_unreadable(scratch: Path, data: bytes) -> None:
    path = scratch / "state.json"
    path.write_bytes(data)
    try:
        state = read_state_file(path)
    except UnreadableError as exc:
        unreadable_error(exc)
        return
    assert state["version"] == 1 and isinstance(state["loops"], dict)


# -- the known bugs, one input each ------------------------------------------------


@pytest.mark.parametrize("text", [
    pytest.param("created_at: 2026-02-30\n", id="impossible-date"),
    pytest.param("created_at: 2026-01-01 25:00:00\n", id="impossible-hour"),
    pytest.param("max_runs: !!int x\n", id="bad-int-tag"),
    pytest.param("budget_usd: !!float x\n", id="bad-float-tag"),
    pytest.param("raw: !!bool x\n", id="bad-bool-tag"),
    pytest.param("created_at: !!timestamp x\n", id="bad-timestamp-tag"),
    pytest.param("x: !!python/object:os.system {}\n", id="python-tag"),
    pytest.param("x: !!binary 'x'\n", id="bad-base64"),
    pytest.param("[" * 5000, id="deep-nesting"),
    pytest.param("a: 1\na: 2\n", id="duplicate-key"),
])
def test_bad_yaml_scalars_fail_closed_with_exit_3(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad-loops.yaml"
    path.write_text("version: 1\nloops:\n  job:\n    prompt: p\n    every: 1h\n" +
                    "".join("    " + line + "\n" for line in text.splitlines()))
    with pytest.raises(UnreadableError) as info:
        load_yaml_doc(path)
    unreadable_error(info.value)
    assert str(path) in info.value.message and "line" in info.value.message


def test_deeply_nested_state_file_fails_closed_with_exit_3(tmp_path: Path) -> None:
    path = tmp_path / "deep-state.json"
    path.write_bytes(b"[" * 3000)
    with pytest.raises(UnreadableError):
        read_state_file(path)
