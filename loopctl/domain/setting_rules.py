"""The rules of the settings table's rows (domain/loop_settings.py), each
written once and said in the words of the route that gave the value:
`'max_procs'` and `'push' needs 'worktree: true'` for loops.yaml,
`--max-procs` and `--push needs --worktree` for the command line.

`read` is the one function per kind that turns a given value into what its
LoopDef field holds, used by `model.parse_loop` for both routes (the CLI
hands values on unparsed and names them: `option_name`, `given_by_options`);
`NEEDS` are the rows' context rules between keys; `CONTEXT_RULES` name the
rules that read the machine (checked by integrations/context_rules.py).
Pure: no Typer, no I/O.
"""

from __future__ import annotations

from loopctl.domain.errors import UsageError
from loopctl.domain.loop_settings import BY_KEY, SETTINGS, Setting, expected, problem

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

# The context rules rows name (`context`), as the reference says them.
CONTEXT_RULES = {
    "git_repository": "the loop's cwd must be in a git repository (checked by start, update "
                      "and validate)",
}


def rules_text(setting: Setting) -> str:
    """A row's rules as the reference says them: `Needs 'check'.`"""
    said = []
    if setting.needs:
        said.append("Needs " + " and ".join(map(_as_set, setting.needs)) + ".")
    if setting.excludes:
        said.append("Not with " + ", ".join(map(repr, setting.excludes)) + ".")
    if setting.at_most:
        said.append(f"At most {setting.at_most!r}.")
    said += [CONTEXT_RULES[name][:1].upper() + CONTEXT_RULES[name][1:] + "."
             for name in setting.context]
    return " ".join(said)


# Each row's named rule `needs`, in the order errors name them: the one rule
# behind `'push' needs 'worktree: true'` and `--push needs --worktree`, and
# `'check_timeout' needs 'check'`.
NEEDS = tuple((s.key, needed) for s in SETTINGS for needed in s.needs)


def unmet_need(values: dict[str, Any]) -> tuple[str, str] | None:
    """The first (setting, needed) of NEEDS `values` breaks (truthy: set)."""
    return next(((key, needed) for key, needed in NEEDS
                 if values.get(key) and not values.get(needed)), None)


def goes_with(key: str) -> tuple[str, ...]:
    """`key` and the rows that go when it is cleared (`--check none`,
    `--no-worktree`): those written only with it (`when`) or that need it,
    and theirs in turn, in the table's order."""
    keys = {key}
    for _ in SETTINGS:  # a chain is at most as long as the table
        more = {s.key for s in SETTINGS if s.when in keys or keys & set(s.needs)} - keys
        if not more:
            break
        keys |= more
    return tuple(s.key for s in SETTINGS if s.key in keys)


def yaml_name(key: str) -> str:
    """A key as loops.yaml errors name it: `'max_procs'`."""
    return repr(key)


def option_name(key: str) -> str:
    """A key as command-line errors name it: `--max-procs` (its row's flag)."""
    row = BY_KEY.get(key)
    return row.option if row is not None and row.option else yaml_name(key)


# Each row's named rule `excludes`: the one rule behind `give 'agent' or
# 'command', not both` and `--every does not apply with --on-demand`.
EXCLUDES = tuple((s.key, other) for s in SETTINGS for other in s.excludes)
# Each row's named rule `at_most`: `'min_delay' is longer than 'max_delay'`.
AT_MOST = tuple((s.key, s.at_most) for s in SETTINGS if s.at_most)


def clash(given: Any) -> tuple[str, str] | None:
    """The first (setting, excluded) of EXCLUDES both of which are `given`
    (a collection of the keys set)."""
    return next(((key, other) for key, other in EXCLUDES if key in given and other in given),
                None)


