"""The `loops.yaml` form of a loop definition: what `model.parse_loop`
reads back (the one writer of a loop's keys)."""

from __future__ import annotations

from loopctl.domain import loop_settings, verify
from loopctl.domain.model import (
    DEFAULT_BRANCH_PREFIX,
    DEFAULT_CHECKS_TIMEOUT,
    DEFAULT_FIX_ATTEMPTS,
    DEFAULT_IF_TIMEOUT,
    DEFAULT_KEEPALIVE,
    DEFAULT_MAX_FILE_SIZE,
    DEFAULT_MAX_LOG,
    LoopDef,
)
from loopctl.domain.sizes import format_size

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any


def to_raw(loop: LoopDef) -> dict[str, Any]:
    """The `loops.yaml` form of a definition: what `parse_loop` reads back.
    Limits are always written out so the file says what bounds each loop."""
    from loopctl.domain.durations import format_duration as fd

    raw: dict[str, Any] = {}
    if loop.prompt_file is not None:
        raw["prompt_file"] = loop.prompt_file
    elif loop.prompt is not None:
        raw["prompt"] = loop.prompt
    if loop.command:
        raw["command"] = list(loop.command)
    else:
        raw["agent"] = loop.agent
    if loop.on_demand:
        raw["on_demand"] = True
    elif loop.cron:
        raw["cron"] = loop.cron
        if loop.tz:
            raw["tz"] = loop.tz
    else:
        raw["every"] = "auto" if loop.auto else fd(loop.every or 0)
    if loop.auto:
        raw["min_delay"], raw["max_delay"] = fd(loop.min_delay), fd(loop.max_delay)
    optional = {
        "after": fd(loop.after) if loop.after else None,
        "keepalive": fd(loop.keepalive) if loop.keepalive != DEFAULT_KEEPALIVE else None,
        "model": loop.model, "agent_args": list(loop.agent_args) or None,
        "yolo": loop.yolo or None, "fallback_agent": loop.fallback_agent,
    }
    raw.update({k: v for k, v in optional.items() if v is not None})
    raw["cwd"] = loop.cwd
    if loop.env:
        raw["env"] = dict(loop.env)
    raw.update(timeout=fd(loop.timeout), max_runs=loop.max_runs, **{"for": fd(loop.for_s)})
    policy = {
        **_changed(loop, "max_failures", "max_deferrals", "no_progress"),
        "budget_usd": loop.budget_usd, "until": loop.until,
        **_changed(loop, "overlap", "catch_up"), **_window(loop),
        "on_attention": loop.on_attention, "notify": list(loop.notify) or None,
        "raw": loop.raw or None, "continue_session": loop.continue_session or None,
        **_changed(loop, "keep_runs"),
        "max_log": format_size(loop.max_log) if loop.max_log != DEFAULT_MAX_LOG else None,
        "max_memory": format_size(loop.max_memory) if loop.max_memory else None,
        **{s.key: getattr(loop, s.name) for s in loop_settings.PLAIN},
        "if": list(loop.gate) if loop.gate else None,
        "if_timeout": fd(loop.gate_timeout) if loop.gate_timeout != DEFAULT_IF_TIMEOUT else None,
        "notes": loop.notes or None,
        "created_at": loop.created_at,
    }
    raw.update({k: v for k, v in policy.items() if v is not None})
    raw.update(verify.to_raw(loop))
    raw.update(_workspace_raw(loop))
    if loop.on_github:
        from loopctl.domain.github import to_raw as github_raw

        raw.update(github_raw(loop.on_github, loop.github_repo, loop.github_command,
                              loop.github_anyone))
    sandbox = {"sandbox": loop.sandbox, "sandbox_write": list(loop.sandbox_write) or None,
               "sandbox_read": list(loop.sandbox_read) or None}
    return {**raw, **{k: v for k, v in sandbox.items() if v is not None}}


def _window(loop: LoopDef) -> dict[str, Any]:
    from loopctl.domain.durations import format_duration

    window = loop.catch_up_window
    return {"catch_up_window": format_duration(window)} if window else {}


def _workspace_raw(loop: LoopDef) -> dict[str, Any]:
    """The hand-off keys of `to_raw`, for a `--worktree` loop."""
    from loopctl.domain.durations import format_duration as fd

    if not loop.worktree:
        return {}
    workspace = {
        "worktree": True, "base": loop.base,
        "branch_prefix": loop.branch_prefix
        if loop.branch_prefix != DEFAULT_BRANCH_PREFIX else None,
        "push": loop.push, "pr": loop.pr or None, "merge": loop.merge,
        "checks_timeout": fd(loop.checks_timeout)
        if loop.checks_timeout != DEFAULT_CHECKS_TIMEOUT else None,
        "copy": list(loop.copy) or None, "protect": list(loop.protect) or None,
        "max_file_size": format_size(loop.max_file_size)
        if loop.max_file_size != DEFAULT_MAX_FILE_SIZE else None,
        "fix_attempts": loop.fix_attempts
        if loop.pr and loop.fix_attempts != DEFAULT_FIX_ATTEMPTS else None,
    }
    return {k: v for k, v in workspace.items() if v is not None}


def _changed(loop: LoopDef, *keys: str) -> dict[str, Any]:
    """The settings `keys` as written: left out (None) at their row's default."""
    rows = [loop_settings.BY_KEY[key] for key in keys]
    return {s.key: None if getattr(loop, s.name) == s.default else getattr(loop, s.name)
            for s in rows}
