"""The checks a loop definition's values pass, one function each: names,
cron expressions, zones, env pairs, commands, notification URLs. Pure;
`model.parse_loop` and `start`/`update` share them."""

from __future__ import annotations

import re

from loopctl.domain.errors import UsageError, shorten
from loopctl.domain.names import is_loop_name
from loopctl.fast.lazy_re import lazy

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Iterable

PLACEHOLDERS = ("prompt", "prompt_file", "loop", "run_id")
# A command, gate or check in all (its text, or its list's items together).
# The kernel takes no argument over 128 KiB anyway, and shlex.split slows
# down badly on long input: an 8 MiB `check:` in a hand-edited loops.yaml
# held every command that reads the definitions for minutes.
MAX_COMMAND = 32 * 1024

MAX_NOTIFY_URL = 2000
MAX_NOTIFY_TARGETS = 20


def check_notify_urls(urls: object, where: str) -> tuple[str, ...]:
    """What a definition may hold: a list of short `scheme://...` strings.
    Pure and light (every read of loops.yaml runs it); Apprise's own parser
    checks them at `start`, `update` and `notify test`."""
    if urls is None:
        return ()
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or len(urls) > MAX_NOTIFY_TARGETS or not all(
            isinstance(u, str) and "://" in u and len(u) <= MAX_NOTIFY_URL
            and not any(c in u for c in "\r\n\0 ") for u in urls):
        raise UsageError(f"{where}: 'notify' must be a list of Apprise URLs like "
                         f"'ntfy://topic' (at most {MAX_NOTIFY_TARGETS})")
    return tuple(dict.fromkeys(urls))


