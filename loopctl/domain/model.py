"""Loop definitions: the strict schema of one `loops.yaml` entry (DESIGN §2).

`parse_loop` turns a raw mapping into a frozen `LoopDef` or raises a
`UsageError` naming the loop, the key and what was expected. The raw mapping
is what the store keeps, so an entry that fails here is preserved as written.
"""

from __future__ import annotations

from loopctl.domain import loop_settings, protect, setting_rules, verify
from loopctl.domain.checks import (
    check_branch,
    check_branch_prefix,
    check_cron,
    check_env_pair,
    check_name,
    check_notify_urls,
    check_remote,
    check_tz,
    split_command,
)
from loopctl.domain.durations import parse_setting
from loopctl.domain.errors import UsageError, near_miss, shorten
from loopctl.domain.names import PRESETS
from loopctl.domain.objective import check_objective
from loopctl.fast.data_class import asdict, factory, record
from loopctl.fast.data_class import fields as record_fields
from loopctl.fast.lazy_re import lazy

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    Named = Callable[[str], str]  # a key as an error names it (setting_rules.yaml_name)

NAME_RE = lazy(r"[a-z0-9_][a-z0-9._-]{0,63}")  # compiled on first use (fast/lazy_re)

DEFAULT_MAX_RUNS = 50
DEFAULT_FOR = 7 * 86400
DEFAULT_MAX_FAILURES = 3
DEFAULT_MAX_DEFERRALS = 10  # deferred runs in a row (DESIGN §18)
DEFAULT_NO_PROGRESS = 3
# state.json keeps one result digest per run the breaker compares; its
# repair rule refuses more than this many (domain/state.py).
MAX_NO_PROGRESS = 1000
DEFAULT_TIMEOUT = 3600
DEFAULT_MIN_DELAY = 60
DEFAULT_MAX_DELAY = 3600
DEFAULT_KEEPALIVE = 1200
DEFAULT_KEEP_RUNS = 50
DEFAULT_MAX_LOG = 100 * 1024**2

KEYS = loop_settings.KEYS
GITHUB_KEYS = setting_rules.goes_with("on_github")
DEFAULT_BRANCH_PREFIX = "loopctl/"
DEFAULT_CHECKS_TIMEOUT = 1800
DEFAULT_MAX_FILE_SIZE = 50 * 2**20   # what the hand-off commits, per file
DEFAULT_FIX_ATTEMPTS = 3  # runs that continue one PR whose checks failed
DEFAULT_IF_TIMEOUT = 120  # a gate (DESIGN §17) is a quick check, not a second agent
# Git refs and remotes as typed by people; git's own check-ref-format runs at
# `start`, this keeps a hand-edited file from holding an option or a `..`.


_EVERY_TEXT: dict[int, str] = {}


