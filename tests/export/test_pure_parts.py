"""Pure parts of `loopctl export`: UTC conversion for GitHub, the pinned
install source (PEP 610), systemd quoting, and the traveling definition."""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from loopctl.domain.errors import UsageError
from loopctl.domain.model import parse_loop
from loopctl.integrations.export import (
    secret_names,
    secrets_env_file,
    systemd_quote,
    traveling_definition,
)
from loopctl.integrations.export.schedules import github_schedule, longest_gap, zone_offsets
from loopctl.integrations.install_source import check_spec, spec_from_direct_url
from loopctl.storage.yamlio import parse_yaml_text


@pytest.mark.parametrize(("expr", "tz", "crons", "offsets"), [
    ("30 9 * * 1-5", "Europe/Berlin", ("30 8 * * 1-5", "30 7 * * 1-5"),
     {"30 8 * * 1-5": "+0100", "30 7 * * 1-5": "+0200"}),
    ("0 9,17 * * *", "America/New_York", ("0 14,22 * * *", "0 13,21 * * *"),
     {"0 14,22 * * *": "-0500", "0 13,21 * * *": "-0400"}),
    ("15 * * * *", "Europe/Berlin", ("15 * * * *",), {}),  # every hour: no shift needed
    ("0 3 * * *", "Asia/Tokyo", ("0 18 * * *",), {}),      # no DST: one line, no guard
    ("30 2 * * *", "Asia/Kolkata", ("0 21 * * *",), {}),   # a half-hour offset
    ("0 9 * * *", "UTC", ("0 9 * * *",), {}),
    ("0 9 * * *", None, ("0 9 * * *",), {}),
])
def test_github_gets_one_utc_line_per_offset(expr: str, tz: str | None,
                                             crons: tuple[str, ...],
                                             offsets: dict[str, str]) -> None:
    schedule = github_schedule(expr, tz, year=2026)
    assert schedule.crons == crons
    assert schedule.offsets == offsets
    assert schedule.needs_guard == bool(offsets)


def test_a_shift_across_midnight_with_a_day_field_is_refused() -> None:
    with pytest.raises(UsageError, match="cross midnight"):
        github_schedule("30 2 * * 1", "Asia/Tokyo", year=2026)  # Sunday 17:30 UTC
    # Without day fields the wrap is harmless.
    assert github_schedule("30 1 * * *", "Asia/Tokyo", year=2026).crons == ("30 16 * * *",)


def test_zone_offsets_see_daylight_saving() -> None:
    assert len(zone_offsets("Europe/Berlin", 2026)) == 2
    assert len(zone_offsets("Asia/Tokyo", 2026)) == 1


def test_longest_gap_finds_sparse_schedules() -> None:
    assert longest_gap("0 0 1 * *") > 7 * 86400
    assert longest_gap("*/10 * * * *") == 600


# -- install source -------------------------------------------------------------------

GOOD_SPECS = ["loopctl @ git+https://github.com/o/loopctl@v1.2.3",
              "https://example.org/loopctl-1.0-py3-none-any.whl", "./tools/loopctl", "/opt/x"]


@pytest.mark.parametrize("spec", GOOD_SPECS)
def test_pinned_specs_pass(spec: str) -> None:
    assert check_spec(spec) == spec


@pytest.mark.parametrize("spec", ["loopctl", "loopctl==1.0", "loopctl>=0.1", "", "-e .",
                                  "--index-url=http://evil/ loopctl",
                                  "loopctl @ git+https://x/${{ github.token }}",
                                  "./x\nrm -rf /"])
def test_bare_names_and_injections_are_refused(spec: str) -> None:
    with pytest.raises(UsageError, match="--install"):
        check_spec(spec)


@pytest.mark.parametrize(("data", "spec"), [
    ({"url": "https://github.com/o/loopctl", "vcs_info": {"vcs": "git", "commit_id": "abc1"}},
     "loopctl @ git+https://github.com/o/loopctl@abc1"),
    ({"url": "https://x/loopctl-1.0.whl", "archive_info": {"hashes": {"sha256": "f00"}}},
     "loopctl @ https://x/loopctl-1.0.whl#sha256=f00"),
    ({"url": "https://x/loopctl-1.0.whl", "archive_info": {}},
     "loopctl @ https://x/loopctl-1.0.whl"),
])
def test_the_install_source_comes_from_pep_610(data: dict[str, Any], spec: str) -> None:
    assert spec_from_direct_url(data) == spec


@pytest.mark.parametrize("data", [None, {}, {"url": "file:///home/me/loopctl",
                                             "dir_info": {"editable": True}},
                                  {"url": "file:///tmp/loopctl.whl", "archive_info": {}}])
def test_a_local_or_index_install_cannot_travel(data: dict[str, Any] | None) -> None:
    with pytest.raises(UsageError, match="--install"):
        spec_from_direct_url(data)


# -- quoting and the definition that travels ------------------------------------------


@pytest.mark.parametrize("value", ["/home/a b/x", "/srv/100%/x", 'q"uote', "back\\slash",
                                   "$HOME/x"])
def test_systemd_quote_round_trips_through_c_style_unquoting(value: str) -> None:
    quoted = systemd_quote(value)
    # systemd: `%%` is a literal `%`, `$$` a literal `$`, then C-style quotes.
    unescaped = quoted.replace("%%", "%").replace("$$", "$")
    assert shlex.split(unescaped) == [value]


def test_a_line_break_cannot_enter_a_unit() -> None:
    with pytest.raises(UsageError, match="line break"):
        systemd_quote("/tmp/a\n[Service]\nExecStart=/bin/evil")


def loop_with_env() -> Any:
    return parse_loop("x", {"prompt": "p", "every": "1h", "agent": "claude",
                            "env": {"TOKEN": "sk-secret", "FROM_DRIVER": None}})


def test_the_traveling_definition_carries_names_not_values() -> None:
    text = traveling_definition(loop_with_env(), None)
    assert "sk-secret" not in text
    env = parse_yaml_text(text, "x")["loops"]["x"]["env"]
    assert env == {"FROM_DRIVER": None, "TOKEN": None}
    assert parse_loop("x", parse_yaml_text(text, "x")["loops"]["x"]).env == env


def test_secret_names_include_the_presets_api_key() -> None:
    assert secret_names(loop_with_env()) == ["ANTHROPIC_API_KEY", "FROM_DRIVER", "TOKEN"]


def test_the_secrets_file_takes_values_from_the_loop_then_the_environment() -> None:
    text, missing = secrets_env_file(loop_with_env(), {"FROM_DRIVER": "v2"})
    assert text == "FROM_DRIVER=v2\nTOKEN=sk-secret\n"
    assert missing == ["ANTHROPIC_API_KEY"]
