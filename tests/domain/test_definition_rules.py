"""Every rule `parse_loop` applies to a hand-written loops.yaml entry (DESIGN
§2, §11): a bad value is refused with a message that names the loop, the key
and what was expected; nothing is silently adjusted. Pure: no files."""

from __future__ import annotations

from typing import Any

import pytest

from loopctl.domain.checks import check_notify_urls, split_command
from loopctl.domain.errors import UsageError
from loopctl.domain.model import parse_loop

BASE = {"prompt": "p", "every": "10m"}


def refused(raw: dict[str, Any]) -> str:
    with pytest.raises(UsageError) as info:
        parse_loop("job", raw)
    return info.value.message


@pytest.mark.parametrize(("change", "message"), [
    # what the loop runs
    ({"prompt": 5}, "loop 'job': 'prompt' must be text, got int"),
    ({"yolo": "yes"}, "loop 'job': 'yolo' must be true or false"),
    ({"agent": "claude", "command": "prog"}, "loop 'job': give 'agent' or 'command', not both"),
    ({"agent": "chatgpt"}, "loop 'job': unknown agent 'chatgpt'; expected one of claude,"),
    ({"command": 5}, "loop 'job': 'command' must be a string or a list of strings"),
    ({"command": ["prog", 1]}, "loop 'job': 'command' must be a string or a list of strings"),
    ({"command": "prog 'unclosed"}, "loop 'job': bad command \"prog 'unclosed\": No closing"),
    ({"command": ""}, "loop 'job': 'command' is empty; expected a program and arguments"),
    ({"command": []}, "loop 'job': 'command' is empty; expected a program and arguments"),
    ({"command": "prog {promt}"}, "loop 'job': unknown placeholder {promt} in command; "
                                  "expected one of {prompt}, {prompt_file}, {loop}, {run_id}"),
    ({"env": ["A=1"]}, "loop 'job': 'env' must map names to text values"),
    ({"env": {"A": True}}, "loop 'job': 'env' must map names to text values"),
    ({"env": {"A": "\udc80"}}, "loop 'job': 'env' is not valid UTF-8 text"),
    ({"agent_args": ["--ok", "\udc80"]}, "loop 'job': 'agent_args' is not valid UTF-8 text"),
    ({"agent_args": "--model x"}, "loop 'job': 'agent_args' must be a list of strings"),
    ({"notify": 5}, "loop 'job': 'notify' must be a list of Apprise URLs"),
    ({"notify": ["ntfy://a b"]}, "loop 'job': 'notify' must be a list of Apprise URLs"),
    # when it was created (deadlines are computed from it)
    ({"created_at": "yesterday"}, "loop 'job': 'created_at' must be an ISO-8601 time"),
    ({"created_at": 1764471600}, "loop 'job': 'created_at' must be an ISO-8601 time"),
    ({"created_at": "1969-12-31T23:00:00Z"}, "loop 'job': 'created_at' must be an ISO-8601"),
    # year 1 at +14:00 is before datetime's first UTC instant: no crash
    ({"created_at": "0001-01-01T00:00:00+14:00"}, "loop 'job': 'created_at' must be an ISO"),
    # the schedule
    ({"cron": "0 * * * *"}, "loop 'job': give 'every' or 'cron', not both"),
    ({"every": None}, "loop 'job': give exactly one of 'every' or 'cron'"),
    ({"every": None, "cron": 5}, "loop 'job': 'cron' must be text like '*/10 * * * *'"),
    ({"tz": "Europe/Berlin"}, "loop 'job': 'tz' needs 'cron'"),
    ({"agent": "claude", "command": "prog", "on_demand": True, "every": None},
     "loop 'job': give 'agent' or 'command', not both"),
    ({"on_demand": True}, "loop 'job': 'every' does not apply with 'on_demand: true' "
                          "(it has no time schedule)"),
    ({"on_demand": True, "every": None, "tz": "UTC"},
     "loop 'job': 'tz' does not apply with 'on_demand: true' (it has no time schedule)"),
    ({"every": "auto", "min_delay": "2h", "max_delay": "1h"},
     "loop 'job': 'min_delay' is longer than 'max_delay'"),
    # limits and policy
    ({"budget_usd": True}, "loop 'job': 'budget_usd' must be a positive number of dollars"),
    ({"budget_usd": 0}, "loop 'job': 'budget_usd' must be a positive number of dollars"),
    ({"budget_usd": "5"}, "loop 'job': 'budget_usd' must be a positive number of dollars"),
    ({"overlap": "sometimes"},
     "loop 'job': 'overlap' must be one of queue, skip, replace, got 'sometimes'"),
    ({"catch_up": "all"}, "loop 'job': 'catch_up' must be one of one, none, got 'all'"),
    # the workspace
    ({"worktree": True, "base": "-main"}, "loop 'job': bad 'base' '-main': expected a git "
                                          "branch name like main"),
    ({"worktree": True, "base": "a..b"}, "loop 'job': bad 'base' 'a..b'"),
    ({"worktree": True, "branch_prefix": "bots"},
     "loop 'job': bad 'branch_prefix' 'bots': expected letters, digits, . _ - and ending "
     "in /, like loopctl/"),
    ({"worktree": True, "push": "origin", "pr": True, "merge": "fast-forward"},
     "loop 'job': 'merge' must be one of squash, merge, rebase"),
    ({"worktree": True, "copy": ["/etc/passwd"]},
     "loop 'job': 'copy' must be a list of globs inside the repository"),
    ({"worktree": True, "copy": ["config/../../x"]},
     "loop 'job': 'copy' must be a list of globs inside the repository"),
    ({"worktree": True, "copy": ".env"},
     "loop 'job': 'copy' must be a list of globs inside the repository"),
])
def test_a_bad_value_is_refused_naming_loop_and_key(change: dict[str, Any],
                                                    message: str) -> None:
    assert refused({**BASE, **change}).startswith(message)