def check_notify_targets(value: object, where: str) -> dict[str, tuple[str, ...]]:
    """Top-level `notify_targets:`, names for URLs, so that `digest --notify
    NAME` and `doctor --notify NAME` keep tokens out of argv and crontabs."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_NOTIFY_TARGETS \
            or not all(is_loop_name(k) for k in value):
        raise UsageError(f"{where}: 'notify_targets' must map names (1-64 of a-z 0-9 . _ -) "
                         f"to Apprise URLs, like 'ops: ntfy://topic' (at most "
                         f"{MAX_NOTIFY_TARGETS})")
    return {k: check_notify_urls(v, f"{where}: notify_targets {k}") for k, v in value.items()}


def targets_for(loop_notify: Iterable[str], global_notify: object) -> list[str]:
    """The loop's targets and those of every loop (top-level `notify:`).
    Here, not in integrations/notify: each fire names them, and a run
    without any must not import the sender."""
    shared = [global_notify] if isinstance(global_notify, str) else \
        global_notify if isinstance(global_notify, list) else []
    return list(dict.fromkeys([*loop_notify, *(u for u in shared if isinstance(u, str))]))


def check_name(name: object) -> str:
    if not isinstance(name, str):
        raise UsageError(f"bad loop name {name!r}: YAML reads it as {type(name).__name__}, "
                         "not text; quote it")
    if not is_loop_name(name):
        raise UsageError(
            f"bad loop name {shorten(name, 80)}: expected 1-64 of a-z 0-9 . _ -, "
            "not starting with . or -"
        )
    return name


CRON_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day", 1, 31), ("month", 1, 12),
               ("weekday", 0, 7))


def cron_field_fault(text: str) -> str:
    """Which of five fields croniter refused, and why when a number is out
    of its range: `minute 61 is out of range 0-59`."""
    from croniter import croniter

    for index, (field, low, high) in enumerate(CRON_FIELDS):
        value = text.split(" ")[index]
        for number in value.replace("/", ",").replace("-", ",").split(",")[:50]:
            if number.isascii() and number.isdigit() and f"/{number}" not in value \
                    and (len(number) > 4 or not low <= int(number) <= high):
                shown = number if len(number) <= 12 else number[:12] + "..."
                return f"{field} {shown} is out of range {low}-{high}"
        probe = ["*"] * 5
        probe[index] = value
        if not croniter.is_valid(" ".join(probe)):
            return f"the {field} field {value[:40]!r} is not valid"
    return "expected five valid cron fields"


def check_cron(expr: str, what: str = "cron") -> str:
    """Five fields (or an @daily-style alias), and a date that can occur.
    `what` names the option at `start` (`bad --cron ...`)."""
    from croniter import croniter

    text = " ".join(expr.split())
    if text.startswith("@"):
        if text == "@reboot":
            raise UsageError(f"bad {what} '@reboot': loopctl has no boot event; use --after")
    elif len(text.split(" ")) != 5:
        raise UsageError(
            f"bad {what} {expr!r}: expected five fields (minute hour day month weekday)"
        )
    if not croniter.is_valid(text):
        raise UsageError(f"bad {what} {expr!r}: {cron_field_fault(text)}")
    try:
        from datetime import datetime

        from loopctl.domain.schedule import cron_iter

        cron_iter(text, datetime(2026, 1, 1)).get_next(datetime)
    except Exception:
        raise UsageError(f"bad {what} {expr!r}: it names a date that never occurs") from None
    return text


def check_tz(zone: str, what: str = "time zone") -> str:
    from zoneinfo import ZoneInfo

    try:
        if not zone or zone.startswith(("/", ".")) or ".." in zone:
            raise ValueError(zone)
        ZoneInfo(zone)
    except Exception:
        raise UsageError(
            f"bad {what} {zone!r}: expected an IANA name like Europe/Berlin or UTC"
        ) from None
    return zone


ENV_NAME_RE = lazy(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_env_pair(pair: str) -> tuple[str, str | None]:
    """`KEY=VALUE`, or `KEY` alone: take KEY from the driver's environment at
    fire time (how secrets stay out of loops.yaml and every export)."""
    key, sep, value = pair.partition("=")
    if not ENV_NAME_RE.fullmatch(key):
        raise UsageError(f"bad --env {pair!r}: expected KEY=VALUE or KEY, with KEY like MY_VAR")
    return key, value if sep else None


# What `shlex.quote` leaves bare (its `[^\w@%+=:,./-]` under re.ASCII).
_SHELL_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+=:,./-")


def shell_quote(arg: str) -> str:
    """`shlex.quote(arg)`, without importing `shlex` (which compiles its
    pattern at import: each run's log header and shim quote a few words)."""
    if not arg:
        return "''"
    if all(char in _SHELL_SAFE for char in arg):
        return arg
    return "'" + arg.replace("'", "'\"'\"'") + "'"


def shell_join(argv: Iterable[str]) -> str:
    """`shlex.join(argv)`."""
    return " ".join(map(shell_quote, argv))


def split_command(command: object, where: str, key: str = "command",
                  placeholders: bool = True) -> tuple[str, ...]:
    """A command split like a shell, run without one: `command` (with its
    placeholders) or a gate's `if` (run as written: it gets no prompt)."""
    label = "command" if key == "command" else repr(key)
    if isinstance(command, (str, list)) and _too_long(command):
        raise UsageError(f"{where}: {key!r} is longer than {MAX_COMMAND} characters; "
                         "expected a program and arguments (put a long script in a file)")
    if isinstance(command, str):
        import shlex  # here: `shlex` compiles a pattern at import, and runs join lists

        try:
            argv = shlex.split(command)
        except ValueError as exc:
            raise UsageError(f"{where}: bad {label} {command[:80]!r}: {exc}") from None
    elif isinstance(command, list) and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        raise UsageError(f"{where}: {key!r} must be a string or a list of strings")
    if not argv:
        raise UsageError(f"{where}: {key!r} is empty; expected a program and arguments")
    if any("\0" in arg for arg in argv):  # execve cannot pass it: the run would crash
        raise UsageError(f"{where}: {key!r} holds a NUL character; expected a program and "
                         "arguments without one")
    for arg in argv if placeholders else ():
        for name in re.findall(r"\{(\w*)\}", arg):
            if name not in PLACEHOLDERS:
                raise UsageError(
                    f"{where}: unknown placeholder {{{name}}} in command; expected one of "
                    + ", ".join("{" + p + "}" for p in PLACEHOLDERS)
                )
    return tuple(argv)


def _too_long(command: str | list[object]) -> bool:
    if isinstance(command, str):
        return len(command) > MAX_COMMAND
    return len(command) > MAX_COMMAND or sum(
        len(arg) + 1 for arg in command if isinstance(arg, str)) > MAX_COMMAND


# -- git names ------------------------------------------------------------------------
#
# One rule for a branch (`--base`, `base:`) and one for a prefix of run
# branches, shared by loops.yaml and the options: the characters a person
# types into a branch name here, and git's own structural rules
# (git-check-ref-format(1)), so that nothing accepted in one place is refused
# by git, or by the other place, later.
_BRANCH_CHARS = lazy(r"[A-Za-z0-9_][A-Za-z0-9._/-]{0,199}")
_REMOTE_CHARS = lazy(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
MAX_PREFIX = 61


def is_branch_name(name: object) -> bool:
    """What git accepts as a branch (`check-ref-format --branch`), in the
    characters above: no `..`, no `@{`, no component starting with `.` or
    ending in `.lock`, no empty component, not ending in `.` or `/`, not
    `HEAD`, never starting with `-`."""
    if not isinstance(name, str) or not _BRANCH_CHARS.fullmatch(name) or name == "HEAD":
        return False
    if ".." in name or "@{" in name or name.endswith((".", "/")):
        return False
    return all(part and not part.startswith(".") and not part.endswith(".lock")
               for part in name.split("/"))


def check_branch(name: object, what: str) -> str:
    if not is_branch_name(name):
        raise UsageError(f"bad {what} {str(name)[:80]!r}: expected a git branch name like main")
    assert isinstance(name, str)
    return name


def check_branch_prefix(prefix: object, what: str) -> str:
    """A prefix of run branches: ends in `/`, and a branch under it is one."""
    if not isinstance(prefix, str) or not prefix.endswith("/") or len(prefix) > MAX_PREFIX \
            or not is_branch_name(prefix + "x"):
        raise UsageError(f"bad {what} {str(prefix)[:80]!r}: expected letters, digits, . _ - "
                         "and ending in /, like loopctl/")
    return prefix


def check_remote(name: object, what: str) -> str:
    if not isinstance(name, str) or not _REMOTE_CHARS.fullmatch(name) or ".." in name \
            or name.endswith((".lock", ".")):
        raise UsageError(f"bad {what} {str(name)[:80]!r}: expected a git remote name like "
                         "origin")
    return name
