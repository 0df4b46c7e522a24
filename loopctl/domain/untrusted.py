"""Checks for values that cross into loopctl from outside (DESIGN §11).

The agent is an untrusted party (a confused or prompt-injected model), and so
are hand-edited files and names typed by users. Every value is checked where
it enters, with one rule per kind: numbers finite and in range, text of
bounded length, session ids in an agent's id syntax and never flag-shaped,
run ids in loopctl's own syntax. A value that fails is dropped (None) and the
caller notes why; it never reaches `state.json`. Pure: no files, no clock.
"""

from __future__ import annotations

import json
import math
import re

from loopctl.domain import outcomes
from loopctl.domain.errors import UsageError, shorten
from loopctl.domain.names import is_run_id
from loopctl.fast.lazy_re import lazy

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

# Agents' session ids are UUIDs, thread ids or slugs: word characters with
# a few separators. Never a leading `-` (it would become a flag in argv).
SESSION_ID_RE = lazy(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
DECISIONS = ("continue", "complete", "fail", "block")
OUTCOMES = outcomes.OUTCOMES
MAX_DECISION_BYTES = 64 * 1024
MAX_DECISION_TEXT = 4000
# The agent's `--next` is clamped to the loop's max delay anyway; beyond a
# year it is not a delay but an attempt to overflow a timestamp.
MAX_DELAY_S = 365 * 86400.0
MAX_RUN_COST_USD = 1_000_000.0
# Times loopctl stores are POSIX seconds between 1970 and 3000: beyond that
# `datetime` cannot render them.
MAX_TIME = 32503680000.0
# What a rule returns for a value it refuses (None is often a valid value).
INVALID: Any = object()


def number(value: Any, low: float, high: float) -> float | None:
    """A real number in [low, high], else None (bools, NaN, inf, text fail)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        result = float(value)
    except OverflowError:  # an int too large for a float
        return None
    if not math.isfinite(result) or not low <= result <= high:
        return None
    return result


def count(value: Any, high: int = 10**9) -> int | None:
    """A whole number in [0, high], else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= high:
        return None
    return value


def moment(value: Any) -> float | None:
    """A stored time: finite POSIX seconds that `datetime` can render."""
    return number(value, 0.0, MAX_TIME)


def text(value: Any, limit: int) -> str | None:
    """A string of at most `limit` characters that can be written as UTF-8."""
    if not isinstance(value, str) or len(value) > limit:
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return None
    return value


# -- text shown to a human ------------------------------------------------------
#
# ONE sanitizer for every field loopctl shows (terminals, `events`, `status`,
# `doctor`, notifications, the digest, the PR body): agent text and hand-edited
# files must not drive a terminal, reorder what is shown or forge a line.

# Escape sequences go whole (CSI can clear the screen or move the cursor, OSC
# can retitle the window or write the clipboard), 7-bit (ESC [) or 8-bit (0x9b).
_ESCAPES = lazy(
    r"(?:\x1b\]|\x9d)[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, to BEL/ST or the end
    r"|(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c]*(?:\x1b\\|\x9c)?"  # DCS SOS PM APC
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?"  # CSI
    r"|\x1b[ -/]*[0-~]?"  # two-character escapes (ESC c resets the terminal)
)
# Whatever a terminal, a log reader or a chat client may take as the end of a
# line: one field must stay one line, or it can forge the next one.
_BREAKS = lazy(r"[\t\n\v\f\r\x1c-\x1f\x85\u2028\u2029]")
# The rest of C0 and C1, DEL, the bidi embeddings, overrides, isolates and
# marks (Trojan Source: they reorder what is shown), and lone surrogates (no
# terminal can print them, UTF-8 cannot store them).
_HIDDEN = lazy("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\u061c\u200e\u200f"
                     "\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def line(value: object) -> str:
    """`value` as one printable line: escape sequences and hidden controls
    removed, every line break and tab a space."""
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():  # C speed: false for every character replaced below
        return text
    return _HIDDEN.sub("", _BREAKS.sub(" ", _ESCAPES.sub("", text)))


def block(value: str) -> str:
    """Untrusted text shown as several lines (a check's output in the
    envelope): each line as `line` makes it, the line breaks kept."""
    return "\n".join(line(part) for part in value.split("\n"))


# The older name, kept so callers written against it read as before.
plain = line


def utf8(value: str) -> str:
    """Text UTF-8 can store: JSON escapes can smuggle lone surrogates in
    (kept multi-line: this is for storing, `line` is for showing)."""
    return value.encode("utf-8", "replace").decode("utf-8")


def session_id(value: Any) -> str | None:
    return value if isinstance(value, str) and SESSION_ID_RE.fullmatch(value) else None


def check_run_id(value: str) -> str:
    if not is_run_id(value):
        raise UsageError(f"bad run id {value!r}: expected an id like 20261130T031500Z-0007 "
                         "(see `loopctl history NAME`)")
    return value


def read_decision(data: bytes) -> tuple[dict[str, Any] | None, list[str]]:
    """The decision an agent wrote, with every bad field dropped; notes say what."""
    if len(data) > MAX_DECISION_BYTES:
        return None, [f"decision file dropped: larger than {MAX_DECISION_BYTES // 1024} KiB"]
    try:
        raw = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        return None, ["decision file dropped: not UTF-8 text"]
    except (ValueError, RecursionError):
        return None, ["decision file dropped: not valid JSON"]
    if not isinstance(raw, dict):
        return None, [f"decision file dropped: expected a JSON object, got {type(raw).__name__}"]
    kind = raw.get("decision")
    if kind not in DECISIONS:
        return None, [f"decision file dropped: unknown decision {shorten(kind)}; expected "
                      + ", ".join(DECISIONS)]
    notes = []
    decision: dict[str, Any] = {"version": 1, "decision": kind}
    for key in ("summary", "evidence"):
        value = raw.get(key)
        checked = text(value, MAX_DECISION_TEXT)
        decision[key] = line(checked) if checked is not None else None
        if value is not None and decision[key] is None:
            notes.append(f"decision {key} dropped: expected text of at most "
                         f"{MAX_DECISION_TEXT} characters")
    delay = raw.get("next_delay_s")
    decision["next_delay_s"] = number(delay, 0.0, MAX_DELAY_S)
    if delay is not None and decision["next_delay_s"] is None:
        notes.append(f"decision next_delay_s {shorten(delay)} dropped: expected seconds "
                     f"between 0 and {MAX_DELAY_S:.0f}")
    return decision, notes


# The decision channel that needs no shell: the agent ends its final message
# with one line `LOOPCTL-DECISION: {"decision": ..., "summary": ...,
# "evidence": ..., "next": "20m"}`. Only the final result text is searched
# (never the prompt echoed into the log), and the line is checked exactly like
# a decision file, which wins when both exist.
#
# It counts only as the LAST non-empty line, split on `\n` alone: a line a
# reader would not see as a line of its own (behind U+2028 or `\x1e`, which
# `str.splitlines` splits on) or one the message goes on to retract is not
# the agent's last word. Only spaces, tabs and a CR are trimmed around it
# (`str.strip` would also eat `\x1c-\x1f` and U+2028), and one pair of
# backticks, which models put around code.
DECISION_LINE = "LOOPCTL-DECISION:"


def decision_from_text(text: str | None) -> tuple[dict[str, Any] | None, list[str]]:
    if not text or DECISION_LINE not in text:
        return None, []
    last = next((ln.strip(" \t\r") for ln in reversed(text.split("\n"))
                 if ln.strip(" \t\r")), "")
    if last.startswith("`") and last.endswith("`") and len(last) > 1:
        last = last[1:-1].strip(" \t")
    if not last.startswith(DECISION_LINE):
        # A mention mid-sentence says nothing; a line that looks like one does.
        looks = any(ln.strip().strip("`").startswith(DECISION_LINE) for ln in text.splitlines())
        return None, ["decision line ignored: it must be the last line of the final message"
                      ] if looks else []
    payload = last[len(DECISION_LINE):].strip(" \t")
    try:
        raw = json.loads(payload)
    except (ValueError, RecursionError):
        return None, ["decision line ignored: not valid JSON"]
    if isinstance(raw, dict) and "next" in raw and "next_delay_s" not in raw:
        raw["next_delay_s"] = _delay(raw.pop("next"))
    decision, notes = read_decision(json.dumps(raw, allow_nan=True).encode())
    return decision, [n.replace("decision file", "decision line") for n in notes]


def _delay(value: Any) -> Any:
    """`--next` as the line may give it: seconds, or a duration like 20m."""
    if isinstance(value, str):
        from loopctl.domain.durations import parse_duration

        try:
            return parse_duration(value)
        except UsageError:
            return value  # dropped with a note by read_decision
    return value


def where(url: str) -> str:
    """`json://hooks.example.com/****`: the scheme and a host that is a
    machine's name (dotted, or localhost), so a user can tell which target
    failed; the user, password, port, path and query never show. A host that
    is no machine's name (an ntfy topic, a Slack team) is masked (`mask`)."""
    from urllib.parse import urlsplit

    shown = mask(url)
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return shown
    if not shown.endswith("://****") or not host \
            or not ("." in host or host == "localhost") \
            or not re.fullmatch(r"[a-z0-9.-]{1,253}", host):
        return shown
    return f"{shown.removesuffix('****')}{host}/****"


def mask(url: str) -> str:
    """`slack://****`: the scheme says where, nothing says how to post."""
    scheme, sep, _ = url.partition("://")
    if sep and re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]{0,31}", scheme):
        return f"{scheme}://****"
    return "****"
