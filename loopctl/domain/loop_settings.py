"""One row per loop setting (DESIGN §10, "one declaration per setting").

A row says what a `loops.yaml` key is: its `LoopDef` field, its kind (which
picks its parser, its writer and its shell completion), its default, the
option that sets it and that option's help, which commands take it, whether
`update` may change it, whether `status` lists it among the limits, when it
is written, where the LOOP JSON shows it, what it needs, and how an export
carries it. From the table: `KEYS`, the simple keys' parsing (domain/model.py),
the whole of serialising (domain/loop_raw.py), the `start`/`update` options
(cli/setting_opts.py), the cached and JSON fields of `ls --json`
(storage/defs_cache.py, commands/loop_object.py), the completions and the
man page's loops.yaml reference (cli/gendocs.py), the limits line of
`status` (cli/views.py), and through domain/setting_rules.py each value's
one parse (`read`, for loops.yaml and the command line) and the context
rules (`needs`, `context`).

Pure: no Typer, no I/O. Each value rule (`problem`) is written once and
named by whoever reports it: `'max_procs'` for loops.yaml, `--max-procs`
for the command line.
"""

from __future__ import annotations

from loopctl.domain.names import PRESETS
from loopctl.fast.data_class import record

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

# Kinds whose values `problem` checks by itself; the others (commands, env,
# paths, notification URLs, times, ...) have a rule of their own in the
# module the row's `rule` names.
SIMPLE = ("text", "flag", "count", "duration", "size", "choice")


class Clear:
    """`update`'s "remove this key" (`--max-memory none`): not None, which
    means "not given" everywhere else."""

    _it: Clear | None = None

    def __new__(cls) -> Clear:
        if cls._it is None:
            cls._it = super().__new__(cls)
        return cls._it

    def __repr__(self) -> str:
        return "CLEAR"


CLEAR = Clear()
MiB = 1024**2


@record(frozen=True)
class Setting:
    key: str
    kind: str  # text|flag|count|duration|size|choice|number|list|command|map|time|paths
    help: str  # the option's help; the reference's meaning unless `doc` says otherwise
    field: str = ""  # the LoopDef field (default: the key)
    default: Any = None  # as LoopDef holds it
    flags: tuple[str, ...] = ()  # the option's declarations; none: loops.yaml only
    param: str = ""  # the option's Python name (default: the key)
    commands: tuple[str, ...] = ("start", "update")
    choices: tuple[str, ...] = ()
    low: int = 0  # counts: the least; sizes: the least bytes
    high: int = 10**9
    clears: bool = False  # `none` removes it on `update`
    limit: str = ""  # the word of `status`'s limits line
    when: str = ""  # written only while this field is true (`worktree`)
    # changed: written unless at its default (or unset); always; head:
    # written by loop_raw._head, which knows the objective and the schedule.
    write: str = "changed"
    rule: str = ""  # the module whose rule parses it, when not SIMPLE
    export: str = "loops.yaml"  # how an export carries it
    metavar: str = ""
    objective: bool = False  # part of what the loop does: `start` sets it, `update` refuses
    update_help: str = ""
    doc: str = ""
    # Parsed by `problem` alone and written as the field holds it: such a
    # setting is its row, its LoopDef field and its enforcement.
    plain: bool = False
    # The option group whose translator in cli/*_opts.py turns its options
    # into keys together ("worktree", "check", ...): the context rules
    # between them live there. "": the row's own parser alone (`given`).
    group: str = ""
    path: bool = False  # the option names a file or folder (a Path)
    # The LOOP JSON's field that shows it (commands/loop_object.py): "own",
    # a field of its own named by the key, after the documented ones; the
    # name of a documented field that composes it; None: not shown.
    view: str | None = "own"
    # Context rule: the keys it means nothing without (set, or true), checked
    # in one place (setting_rules.unmet_need) for loops.yaml and the command
    # line alike, said by setting_rules.needs_text.
    needs: tuple[str, ...] = ()
    # What a row that needs this one is told, after the rule: `--push needs
    # --worktree (it hands off ...)`.
    needed_why: str = ""
    # Context rules that read the machine (the loop's folder, git), each
    # named in setting_rules.CONTEXT_RULES, checked while the row is set: by the command
    # line at start/update and by `validate` for loops.yaml, in one wording
    # (integrations/context_rules.py holds the checks: domain/ reads no disk).
    context: tuple[str, ...] = ()
    # Context rule: keys that cannot be given with this one (`agent` and
    # `command`; `on_demand` and any time schedule), and why, said after
    # the rule. On `update`, a key given replaces those it excludes or that
    # exclude it (`--every` replaces `cron`): setting_rules.displaced.
    excludes: tuple[str, ...] = ()
    excludes_why: str = ""
    # Context rule: the row whose value this one's may not exceed.
    at_most: str = ""

    @property
    def name(self) -> str:
        return self.field or self.key

    @property
    def option(self) -> str:
        return self.flags[0].split("/")[0] if self.flags else ""

    @property
    def python(self) -> str:
        return self.param or self.key