def clash_text(key: str, other: str, named: Callable[[str], str] = yaml_name) -> str:
    """The one wording of a row's `excludes` rule, in the route's words:
    a mode (a flag) makes the other key mean nothing; two ways to say one
    thing (`agent`, `command`) are one too many."""
    row = BY_KEY[key]
    if row.kind != "flag":
        return f"give {named(key)} or {named(other)}, not both"
    mode = named(key) if is_option(named(key)) else _as_set(key)
    return f"{named(other)} does not apply with {mode}" + (
        f" ({row.excludes_why})" if row.excludes_why else "")


def exceeded(values: dict[str, Any]) -> tuple[str, str] | None:
    """The first (setting, limit) of AT_MOST whose values (given, else the
    row's default) break it."""
    def value(key: str) -> Any:
        given = values.get(BY_KEY[key].name)
        return BY_KEY[key].default if given is None else given

    return next(((key, limit) for key, limit in AT_MOST if value(key) > value(limit)), None)


def exceeded_text(key: str, limit: str, named: Callable[[str], str] = yaml_name) -> str:
    """The one wording of a row's `at_most` rule."""
    longer = "longer" if BY_KEY[key].kind == "duration" else "more"
    return f"{named(key)} is {longer} than {named(limit)}"


def displaced(given: Any) -> set[str]:
    """The keys an `update` that gives `given` (the keys set) takes out of
    the loop's definition: those each excludes or that exclude it (`--every`
    replaces `cron`, `--on-demand` every time schedule), and the rows that
    go with them (`tz` with `cron`)."""
    # A key that needs another (`tz`) qualifies a schedule, it does not replace one.
    replacing = {key for key in given if key in BY_KEY and not BY_KEY[key].needs}
    gone = {other for key, other in EXCLUDES if key in replacing} \
        | {key for key, other in EXCLUDES if other in replacing}
    return {kept for key in gone for kept in goes_with(key)} - set(given)


def _as_set(key: str) -> str:
    """A key as a rule names it in loops.yaml: `'worktree: true'` for a flag."""
    return repr(f"{key}: true" if BY_KEY[key].kind == "flag" else key)


def given_by_options(keys: Any) -> Callable[[str], str]:
    """The names of one `start`/`update`: each key given on the command
    line by its option, any other (read from loops.yaml) by itself."""
    given = frozenset(keys)
    return lambda key: option_name(key) if key in given else yaml_name(key)


def is_option(name: str) -> bool:
    return name.startswith("--")


def needs_text(key: str, needed: str, named: Callable[[str], str] = yaml_name) -> str:
    """The one wording of a row's `needs` rule: `'push' needs 'worktree:
    true'` where the key came from loops.yaml, `--push needs --worktree`
    where it came from the command line (the needed key in the same words,
    whether given or not)."""
    name = named(key)
    row = BY_KEY[needed]
    wanted = option_name(needed) if is_option(name) else _as_set(needed)
    return f"{name} needs {wanted}" + (f" ({row.needed_why})" if row.needed_why else "")


def read(setting: Setting, value: object, name: str) -> Any:
    """The one function that turns a given value of a row parsed by its
    kind (`by_kind`) into the value its LoopDef field holds, for loops.yaml
    and the command line alike: its errors start with `name`."""
    kind = setting.kind
    if kind == "duration":
        from loopctl.domain.durations import parse_setting

        return parse_setting(value, name)
    if kind == "size":
        from loopctl.domain.sizes import parse_size

        return parse_size(value, name, setting.low or 1)
    said = problem(setting, value)
    if said and is_option(name):  # as the option's help says what it takes
        raise UsageError(f"bad {name} {str(value)[:40]!r}: expected {expected(setting)}"
                         + (" or 'none'" if setting.clears else ""))
    if said:
        raise UsageError(f"{name} {said}")
    return tuple(value) if isinstance(value, list) else value


def by_kind(setting: Setting) -> bool:
    """Parsed by `read` alone (no rule of its own in another module)."""
    return not setting.rule and setting.kind in READ_KINDS


READ_KINDS = ("text", "flag", "count", "duration", "size", "choice", "list")