def test_a_command_given_as_a_list_is_kept_word_for_word() -> None:
    loop = parse_loop("job", {**BASE, "command": ["my agent", "--msg", "{prompt}", "a b"]})
    assert loop.command == ("my agent", "--msg", "{prompt}", "a b")
    assert loop.agent is None
    assert split_command("prog --flag '{loop} x'", "w") == ("prog", "--flag", "{loop} x")


def test_created_at_is_normalised_to_utc_and_a_naive_time_means_utc() -> None:
    assert parse_loop("job", {**BASE, "created_at": "2026-11-30T04:00:00+01:00"}) \
        .created_at == "2026-11-30T03:00:00Z"
    assert parse_loop("job", {**BASE, "created_at": "2026-11-30T03:00:00"}) \
        .created_at == "2026-11-30T03:00:00Z"


def test_a_full_workspace_entry_parses() -> None:
    loop = parse_loop("job", {**BASE, "worktree": True, "base": "main", "push": "origin",
                              "pr": True, "merge": "squash", "branch_prefix": "bots/",
                              "copy": [".env", "config/*.local"]})
    assert (loop.base, loop.push, loop.pr, loop.merge, loop.branch_prefix, loop.copy) == \
        ("main", "origin", True, "squash", "bots/", (".env", "config/*.local"))


def test_notify_urls_are_deduplicated_in_order_and_a_single_url_is_a_list() -> None:
    assert check_notify_urls("ntfy://t", "w") == ("ntfy://t",)
    assert check_notify_urls(["json://a", "ntfy://t", "json://a"], "w") == \
        ("json://a", "ntfy://t")
    with pytest.raises(UsageError, match="at most 20"):
        check_notify_urls([f"ntfy://t{i}" for i in range(21)], "w")


# -- git names: one rule for loops.yaml and the options (issue 23) -----------------------

GIT_NAMES = ["main", "release/1.x", "_bots", "a..b", "a/.hidden", "x.lock", "a//b", "a/",
             "-rf", "HEAD", "a@{1}", "trailing.", "ünïcode", "a b", "a" * 201]
PREFIXES = ["loopctl/", "_bots/", "bots/team/", "nope", "a..b/", ".x/", "x.lock/", "-x/",
            "a//", "/"]


def accepted(check: Any) -> bool:
    try:
        check()
        return True
    except UsageError:
        return False


def in_file(key: str, value: str) -> Any:
    return lambda: parse_loop("x", {"prompt": "p", "every": "1h", "cwd": "/tmp",
                                    "worktree": True, key: value})


@pytest.mark.parametrize("name", GIT_NAMES)
def test_a_base_branch_is_judged_alike_in_loops_yaml_and_by_the_option(name: str) -> None:
    """The option (`--base`) and the file (`base:`) share one rule, and what it
    accepts git accepts too (`git check-ref-format --branch`)."""
    import subprocess

    from loopctl.integrations.git import check_ref

    by_option = accepted(lambda: check_ref(name, "--base"))
    git = subprocess.run(["git", "check-ref-format", "--branch", name],
                         capture_output=True).returncode == 0
    assert by_option == accepted(in_file("base", name))
    assert not by_option or git, f"loopctl accepts {name!r}, git refuses it"


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_branch_prefix_is_judged_alike_in_loops_yaml_and_by_the_option(prefix: str) -> None:
    from loopctl.integrations.git import check_prefix

    by_option = accepted(lambda: check_prefix(prefix))
    assert by_option == accepted(in_file("branch_prefix", prefix)), prefix
    assert by_option == (prefix in ("loopctl/", "_bots/", "bots/team/")), prefix