def _s(key: str, kind: str, help: str, **kw: Any) -> Setting:
    if "flags" not in kw:
        kw["flags"] = ("--" + key.replace("_", "-"),)
    return Setting(key, kind, help, **kw)


def _yaml(key: str, kind: str, doc: str, **kw: Any) -> Setting:
    return Setting(key, kind, doc, flags=(), commands=(), **kw)


_WT = "--worktree: "
AGENTS = tuple(p for p in PRESETS if p != "shell")
# In the order loops.yaml is written.
SETTINGS: tuple[Setting, ...] = (
    _s("prompt", "text", "With --new-objective: the loop's new prompt (its history and limits "
       "are kept).", commands=("update",), write="head", rule="objective",
       doc="What the agent should do (start: the argument).", export="the prompt text",
       group="objective", view=None),
    _s("prompt_file", "text", "Read the prompt from this file at every run.", write="head",
       rule="objective", update_help="With --new-objective: read the prompt from this file at "
       "every run from now on.", metavar="", export="the path; the file must exist there",
       group="objective", path=True, view=None),
    _s("agent", "choice", f"Preset: {', '.join(PRESETS)} (default shell).", choices=PRESETS,
       objective=True, commands=("start",), write="head", rule="model", excludes=("command",),
       doc="An agent preset (default shell).", group="objective", view="agent"),
    _s("command", "command", "Custom agent command, split like a shell, run without one.",
       objective=True, commands=("start",), write="head", rule="checks",
       doc="A custom agent command: text split like a shell, or a list of words.",
       group="objective", view="command"),
    _s("on_demand", "flag", "No time schedule: fired only by `loopctl trigger` (and `run`).",
       default=False, write="head", rule="schedule",
       excludes=("every", "cron", "tz", "after"), excludes_why="it has no time schedule",
       export="an on-demand workflow (GitHub) or nothing", group="gate", view="schedule"),
    _s("every", "duration", "Interval after each run ends (10m, 1h30m) or 'auto'.",
       write="head", rule="schedule", excludes=("cron",), export="the scheduler's timer",
       group="policy", view="schedule"),
    _s("cron", "text", "Five-field cron expression.", write="head", rule="schedule",
       export="the scheduler's timer", group="policy", view="schedule"),
    _s("tz", "text", "IANA zone for --cron (default: the system's).", write="head",
       rule="schedule", group="policy", needs=("cron",), view="schedule"),
    _s("min_delay", "duration", "With --every auto: shortest delay (default 1m).", default=60,
       when="auto", write="always", view=None, at_most="max_delay"),
    _s("max_delay", "duration", "With --every auto: longest delay (default 1h).", default=3600,
       when="auto", write="always", view=None),
    _s("after", "duration", "Delay before the first run.", commands=("start",), group="objective",
       view=None),
    _yaml("keepalive", "duration", "With --every auto: a run at least this often.",
          default=1200, view=None),
    _s("model", "text", "Model name passed with the preset's model flag.", objective=True,
       commands=("start",), view=None),
    _s("agent_args", "list", "Extra argument for the agent (repeatable).", flags=("--agent-arg",),
       param="agent_arg", default=(), objective=True, commands=("start",), rule="model", view=None),
    _s("yolo", "flag", "Ask for the agent's full permission bypass.", default=False,
       objective=True, commands=("start",), view=None),
    _s("fallback_agent", "choice", "Preset that runs the fires while the agent's account is "
       f"rate-limited or needs a login ({', '.join(AGENTS)}; `none` clears).",
       choices=AGENTS, metavar="PRESET", clears=True, rule="model", group="fallback",
       view="fallback_agent"),
    _s("cwd", "text", "Working directory (default: here).", default=".", objective=True,
       commands=("start",), rule="model", write="always", group="objective", path=True,
       view="cwd"),
    _s("env", "map", "KEY=VALUE for the agent, or KEY to pass this name from the driver's "
       "environment at fire time (repeatable).", default={}, objective=True, commands=("start",),
       rule="model", group="objective", view=None),
    _s("timeout", "duration", "Kill a run after this long (default 1h).", default=3600,
       write="always", limit="timeout", view=None),
    _s("max_runs", "count", "Runs allowed in all (default 50; 0 = unlimited).", default=50,
       write="always", view="runs"),
    _s("for", "duration", "Calendar lifetime from the start (default 7d).", field="for_s",
       param="for_", default=7 * 86400, write="always", view=None),
    _s("max_failures", "count", "Consecutive failures before pausing (default 3).", default=3,
       view="failures"),
    _s("max_deferrals", "count", "Usage-limit deferrals in a row before pausing (default 10; "
       "0 = unlimited).", default=10, view="deferrals"),
    # state.json keeps one result digest per run the breaker compares; its
    # repair rule refuses more than 1000 (domain/state.py).
    _s("no_progress", "count", "Identical results in a row before pausing (default 3).",
       default=3, high=1000, view=None),
    _s("budget_usd", "number", "Pause before a run once this many USD are spent.",
       rule="model", view="cost_usd"),
    _s("until", "text", "Complete when the agent's final result contains this text.", view=None),
    _s("overlap", "choice", "A fire due during a run: queue (default), skip or replace.",
       choices=("queue", "skip", "replace"), default="queue", view=None),
    _s("catch_up", "choice", "After downtime: one catch-up run (default) or none.",
       choices=("one", "none"), default="one", view=None),
    _s("catch_up_window", "duration", "A missed slot older than this when a driver first "
       "sees it is recorded outside_window, not caught up (default: none, catch up however "
       "late; 'none' clears).", clears=True, metavar="DURATION", view=None),
    _s("on_attention", "text", "Executable given attention events on stdin ('none' removes "
       "it).", clears=True, export="the path; the hook must exist there", group="policy",
       view=None),
    _s("notify", "list", "Apprise URL told about attention events (repeatable; 'none' "
       "clears).", default=(), clears=True, rule="checks", group="policy", view="notify"),
    _s("raw", "flag", "Send the prompt as written (no envelope).", default=False,
       objective=True, commands=("start",), view=None),
    _s("continue_session", "flag", "Resume the previous run's agent session.", default=False,
       objective=True, commands=("start",), view=None),
    _s("keep_runs", "count", "Run logs kept per loop (default 50).", default=50, low=1, view=None),
    # The least max_log leaves room for the truncation note and loopctl's own lines.
    _s("max_log", "size", "Agent output kept per run log (default 100MiB); the rest is "
       "discarded.", default=100 * MiB, low=4096, limit="log", view=None),
    _s("max_memory", "size", "Memory of a run's processes, where cgroup v2 is delegated "
       "('none' clears).", low=16 * MiB, clears=True, limit="memory",
       export="a cgroup limit where the target has one (systemd MemoryMax)", view=None),
    _s("max_output_lines", "count", "Lines of agent output kept per run log; the rest is "
       "discarded, as past --max-log ('none' clears).", low=1, clears=True,
       limit="output lines", plain=True, view=None),
    _s("max_procs", "count", "Processes a run may have at once, where cgroup v2 is delegated "
       "('none' clears).", low=1, clears=True, limit="procs", plain=True, view=None),
    _s("nice", "count", "Niceness of a run's processes (agent, gate, check), as nice(1): "
       "0 to 19, higher yields the CPU to others ('none' clears).", high=19, clears=True,
       limit="nice", plain=True, export="the scheduler's niceness where it has one", view=None),
    _yaml("machines", "list", "With a team store: the machines (globs of their "
          "LOOPCTL_MACHINE names, like runner-*) that may fire this loop; default any.",
          default=(), plain=True, view=None),
    _s("if", "command", "Gate run before each fire, split like --command: exit 0 runs the "
       "agent, 1 skips the fire ('none' clears).", field="gate", param="gate", metavar="CMD",
       clears=True, rule="gates", group="gate", view="gate"),
    _s("if_timeout", "duration", "Kill the gate after this long (default 2m); a timeout is a "
       "gate_error.", field="gate_timeout", default=120, group="gate", view="gate"),
    _s("notes", "flag", "Keep a notes file across runs, at $LOOPCTL_NOTES_FILE for the agent "
       "(see `loopctl notes`).", flags=("--notes/--no-notes",), default=False,
       group="feedback", view="notes"),
    _yaml("created_at", "time", "When the loop was started (UTC); --for counts from it.",
          rule="model", view=None),
    _s("check", "command", "Verify each run: loopctl runs CMD (split like --command, no shell) "
       "in the run's directory after the agent; `complete` stands only when it exits 0 ('none' "
       "clears the check and its options).", metavar="CMD", clears=True, rule="verify",
       group="check", view="check"),
    _s("check_timeout", "duration", "Kill the check after this long (default 10m); a timeout "
       "fails it.", default=600, when="check", group="check", view="check", needs=("check",)),
    _s("until_check", "flag", "A passing check completes the loop, whatever the agent "
       "decided.", flags=("--until-check/--no-until-check",), default=False, when="check",
       group="check", view="check", needs=("check",)),
    _s("check_metric", "text", "The number in the regex's first group (first match in the "
       "check's output) is the run's metric; --no-progress counts runs with it unchanged "
       "('none' clears).", metavar="REGEX", clears=True, when="check", rule="verify",
       group="check", view="check", needs=("check",)),
    _s("worktree", "flag", "Run each fire in a fresh git worktree of the repository at --cwd.",
       flags=("--worktree/--no-worktree",), default=False, when="worktree", group="worktree",
       view="workspace", needed_why="it hands off the branch of each run's worktree",
       context=("git_repository",)),
    _s("base", "text", _WT + "branch each run starts from (default: the one checked out at "
       "start).", when="worktree", rule="checks", group="worktree", view="workspace",
       needs=("worktree",)),
    _s("branch_prefix", "text", _WT + "run branches are PREFIX<loop>/<run-id> (default "
       "loopctl/).", default="loopctl/", when="worktree", rule="checks", group="worktree",
       view="workspace"),
    _s("push", "text", _WT + "push run branches with commits to this remote.",
       when="worktree", rule="checks", group="worktree", view="workspace", needs=("worktree",)),
    _s("pr", "flag", _WT + "open a draft PR with gh after the push.", flags=("--pr/--no-pr",),
       default=False, when="worktree", group="worktree", view="workspace",
       needs=("worktree", "push")),
    _s("merge", "choice", _WT + "squash, merge or rebase the PR once its checks pass.",
       choices=("squash", "merge", "rebase"), when="worktree", group="worktree", view="workspace",
       needs=("worktree", "pr")),
    _s("checks_timeout", "duration", "--merge: how long to wait for checks (default 30m).",
       default=1800, when="worktree", group="worktree", view=None),
    _s("copy", "list", _WT + "ignored files to copy into the worktree, like .env (repeatable "
       "glob).", default=(), when="worktree", rule="model", group="worktree", view=None,
       needs=("worktree",)),
    _s("protect", "list", _WT + "a path or glob from the repository's top (tests/, ci/check.sh) "
       "the agent may not change: put back as at the base after each run, before the check "
       "and the commit (repeatable; 'none' clears).", metavar="PATH", default=(), clears=True,
       when="worktree", rule="protect", group="worktree", view="workspace", needs=("worktree",)),
    _s("max_file_size", "size", _WT + "the hand-off commits no file over SIZE (default 50MiB).",
       default=50 * MiB, when="worktree", group="worktree", view=None, needs=("worktree",)),
    _s("fix_attempts", "count", "--pr: runs that continue a PR whose checks failed before it "
       "is left for review (default 3; 0: off).", metavar="N", default=3, high=100,
       when="pr", group="feedback", view="workspace", needs=("pr",)),
    _s("on_github", "list", "GitHub webhook event that triggers the loop through `loopctl "
       "serve`, e.g. check_suite.completed or issue_comment.created (repeatable; `none` "
       "clears).", metavar="EVENT[.ACTION]", default=(), clears=True, rule="github",
       export="the workflow's `on:` events (GitHub)", group="github", view="github"),
    _s("github_repo", "text", "Only events of this repository trigger (`none` clears).",
       metavar="OWNER/NAME", clears=True, when="on_github", rule="github", group="github",
       view="github", needs=("on_github",)),
    _s("github_command", "text", "Only comments whose first word is WORD trigger, e.g. /fix "
       "(`none` clears).", metavar="WORD", clears=True, when="on_github", rule="github",
       group="github", view="github", needs=("on_github",)),
    _s("github_anyone", "flag", "Let comments, issues and PRs by anyone trigger, not only "
       "authors with write access (bots never do).",
       flags=("--github-anyone/--github-members-only",), default=False, when="on_github",
       group="github", view="github", needs=("on_github",)),
    _s("sandbox", "choice", "Confine the agent with Landlock: auto (agent presets, where the "
       "kernel allows), on (never unconfined), off.", choices=("auto", "on", "off"),
       rule="confinement", group="sandbox", view=None),
    _s("sandbox_write", "paths", "A path the confined agent may also write (repeatable; "
       "'none' clears).", default=(), clears=True, rule="confinement", group="sandbox", view=None),
    _s("sandbox_read", "paths", "A path the confined agent may also read (repeatable; 'none' "
       "clears).", default=(), clears=True, rule="confinement", group="sandbox", view=None),
)

