"""Finding one entry in a JSON document that loopctl laid out one entry a
line (the definitions cache, state.json), without decoding the others.

A compact encoding has no raw line break inside a value, so a line that
begins with an entry's key can only be that entry. Each line ends with the
`,` that separates it from the next; the last ends with the two bytes that
close the document (`]}` or `}}`).
"""

from __future__ import annotations


def line_span(data: bytes, prefix: bytes, start: int = 0) -> tuple[int, int] | None:
    """Where the line of `data` beginning with `prefix` lies, at or after
    `start` (the first line counts only from 0), its ending left out; None
    when no line begins so."""
    if start == 0 and data.startswith(prefix):
        at = 0
    else:
        found = data.find(b"\n" + prefix, start)
        if found < 0:
            return None
        at = found + 1
    end = data.find(b"\n", at)
    return at, (end - 1 if end >= 0 else len(data) - 2)
