"""Readers: what an agent's output says about its run.

Each reader gets the first and last part of the run's output (never the
whole of it: an agent may write gigabytes) and the exit code, and returns a
`Reading`. Field names follow each CLI's machine-readable output.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

from loopctl import clock
from loopctl.agents.reading import RESULT_CHARS, Reading
from loopctl.agents.reading import tail_text as _tail_text
from loopctl.agents.reading import text as _text
from loopctl.domain import untrusted

WEEK = 7 * 86400.0


# -- usage / rate limits -----------------------------------------------------------

_EPOCH_LIMIT = re.compile(r"usage limit reached\|(\d{9,11})", re.I)
_RESETS_AT = re.compile(
    r"(?:hit your (?:\w+ )?limit|limit reached|limit exceeded|usage limit)[^\n]{0,80}?"
    r"(?:resets?(?: at)?|try again at) (\d{1,2})(?::(\d{2}))?\s*([ap]\.?m\.?)?", re.I)
_RATE_WORDS = re.compile(
    r"\b429\b|rate[ _-]?limit|too many requests|usage limit|quota exceeded|"
    r"resource[ _]exhausted|hit your (?:\w+ )?limit", re.I)
# Lines of a plain-text agent's output that report a failure.
_ERROR_LINE = re.compile(r"error|exceeded|reached|failed", re.I)
_FATAL_LINE = re.compile(r"\b(litellm\.\w*Error|AuthenticationError|APIConnectionError|"
                         r"APIError|ServiceUnavailableError)\b")


def next_wall_time(hour: int, minute: int, meridiem: str | None, now: float) -> float:
    """The next local time HH:MM (12-hour with am/pm, else 24-hour) after now."""
    if meridiem:
        hour = hour % 12 + (12 if meridiem.lower().startswith("p") else 0)
    base = datetime.fromtimestamp(now)
    moment = base.replace(hour=hour % 24, minute=minute, second=0, microsecond=0)
    if moment.timestamp() <= now:
        moment += timedelta(days=1)
    return moment.timestamp()


def rate_limit(text: str, now: float | None = None) -> tuple[bool, float | None]:
    """Does this error text report a usage/rate limit, and when does it reset?"""
    now = time.time() if now is None else now
    match = _EPOCH_LIMIT.search(text)
    if match:
        return True, float(match.group(1))
    match = _RESETS_AT.search(text)
    if match:
        hour, minute = int(match.group(1)), int(match.group(2) or 0)
        if hour < 24 and minute < 60:
            return True, next_wall_time(hour, minute, match.group(3), now)
    return bool(_RATE_WORDS.search(text)), None


# What each CLI says when it has no usable credentials (checked against the
# real CLIs: tests/e2e/test_*.py `test_auth_*`); only error text is searched.
_AUTH_WORDS = re.compile(
    r"not logged in|please run /login|invalid api key|incorrect api key|api key not valid|"
    r"invalid x-api-key|authentication_error|\b401\b[^\n]{0,40}unauthori[sz]ed|"
    r"\bAPI Error: 401\b|unauthenticated|oauth token (?:has )?(?:expired|revoked)|"
    r"token (?:has )?expired|missing environment variable: `?\w*(?:KEY|TOKEN)|"
    r"no auth type is selected|please set an auth method|"
    r"(?:api[ _-]?key|credentials?) (?:is |are )?(?:missing|not (?:set|found|configured))",
    re.I)


def auth_failure(text: str) -> bool:
    """Does this error text say the agent has no usable login or key?"""
    return bool(_AUTH_WORDS.search(text[:20000]))


def _mark_limits(reading: Reading, text: str | None) -> Reading:
    if text:
        if auth_failure(text):
            reading.auth_error = True
            return reading
        limited, reset = rate_limit(text)
        if limited:
            reading.rate_limited, reading.reset_at = True, reset
    return reading


# -- parsing helpers ---------------------------------------------------------------


def _json_lines(data: bytes) -> Iterator[Any]:
    for line in _text(data).splitlines():
        line = line.strip()
        if line.startswith(("{", "[")):
            try:
                yield json.loads(line)
            except ValueError:
                continue


def _last_json(tail: bytes) -> Any:
    """The last complete JSON value that starts a line: one JSON line, or a
    pretty-printed object, with anything after it (stderr is merged) ignored."""
    lines = _text(tail).rstrip().splitlines()
    decoder = json.JSONDecoder()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith(("{", "[")):
            try:
                return decoder.raw_decode("\n".join(lines[i:]))[0]
            except ValueError:
                continue
    return None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tokens(usage: Any, keys: tuple[str, ...]) -> int | None:
    """The tokens a usage object counts (None: no usage object)."""
    if not isinstance(usage, dict):
        return None
    return int(sum(_num(usage.get(k)) or 0.0 for k in keys))


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


# -- readers -----------------------------------------------------------------------


def read_text(head: bytes, tail: bytes, exit_code: int | None, agent: bool = True) -> Reading:
    """Plain-text agents (aider, crush) and shell/command loops: the result is
    the end of the output. Only agents' error lines are searched for limits."""
    reading = Reading(result_text=_tail_text(tail))
    if agent and reading.result_text:
        last = reading.result_text.splitlines()[-20:]
        fatal = [ln for ln in last if _FATAL_LINE.search(ln)]
        if fatal:
            reading.is_error, reading.error = True, fatal[-1].strip()[:300]
        errors = "\n".join(ln for ln in last if _ERROR_LINE.search(ln))
        _mark_limits(reading, errors)
        reading.from_text = reading.rate_limited or reading.auth_error
    return reading