BY_KEY = {s.key: s for s in SETTINGS}
KEYS = frozenset(BY_KEY)
LIMITS = tuple(s for s in SETTINGS if s.limit)
PLAIN = tuple(s for s in SETTINGS if s.plain)
# What a loop does, as `start` options: `update` refuses them (it changes
# policy, never the objective) and says so rather than suggest a near flag.
OBJECTIVE_OPTIONS = (*(s.option for s in SETTINGS if s.objective), "--name")


def held(more: Any, name: str) -> Any:
    """The value of row `name` in a LoopDef's `more` (its default when not
    set); AttributeError for a name that is no plain row."""
    for key, value in more:
        if key == name:
            return value
    row = BY_KEY.get(name)
    if row is None or not row.plain:
        raise AttributeError(name)
    return row.default


def for_command(command: str) -> tuple[Setting, ...]:
    return tuple(s for s in SETTINGS if command in s.commands)


def expected(setting: Setting) -> str:
    """What a value must be, as the reference and the errors say it."""
    kind = setting.kind
    if kind == "choice" and setting.choices:
        return "one of " + ", ".join(setting.choices)
    if kind == "count":
        return (f"a whole number from {setting.low} to {setting.high}"
                if setting.high < 10**9 else f"a whole number >= {setting.low}")
    return {"text": "text", "flag": "true or false", "duration": "a duration like 30s, 10m, 1h30m",
            "size": "a size like 512KiB, 100MiB, 2G", "number": "a number",
            "list": "a list of text", "command": "a command: text split like a shell, or a list",
            "map": "a mapping of names to text", "time": "an ISO-8601 time",
            "paths": "a list of paths"}.get(kind, kind)