@record(frozen=True)
class LoopDef:
    name: str
    prompt: str | None = None
    prompt_file: str | None = None
    agent: str | None = None
    command: tuple[str, ...] | None = None
    every: int | None = None
    auto: bool = False
    cron: str | None = None
    tz: str | None = None
    after: int | None = None
    min_delay: int = DEFAULT_MIN_DELAY
    max_delay: int = DEFAULT_MAX_DELAY
    keepalive: int = DEFAULT_KEEPALIVE
    cwd: str = "."
    # A None value: inherited from the driver's environment at fire time.
    env: dict[str, str | None] = factory(dict)
    timeout: int = DEFAULT_TIMEOUT
    max_runs: int = DEFAULT_MAX_RUNS
    for_s: int = DEFAULT_FOR
    max_failures: int = DEFAULT_MAX_FAILURES
    max_deferrals: int = DEFAULT_MAX_DEFERRALS
    no_progress: int = DEFAULT_NO_PROGRESS
    budget_usd: float | None = None
    until: str | None = None
    overlap: str = "queue"
    catch_up: str = "one"
    # A missed slot older than this when first seen is skipped (DESIGN §20).
    catch_up_window: int | None = None
    on_attention: str | None = None
    raw: bool = False
    continue_session: bool = False
    keep_runs: int = DEFAULT_KEEP_RUNS
    max_log: int = DEFAULT_MAX_LOG  # bytes of the agent's output kept in the run log
    max_memory: int | None = None  # bytes, where a cgroup v2 memory controller is delegated
    max_procs: int | None = None  # processes, where a cgroup v2 pids controller is delegated
    max_output_lines: int | None = None  # lines of the agent's output kept in the run log
    nice: int | None = None  # niceness of the run's processes
    created_at: str | None = None
    model: str | None = None
    agent_args: tuple[str, ...] = ()
    yolo: bool = False
    notify: tuple[str, ...] = ()  # Apprise URLs: tokens, shown masked everywhere
    worktree: bool = False
    base: str | None = None
    branch_prefix: str = DEFAULT_BRANCH_PREFIX
    push: str | None = None
    pr: bool = False
    merge: str | None = None
    checks_timeout: int = DEFAULT_CHECKS_TIMEOUT
    copy: tuple[str, ...] = ()
    max_file_size: int = DEFAULT_MAX_FILE_SIZE
    protect: tuple[str, ...] = ()  # paths put back after each run (domain/protect.py)
    # DESIGN §14; None: the file's top-level `sandbox:`, else auto.
    sandbox: str | None = None
    sandbox_write: tuple[str, ...] = ()
    sandbox_read: tuple[str, ...] = ()
    gate: tuple[str, ...] | None = None  # `--if CMD` (YAML `if`), DESIGN §17
    gate_timeout: int = DEFAULT_IF_TIMEOUT
    on_demand: bool = False  # no time schedule: fired by `trigger` and `run` only
    check: tuple[str, ...] | None = None  # `--check CMD` and its options, DESIGN §16
    check_timeout: int = verify.DEFAULT_CHECK_TIMEOUT
    until_check: bool = False
    check_metric: str | None = None
    fix_attempts: int = DEFAULT_FIX_ATTEMPTS  # feedback.py
    notes: bool = False  # a notes file kept across runs (feedback.py)
    # Runs the fires while the agent's account is held (DESIGN §18).
    fallback_agent: str | None = None
    # GitHub events that trigger the loop through `loopctl serve` (DESIGN §19).
    on_github: tuple[str, ...] = ()
    github_repo: str | None = None
    github_command: str | None = None
    github_anyone: bool = False
    machines: tuple[str, ...] = ()  # a team store's machines that may fire it (DESIGN §21)
    more: tuple[tuple[str, Any], ...] = ()  # (key, value): rows with no field above

    if not TYPE_CHECKING:  # read as attributes; for mypy, only the fields exist
        def __getattr__(self, name: str) -> Any:
            return loop_settings.held(self.__dict__.get("more", ()), name)

    @property
    def schedule_key(self) -> str:
        """Changes exactly when the schedule changes (state re-arms then)."""
        if self.on_demand:
            return "on_demand"
        if self.cron:
            return f"cron:{self.cron}@{self.tz or ''}"
        if self.auto:
            return "auto"
        return f"every:{self.every}"

    def schedule_text(self) -> str:
        if self.on_demand:
            return "on demand"
        if self.cron:
            return f"cron {self.cron}" + (f" {self.tz}" if self.tz else "")
        if self.auto:
            return "auto"
        every = self.every or 0
        text = _EVERY_TEXT.get(every)
        if text is None:  # 10,000 loops share a handful of intervals
            from loopctl.domain.durations import format_duration

            text = _EVERY_TEXT[every] = f"every {format_duration(every)}"
        return text

    def to_dict(self) -> dict[str, object]:  # open: each field by its loops.yaml name
        data = asdict(self)
        data["if"], data["if_timeout"] = data.pop("gate"), data.pop("gate_timeout")
        data["for"] = data.pop("for_s")
        return data