def read_claude(head: bytes, tail: bytes, exit_code: int | None) -> Reading:
    """Claude Code's result object (also Qwen's array, Cursor's and Amp's
    stream): result, session_id, total_cost_usd, is_error, api_error_status."""
    data = _last_json(tail)
    if isinstance(data, list):
        data = next((d for d in reversed(data) if isinstance(d, dict)
                     and d.get("type") == "result"), None)
    if not isinstance(data, dict):
        reading = read_text(head, tail, exit_code)
        reading.is_error = exit_code == 0 and reading.result_text is None
        return reading
    result = data.get("result")
    error = data.get("error")
    error_text = error.get("message") if isinstance(error, dict) else error
    reading = Reading(
        result_text=result if isinstance(result, str) else None,
        session_id=data.get("session_id") if isinstance(data.get("session_id"), str) else None,
        cost_usd=_num(data.get("total_cost_usd")),
        tokens=_tokens(data.get("usage"), ("input_tokens", "output_tokens",
                                           "cache_creation_input_tokens",
                                           "cache_read_input_tokens")),
        is_error=bool(data.get("is_error")) or str(data.get("subtype", "")).startswith("error")
        # Qwen prints `{"error": {...}}` on stderr after its result when it fails.
        or (error is not None and "type" not in data),
    )
    if reading.is_error:
        reading.error = str(error_text or result or data.get("subtype") or "agent error")
        if data.get("api_error_status") == 401 or data.get("api_error_type") in (
                "authentication_error", "oauth_org_not_allowed"):
            reading.auth_error = True
        elif data.get("api_error_status") == 429 or "rate_limit" in str(
                data.get("api_error_type")):
            reading.rate_limited = True
        _mark_limits(reading, reading.error)
    return reading


def read_codex(head: bytes, tail: bytes, exit_code: int | None) -> Reading:
    """Codex `exec --json` events: thread.started, item.*, turn.failed, error."""
    reading = Reading()
    for event in _json_lines(head):
        if isinstance(event, dict) and event.get("type") == "thread.started":
            reading.session_id = event.get("thread_id")
            break
    for event in _json_lines(tail):
        if not isinstance(event, dict):
            continue
        kind = str(event.get("type") or "")
        item = _dict(event.get("item"))
        if kind.startswith("item.") and item.get("type") == "agent_message":
            reading.result_text = item.get("text")
        elif kind == "thread.started" and not reading.session_id:
            reading.session_id = event.get("thread_id")
        elif kind == "turn.completed":
            # An `error` before this was transient: codex retried and finished.
            reading.is_error, reading.error = False, None
            used = _tokens(event.get("usage"), ("input_tokens", "output_tokens"))
            if used is not None:
                reading.tokens = (reading.tokens or 0) + used
        elif kind in ("turn.failed", "error"):
            err = event.get("error") if kind == "turn.failed" else event
            message = err.get("message") if isinstance(err, dict) else err
            reading.is_error = True
            reading.error = str(message or kind)
    return _mark_limits(reading, reading.error)


