"""The rules between a loop's schedule keys are the settings rows' (`excludes`,
`needs`, `at_most`: domain/loop_settings.py), said once by domain/setting_rules
in the words of the route that gave each key, for `start`, `update` and
loops.yaml alike (issue 52 item 1). On `update`, a key given replaces what
its row excludes (`--every` a cron schedule and its zone)."""

from __future__ import annotations

import pytest
import yaml

from conftest import CLI
from loopctl.domain import setting_rules


def test_the_rows_declare_each_schedule_rule_once() -> None:
    assert ("agent", "command") in setting_rules.EXCLUDES
    assert {("on_demand", k) for k in ("every", "cron", "tz", "after")} \
        <= set(setting_rules.EXCLUDES)
    assert ("min_delay", "max_delay") in setting_rules.AT_MOST
    assert ("tz", "cron") in setting_rules.NEEDS


@pytest.mark.parametrize(("given", "gone"), [
    ({"every"}, {"cron", "tz", "on_demand"}),
    ({"cron"}, {"every", "on_demand"}),
    ({"on_demand"}, {"every", "cron", "tz", "after"}),
    ({"cron", "tz"}, {"every", "on_demand"}),
    # A zone qualifies a schedule: it replaces nothing.
    ({"tz"}, set()),
    ({"timeout"}, set()),
])
def test_what_an_update_replaces(given: set[str], gone: set[str]) -> None:
    assert setting_rules.displaced(given) == gone


@pytest.mark.parametrize(("args", "said"), [
    (["--every", "1m", "--cron", "* * * * *"], "give --every or --cron, not both"),
    (["--on-demand", "--every", "1m"],
     "--every does not apply with --on-demand (it has no time schedule)"),
    (["--on-demand", "--after", "1m"],
     "--after does not apply with --on-demand (it has no time schedule)"),
    (["--every", "1m", "--tz", "Europe/Berlin"], "--tz needs --cron"),
    (["--every", "1m", "--agent", "claude", "--command", "prog"],
     "give --agent or --command, not both"),
    (["--every", "auto", "--min-delay", "2h", "--max-delay", "1h"],
     "--min-delay is longer than --max-delay"),
])
def test_start_says_each_rule_in_its_options(cli: CLI, args: list[str], said: str) -> None:
    proc = cli("start", "--name", "job", *args, "p")
    assert (proc.returncode, proc.stderr.strip()) == (2, f"loopctl: error: {said}")
    assert not (cli.home / "loops.yaml").exists() or "job" not in (
        cli.home / "loops.yaml").read_text()


def loop_of(cli: CLI, name: str) -> dict[str, object]:
    entry: dict[str, object] = yaml.safe_load((cli.home / "loops.yaml").read_text())["loops"][name]
    return entry


def test_update_gives_a_cron_loop_its_zone_alone(cli: CLI) -> None:
    """`update --tz` on a cron loop: the rule reads the loop as it will be,
    not the options alone (it used to ask for --cron again)."""
    cli("start", "--name", "c", "--cron", "0 9 * * *", "p", check=0)
    cli("update", "c", "--tz", "Europe/Berlin", check=0)
    assert (loop_of(cli, "c")["cron"], loop_of(cli, "c")["tz"]) == ("0 9 * * *", "Europe/Berlin")


def test_update_replaces_a_schedule_and_refuses_two(cli: CLI) -> None:
    cli("start", "--name", "c", "--cron", "0 9 * * *", "--tz", "UTC", "p", check=0)
    before = (cli.home / "loops.yaml").read_text()
    proc = cli("update", "c", "--every", "5m", "--cron", "* * * * *")
    assert (proc.returncode, proc.stderr.strip()) == (
        2, "loopctl: error: give --every or --cron, not both")
    proc = cli("update", "c", "--every", "5m", "--on-demand")
    assert "--every does not apply with --on-demand" in proc.stderr
    assert (cli.home / "loops.yaml").read_text() == before  # nothing written
    cli("update", "c", "--every", "5m", check=0)
    entry = loop_of(cli, "c")
    assert entry["every"] == "5m" and "cron" not in entry and "tz" not in entry
    cli("update", "c", "--on-demand", check=0)
    entry = loop_of(cli, "c")
    assert entry.get("on_demand") is True and "every" not in entry
    proc = cli("update", "c", "--tz", "UTC")  # the file's on_demand, in its own words
    assert proc.stderr.strip() == ("loopctl: error: --tz does not apply with 'on_demand: "
                                   "true' (it has no time schedule)")
    cli("update", "c", "--cron", "0 0 * * *", "--tz", "UTC", check=0)
    entry = loop_of(cli, "c")
    assert (entry["cron"], entry["tz"], entry.get("on_demand")) == ("0 0 * * *", "UTC", None)