def parse_loop(name: object, raw: object, named: Named = setting_rules.yaml_name) -> LoopDef:
    """Validate one entry; the error names the loop and the key, each key as
    `named` says: `'timeout'` from loops.yaml, `--timeout` where `start` or
    `update` got it on the command line (the one parse of its value)."""
    check_name(name)
    assert isinstance(name, str)
    where = f"loop {name!r}"
    if not isinstance(raw, dict):
        raise UsageError(f"{where}: expected a mapping of keys, got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in KEYS)
    if unknown:
        raise UsageError(f"{where}: unknown key {unknown[0]!r}{near_miss(unknown[0], KEYS)}; see "
                         "`man 5 loops.yaml`")
    bad = _not_utf8(raw)
    if bad:
        raise UsageError(f"{where}: {bad!r} is not valid UTF-8 text")
    fields: dict[str, Any] = {"name": name}
    try:
        clash = setting_rules.clash({k for k, v in raw.items() if _given(v)})
        if clash:
            raise UsageError(setting_rules.clash_text(*clash, named))
        _by_kind(raw, fields, named)
        _parse_what(raw, fields, where)
        _parse_schedule(raw, fields, where, named)
        _parse_policy(raw, fields, where, named)
        _parse_workspace(raw, fields, where)
        _parse_sandbox(raw, fields, where, named)
        if any(raw.get(key) is not None for key in GITHUB_KEYS):
            from loopctl.domain.github import parse_github

            fields.update(parse_github(raw, where))
        _needs(raw, named)
    except UsageError as exc:
        if exc.message.startswith(where):
            raise
        raise UsageError(f"{where}: {exc.message}") from None
    return _made(fields)


def _made(fields: dict[str, Any]) -> LoopDef:
    """The definition of parsed `fields`: a row with no field of its own (a
    setting added as its row alone) goes into `more`, which
    loop_settings.held reads."""
    own = set(record_fields(LoopDef))
    more = tuple((k, v) for k, v in fields.items() if k not in own)
    if not more:
        return LoopDef(**fields)
    return LoopDef(**{k: v for k, v in fields.items() if k in own}, more=more)


_BY_KIND = tuple(s for s in loop_settings.SETTINGS if setting_rules.by_kind(s))


def _by_kind(raw: dict[str, Any], fields: dict[str, Any], named: Named) -> None:
    """Every row parsed by its kind alone, each by the one reader
    (setting_rules.read); an absent key keeps the LoopDef's default."""
    for setting in _BY_KIND:
        value = raw.get(setting.key)
        if value is not None:
            fields[setting.name] = setting_rules.read(setting, value, named(setting.key))


def _given(value: Any) -> bool:
    """Set: not None, not false, not an empty list or mapping (0 is set)."""
    return value is not None and value is not False and value != [] and value != {}


def _needs(raw: dict[str, Any], named: Named) -> None:
    """The rows' `needs` rules, over what was given (an empty list, a flag
    turned off: not given), in the words of the route that gave each key."""
    unmet = setting_rules.unmet_need({k: _given(v) for k, v in raw.items()})
    if unmet:
        raise UsageError(setting_rules.needs_text(*unmet, named))


def _not_utf8(value: Any, key: str = "") -> str | None:
    """The first key whose text cannot be written as UTF-8 (lone surrogates
    from undecodable command-line bytes would make loops.yaml unreadable)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return key or "value"
    elif isinstance(value, dict):
        for k, v in value.items():
            found = _not_utf8(k, str(k)) or _not_utf8(v, key or str(k))
            if found:
                return found
    elif isinstance(value, list):
        for item in value:
            found = _not_utf8(item, key)
            if found:
                return found
    return None


def _text(raw: dict[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"{where}: {key!r} must be text, got {type(value).__name__}")
    return value


def _flag(raw: dict[str, Any], key: str, where: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise UsageError(f"{where}: {key!r} must be true or false")
    return value


def _parse_what(raw: dict[str, Any], fields: dict[str, Any], where: str) -> None:
    prompt, prompt_file = _text(raw, "prompt", where), _text(raw, "prompt_file", where)
    check_objective(raw, prompt, prompt_file, where)
    agent = _text(raw, "agent", where)
    if agent is not None and agent not in PRESETS:
        raise UsageError(f"{where}: unknown agent {agent!r}; expected one of {', '.join(PRESETS)}")
    if raw.get("command") is not None:
        fields["command"] = split_command(raw["command"], where)
    elif agent is None:
        agent = "shell"
    env = raw.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and (v is None or isinstance(v, (str, int, float))
                                and not isinstance(v, bool))
        for k, v in env.items()
    ):
        raise UsageError(f"{where}: 'env' must map names to text values (or to nothing: "
                         "taken from the driver's environment)")
    for key, value in env.items():
        check_env_pair(key)
        _check_key_value(key, value)
    agent_args = raw.get("agent_args") or []
    if not isinstance(agent_args, list) or not all(isinstance(a, str) for a in agent_args):
        raise UsageError(f"{where}: 'agent_args' must be a list of strings")
    cwd = _text(raw, "cwd", where) or "."
    fields.update(
        prompt=prompt, prompt_file=prompt_file, agent=agent, cwd=cwd,
        env={k: None if v is None else str(v) for k, v in env.items()},
        agent_args=tuple(agent_args), created_at=_created_at(raw, where),
        notify=check_notify_urls(raw.get("notify"), where),
        fallback_agent=_fallback(raw, agent, where),
    )


def _check_key_value(key: str, value: object) -> None:
    from loopctl.domain.accounts import key_value_problem

    problem = key_value_problem(key, value) if isinstance(value, str) else None
    if problem:
        raise UsageError(problem)


def _fallback(raw: dict[str, Any], agent: str | None, where: str) -> str | None:
    fallback = _text(raw, "fallback_agent", where)
    if fallback is None:
        return None
    agents = [p for p in PRESETS if p != "shell"]
    if fallback not in agents:
        raise UsageError(f"{where}: unknown fallback_agent {shorten(fallback, 40)!r}; expected "
                         f"one of {', '.join(agents)}")
    if agent in (None, "shell") or raw.get("command") is not None:
        raise UsageError(f"{where}: 'fallback_agent' needs an agent preset ('agent')")
    if fallback == agent:
        raise UsageError(f"{where}: 'fallback_agent' is the loop's own agent {agent!r}")
    return fallback


def _created_at(raw: dict[str, Any], where: str) -> str | None:
    value = raw.get("created_at")
    if value is None:
        return None
    from datetime import datetime, timezone

    moment = None
    if isinstance(value, datetime):  # YAML parses unquoted timestamps itself
        moment = value
    elif isinstance(value, str) and len(value) <= 40:
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
    if moment is not None:
        moment = moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
        try:
            moment = moment.astimezone(timezone.utc)
        except (OverflowError, ValueError):
            moment = None
        # Deadlines are computed from it: beyond 2999 they cannot be shown.
        if moment is not None and 1970 <= moment.year <= 2999:
            return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    raise UsageError(f"{where}: 'created_at' must be an ISO-8601 time between 1970 and 2999 "
                     "like 2026-11-30T03:00:00Z")


def _parse_schedule(raw: dict[str, Any], fields: dict[str, Any], where: str,
                    named: Named) -> None:
    every, cron = raw.get("every"), raw.get("cron")
    fields["on_demand"] = _flag(raw, "on_demand", where)
    if not fields["on_demand"] and (every is None) == (cron is None):
        raise UsageError(f"{where}: give exactly one of 'every' or 'cron' (or 'on_demand: true')")
    if cron is not None:
        if not isinstance(cron, str):
            raise UsageError(f"{where}: 'cron' must be text like '*/10 * * * *'")
        fields["cron"] = check_cron(cron, named("cron"))
        tz = _text(raw, "tz", where)
        fields["tz"] = check_tz(tz, named("tz")) if tz is not None else None
    elif not fields["on_demand"]:
        if every == "auto":
            fields["auto"] = True
        else:
            fields["every"] = parse_setting(every, named("every"))
    exceeded = setting_rules.exceeded(fields)
    if exceeded:
        raise UsageError(setting_rules.exceeded_text(*exceeded, named))


def _parse_policy(raw: dict[str, Any], fields: dict[str, Any], where: str,
                  named: Named) -> None:
    from loopctl.domain.gates import parse_gate

    fields.update(parse_gate(raw, where))
    fields.update(verify.parse_verify(raw, where, named))
    budget = raw.get("budget_usd")
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget < 1e9:
            raise UsageError(f"{where}: 'budget_usd' must be a positive number of dollars")
        fields["budget_usd"] = float(budget)
    if fields.get("catch_up_window") is not None and fields.get("catch_up") == "none":
        from loopctl.domain.slots import WINDOW_CONTRADICTION

        raise UsageError(f"{where}: {WINDOW_CONTRADICTION}")


def _ref(raw: dict[str, Any], key: str, check: Any, where: str) -> str | None:
    """A git name from loops.yaml, by the rule its option uses (domain/checks)."""
    value = _text(raw, key, where)
    if value is None:
        return None
    try:
        return str(check(value, repr(key)))
    except UsageError as exc:
        raise UsageError(f"{where}: {exc.message}") from None


def _parse_workspace(raw: dict[str, Any], fields: dict[str, Any], where: str) -> None:
    fields["base"] = _ref(raw, "base", check_branch, where)
    fields["branch_prefix"] = _ref(raw, "branch_prefix", check_branch_prefix, where) \
        or DEFAULT_BRANCH_PREFIX
    fields["push"] = _ref(raw, "push", check_remote, where)
    copy = raw.get("copy") or []
    if not isinstance(copy, list) or not all(
            isinstance(g, str) and g and not g.startswith("/") and ".." not in g.split("/")
            for g in copy):
        raise UsageError(f"{where}: 'copy' must be a list of globs inside the repository")
    fields["copy"] = tuple(copy)
    fields["protect"] = protect.check_patterns(raw.get("protect"), where)


def check_sandbox_mode(value: object, where: str) -> str | None:
    """The top level's `sandbox:` (storage/definitions.py)."""
    from loopctl.domain.confinement import MODES

    if isinstance(value, bool):  # YAML 1.1 reads a bare on/off as true/false
        value = "on" if value else "off"
    if value is not None and value not in MODES:
        raise UsageError(f"{where}: 'sandbox' must be one of {', '.join(MODES)}, got "
                         f"{shorten(str(value), 40)!r}")
    return value if value is None else str(value)


def _parse_sandbox(raw: dict[str, Any], fields: dict[str, Any], where: str,
                   named: Named) -> None:
    from loopctl.domain.confinement import check_extra

    mode = raw.get("sandbox")
    if isinstance(mode, bool):  # YAML 1.1 reads a bare on/off as true/false
        mode = "on" if mode else "off"
    if mode is not None:  # by its row's kind, as given (`--sandbox maybe`, `'sandbox'`)
        fields["sandbox"] = setting_rules.read(loop_settings.BY_KEY["sandbox"], mode,
                                               named("sandbox"))
    for key in ("sandbox_write", "sandbox_read"):
        paths = raw.get(key) or []
        if not isinstance(paths, list) or len(paths) > 100 \
                or not all(isinstance(p, str) for p in paths):
            raise UsageError(f"{where}: {key!r} must be a list of paths")
        for path in paths:
            problem = check_extra(path, "--" + key.replace("_", "-"))
            if problem:
                raise UsageError(f"{where}: {problem}")
        fields[key] = tuple(dict.fromkeys(paths))