def read_gemini(head: bytes, tail: bytes, exit_code: int | None) -> Reading:
    """Gemini CLI `-o json`: {session_id, response, stats, error}."""
    data = _last_json(tail)
    if not isinstance(data, dict):
        return read_text(head, tail, exit_code)
    error = data.get("error")
    reading = Reading(result_text=data.get("response") if isinstance(
        data.get("response"), str) else None, session_id=data.get("session_id"),
        tokens=_gemini_tokens(data.get("stats")))
    if error:
        reading.is_error = True
        reading.error = str(error.get("message") if isinstance(error, dict) else error)
        code = error.get("code") if isinstance(error, dict) else None
        if code == 429:
            reading.rate_limited = True
        # 401 from the API; 41 is the CLI's own "no auth method" exit code.
        elif code in (401, 41):
            reading.auth_error = True
    return _mark_limits(reading, reading.error)


def _gemini_tokens(stats: Any) -> int | None:
    """`stats.models.<model>.tokens.total`, summed over models."""
    models = _dict(_dict(stats).get("models"))
    counts = [_tokens(_dict(m).get("tokens"), ("total",)) for m in models.values()]
    return sum(c for c in counts if c is not None) if any(c is not None for c in counts) \
        else None


def read_opencode(head: bytes, tail: bytes, exit_code: int | None) -> Reading:
    """OpenCode `run --format json` events: text parts, sessionID, errors."""
    reading = Reading()
    texts: list[str] = []
    for event in _json_lines(head + b"\n" + tail):
        if not isinstance(event, dict):
            continue
        reading.session_id = reading.session_id or event.get("sessionID")
        kind = event.get("type")
        if kind == "step_start":
            texts = []
        elif kind == "text":
            texts.append(str((event.get("part") or {}).get("text") or ""))
        elif kind == "error":
            reading.is_error = True
            reading.error = _opencode_error(event.get("error"))
            status = _dict(_dict(event.get("error")).get("data")).get("statusCode")
            reading.auth_error = reading.auth_error or status == 401
            reading.rate_limited = reading.rate_limited or status == 429
    reading.result_text = "".join(texts).strip() or None
    return _mark_limits(reading, reading.error)


def _opencode_error(err: Any) -> str:
    """`{name, data: {message}}` (opencode's own shape) or `{message}`."""
    if not isinstance(err, dict):
        return str(err)
    data = _dict(err.get("data"))
    message = data.get("message") or err.get("message")
    name = err.get("name")
    return ": ".join(str(p) for p in (name, message) if p) or "agent error"


def read_pi(head: bytes, tail: bytes, exit_code: int | None) -> Reading:
    """Pi `--mode json`: a session line, then events ending in agent_end.
    Errors do not change pi's exit code in this mode: stopReason says."""
    reading = Reading()
    for event in _json_lines(head):
        if isinstance(event, dict) and event.get("type") == "session":
            reading.session_id = event.get("id")
            break
    end = None
    for event in _json_lines(tail):
        if isinstance(event, dict) and event.get("type") == "agent_end":
            end = event
    messages = [m for m in (end or {}).get("messages", []) if isinstance(m, dict)
                and m.get("role") == "assistant"]
    cost = sum(_num(((m.get("usage") or {}).get("cost") or {}).get("total")) or 0.0
               for m in messages)
    reading.cost_usd = cost or None
    if messages:
        last = messages[-1]
        content = last.get("content")
        if isinstance(content, list):
            content = "".join(c.get("text", "") for c in content if isinstance(c, dict))
        reading.result_text = content if isinstance(content, str) else None
        if last.get("stopReason") == "error":
            reading.is_error = True
            reading.error = str(last.get("errorMessage") or "agent error")
    return _mark_limits(reading, reading.error)