def problem(setting: Setting, value: object) -> str | None:
    """What is wrong with a value of a text, flag, count or choice setting
    (None: nothing); said after the name the user wrote."""
    kind = setting.kind
    if kind == "text" and not isinstance(value, str):
        return f"must be text, got {type(value).__name__}"
    if kind == "flag" and not isinstance(value, bool):
        return "must be true or false"
    if kind == "count" and (isinstance(value, bool) or not isinstance(value, int)
                            or not setting.low <= value <= setting.high):
        return f"must be {expected(setting)}, got {value!r}"
    if kind == "choice" and setting.choices and value not in setting.choices:
        return f"must be {expected(setting)}, got {str(value)[:40]!r}"
    if kind == "list" and (not isinstance(value, list) or not all(
            isinstance(v, str) and v.strip() and len(v) <= 200 for v in value)):
        return "must be a list of non-empty text, like [runner-*, laptop-ann]"
    return None


def default_text(setting: Setting) -> str:
    """The default as the reference shows it."""
    return "shell" if setting.key == "agent" else shown(setting, setting.default)


def shown(setting: Setting, value: Any) -> str:
    """A value as `status` and the reference show it: 1h, 100MiB, none."""
    if value in (None, (), {}):
        return "none"
    if setting.kind == "duration":
        from loopctl.domain.durations import format_duration

        return format_duration(int(value))
    if setting.kind == "size":
        from loopctl.domain.sizes import format_size

        return format_size(int(value))
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
