"""Names loopctl gives and accepts: loop names and run ids.

Pure and import-free: the `tick` fast path checks them too."""

from __future__ import annotations

# Plain sets, not regular expressions: `re` is not loaded on the `tick` fast path.
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789._-")
_DIGITS = frozenset("0123456789")


def is_loop_name(name: object) -> bool:
    """What `start` accepts: 1-64 of a-z 0-9 . _ -, not starting with . or -
    (so never `..`, a path separator or a flag)."""
    return (isinstance(name, str) and 0 < len(name) <= 64 and name[0] not in ".-"
            and set(name) <= _NAME_CHARS)


def is_run_id(run_id: object) -> bool:
    """`20261130T031500Z-0007`: a UTC timestamp and a sequence number."""
    if not isinstance(run_id, str) or not 21 <= len(run_id) <= 26:
        return False
    stamp, dash, seq = run_id[:16], run_id[16:17], run_id[17:]
    return (set(stamp[:8] + stamp[9:15]) <= _DIGITS and stamp[8] == "T" and stamp[15] == "Z"
            and dash == "-" and len(seq) >= 4 and set(seq) <= _DIGITS)

# The agent presets a definition may name (loopctl/agents/presets.py has
# what each one runs).
PRESETS = (
    "claude", "codex", "gemini", "qwen", "opencode", "aider", "goose",
    "pi", "cursor", "copilot", "crush", "amp", "shell",
)