def read_goose(head: bytes, tail: bytes, exit_code: int | None) -> Reading:
    """Goose `run --output-format json`: {messages, metadata{cost_usd,status}}."""
    data = _last_json(tail)
    if not isinstance(data, dict):
        return read_text(head, tail, exit_code)
    meta = data.get("metadata") or {}
    reading = Reading(cost_usd=_num(meta.get("cost_usd")))
    for message in reversed(data.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "assistant":
            content = message.get("content")
            if isinstance(content, list):
                content = "".join(str(c.get("text", "")) for c in content
                                  if isinstance(c, dict))
            reading.result_text = content if isinstance(content, str) else None
            break
    if str(meta.get("status", "")).lower() in ("error", "failed"):
        reading.is_error, reading.error = True, f"goose status {meta.get('status')}"
    return _mark_limits(reading, reading.error)


def read_copilot(head: bytes, tail: bytes, exit_code: int | None) -> Reading:
    """Copilot `--output-format json`: events ending in a result event."""
    reading = Reading()
    for event in _json_lines(tail):
        if not isinstance(event, dict):
            continue
        reading.session_id = event.get("sessionId") or event.get("session_id") \
            or reading.session_id
        if event.get("type") in ("assistant.message", "message"):
            data = _dict(event.get("data")) or event
            if data.get("content"):
                reading.result_text = str(data["content"])
        if event.get("type") == "result":
            text = event.get("result") or event.get("content")
            reading.result_text = str(text) if text else reading.result_text
            if event.get("is_error") or event.get("error"):
                reading.is_error = True
                reading.error = str(event.get("error") or text or "agent error")
    return _mark_limits(reading, reading.error)


Reader = Callable[[bytes, bytes, int | None], Reading]


def sanitized(reading: Reading, now: float) -> Reading:
    """Well-formed JSON can still carry hostile values: keep only sane ones,
    and note what was dropped (DESIGN §11)."""
    def drop(what: str, value: Any, expected: str) -> None:
        if value is not None:
            reading.notes.append(f"{what} {untrusted.shorten(value)} dropped: expected {expected}")

    sid = untrusted.session_id(reading.session_id)
    if sid is None:
        drop("session id", reading.session_id or None, "an agent session id")
    reading.session_id = sid
    cost = untrusted.number(reading.cost_usd, 0.0, untrusted.MAX_RUN_COST_USD)
    if cost is None:
        drop("cost", reading.cost_usd, "dollars between 0 and 1000000")
    reading.cost_usd = cost
    # A reset years away is held to a week (domain/valves.deferral_end);
    # one that is no time at all is dropped: back off instead.
    reset = untrusted.number(reading.reset_at, 0.0, 1e11)
    if reset is None:
        drop("usage-limit reset time", reading.reset_at, "a time (seconds since 1970)")
    elif reset > now + WEEK:
        reading.notes.append(f"usage-limit reset time {reset:.0f} is more than a week away: "
                             "held to a week")
        reset = now + WEEK
    reading.reset_at = reset
    tokens = untrusted.number(reading.tokens, 0.0, 1e15)
    reading.tokens = None if tokens is None else int(tokens)
    # The final message stays multi-line (the decision line and `--until` are
    # found in it); the error is a field shown on one line.
    reading.result_text = untrusted.utf8(reading.result_text[-RESULT_CHARS:]) \
        if isinstance(reading.result_text, str) else None
    if reading.error is not None:
        reading.error = untrusted.line(str(reading.error)[:RESULT_CHARS])
    reading.is_error, reading.rate_limited = bool(reading.is_error), bool(reading.rate_limited)
    reading.auth_error = bool(reading.auth_error)
    reading.from_text = bool(reading.from_text)
    if reading.auth_error:
        reading.rate_limited = False  # a key that is refused is not waited out
    return reading


def _safe(reader: Reader) -> Reader:
    """Odd output must never cost the run its record: fall back to plain text."""
    def read(head: bytes, tail: bytes, exit_code: int | None) -> Reading:
        now = clock.now()
        try:
            return sanitized(reader(head, tail, exit_code), now)
        except Exception:
            return sanitized(read_text(head, tail, exit_code), now)

    read.__name__ = reader.__name__
    return read


READERS: dict[str, Reader] = {name: _safe(reader) for name, reader in {
    "text": read_text, "claude": read_claude, "codex": read_codex, "gemini": read_gemini,
    "opencode": read_opencode, "pi": read_pi, "goose": read_goose, "copilot": read_copilot,
}.items()}
