"""The outcome of a run, in one table: every outcome loopctl records, the
exit code `loopctl run` (and a supervisor) gives for it, its mark in
`status` and `watch` (unicode, ascii), and whether it is a failure (the
metrics' `failed` count; `--max-failures` counts only the agent's own, see
domain/lifecycle.py)."""

from __future__ import annotations

from loopctl.domain.errors import EXIT_BUSY, EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_TIMEOUT

# outcome: (exit code, unicode mark, ascii mark, a failure)
TABLE = {
    "ok": (EXIT_OK, "✓", "o", False),
    "failed": (EXIT_FAILED, "✗", "x", True),
    "timeout": (EXIT_TIMEOUT, "⏱", "T", True),
    "killed": (EXIT_INTERRUPTED, "■", "K", True),
    "lost": (EXIT_FAILED, "?", "?", True),
    "deferred": (EXIT_BUSY, "↻", "D", False),  # a usage limit: it runs again after the reset
    "skipped": (EXIT_OK, "–", "-", False),  # the gate said there is nothing to do
    "gate_error": (EXIT_FAILED, "⊘", "G", True),
    "auth_error": (EXIT_FAILED, "⊗", "A", True),
}

OUTCOMES = tuple(TABLE)
EXIT_FOR_OUTCOME = {name: row[0] for name, row in TABLE.items()}
MARKS = {name: (row[1], row[2]) for name, row in TABLE.items()}
FAILURES = frozenset(name for name, row in TABLE.items() if row[3])
