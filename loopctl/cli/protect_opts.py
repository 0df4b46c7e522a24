"""`--protect PATH` (DESIGN §16) for `start` and `update`: the option, its
checks, and the warning for a glob that matches nothing on the base."""

from __future__ import annotations

import sys
from typing import Any

from loopctl.cli.options import fail


def protect_given(patterns: list[str] | None) -> list[str] | None:
    """`--protect` as given (checked: inside the repository, one line);
    [] for `none`, which clears."""
    if patterns is None:
        return None
    if patterns == ["none"]:
        return []
    from loopctl.domain.protect import problem

    for pattern in patterns:
        found = problem(pattern)
        if found:
            fail(found)
    return list(dict.fromkeys(patterns))


def warn_unmatched(repo: str, base: str, patterns: Any) -> None:
    """A pattern that matches nothing on the base is allowed (what the agent
    adds there is removed), but is most often a typo: say so."""
    if not patterns:
        return
    from loopctl.domain.untrusted import line
    from loopctl.integrations.protect import unmatched

    for pattern in unmatched(repo, base, tuple(patterns)):
        print(f"warning: --protect {line(pattern)[:100]!r} matches nothing on {line(base)}; "
              "runs only remove what the agent adds there", file=sys.stderr)
