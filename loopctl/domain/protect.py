"""Protected paths (DESIGN §16): what the agent of a `--worktree` loop may not
change, typically the tests and the check itself.

`--protect PATH` (loops.yaml `protect: [...]`) is a path or a glob relative
to the repository's top level: `tests/`, `tests/**`, `**/conftest.py`,
`ci/check.sh`. After the agent exits, loopctl puts every protected path back
as it is at the run's base commit (engine/steps/protect.py), so the check
runs the user's tests and no protected change is committed.

The rules here are pure: which patterns are accepted, the git pathspec each
becomes, and what the record, the note and the event say.
"""

from __future__ import annotations

from loopctl.domain.errors import UsageError
from loopctl.domain.run_parts import ProtectedPaths
from loopctl.domain.untrusted import line

KEY = "protect"
MAX_PATTERNS = 100
MAX_LENGTH = 1024
RECORDED = 100  # paths the record lists; the note names a few
NAMED_IN_NOTE = 3
GLOB = frozenset("*?[")
# Patterns that would protect the whole repository: every change the agent
# made would be put back, which is a loop that can do nothing.
EVERYTHING = frozenset({"", ".", "*", "**", "**/*"})


def problem(pattern: object, option: str = "--protect") -> str | None:
    """Why a pattern is refused (None: fine). Relative to the repository's
    top level, inside it, on one line; never `..` or absolute."""
    if not isinstance(pattern, str):
        return f"bad {option}: expected a path or glob, got {type(pattern).__name__}"
    shown = repr(line(pattern)[:80])
    if any(ord(c) < 32 or c == "\x7f" for c in pattern):
        return f"bad {option} {shown}: expected a path on one line, without control characters"
    if len(pattern) > MAX_LENGTH:
        return f"bad {option}: the path is longer than {MAX_LENGTH} characters"
    if pattern.startswith(("/", "~")):
        return (f"bad {option} {shown}: expected a path relative to the repository's top "
                "level, like tests/ or ci/check.sh")
    if ".." in pattern.split("/"):
        return f"bad {option} {shown}: '..' would leave the repository"
    if normal(pattern) in EVERYTHING:
        return (f"bad {option} {shown}: that protects the whole repository; name what the "
                "agent may not change, like tests/ or ci/check.sh")
    if normal(pattern).split("/")[0] == ".git":
        return f"bad {option} {shown}: .git is never the agent's to change"
    return None


def normal(pattern: str) -> str:
    """`./tests//` -> `tests`: no leading `./`, no empty parts, no trailing
    slash (a folder protects everything under it)."""
    parts = [p for p in pattern.split("/") if p not in ("", ".")]
    return "/".join(parts)


def check_patterns(value: object, where: str) -> tuple[str, ...]:
    """loops.yaml `protect`: a list of accepted patterns, each once."""
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_PATTERNS:
        raise UsageError(f"{where}: 'protect' must be a list of at most {MAX_PATTERNS} paths "
                         "or globs relative to the repository")
    for pattern in value:
        found = problem(pattern, "'protect'")
        if found:
            raise UsageError(f"{where}: {found}")
    return tuple(dict.fromkeys(value))


def pathspec(pattern: str) -> str:
    """The git pathspec of a pattern, from the top level whatever the
    directory: literal unless it has a glob character (`*` stops at `/`,
    `**` crosses folders), so a name with `:` or `\\` means itself."""
    magic = "glob" if GLOB & set(pattern) else "literal"
    return f":(top,{magic}){normal(pattern)}"


def pathspecs(patterns: tuple[str, ...]) -> list[str]:
    return [pathspec(p) for p in patterns]


# -- what a run that tried says ----------------------------------------------


def record_fields(changed: list[str]) -> ProtectedPaths:
    """The run record's `protected` (the first RECORDED of the changed
    paths, sorted) and, when there were more, `protected_count`."""
    return ProtectedPaths([line(p) for p in changed[:RECORDED]],
                          len(changed) if len(changed) > RECORDED else None)


def note(changed: list[str], base: str, flattened: bool) -> str:
    """`protected paths put back: the agent changed tests/test_a.py (as at
    abc1234)`: what the run's and the loop's note say."""
    named = ", ".join(line(p)[:120] for p in changed[:NAMED_IN_NOTE])
    more = len(changed) - NAMED_IN_NOTE
    text = (f"protected paths put back as at {base[:12]}: the agent changed {named}"
            + (f" and {more} more" if more > 0 else ""))
    if flattened:
        text += "; its commits that touched them were replaced by one commit"
    return text


def event_text(changed: list[str]) -> str:
    count = len(changed)
    return (f"the agent changed {count} protected path{'' if count == 1 else 's'} "
            f"({', '.join(line(p)[:80] for p in changed[:NAMED_IN_NOTE])}"
            + (", ..." if count > NAMED_IN_NOTE else "") + "); loopctl put them back")


ENVELOPE = ("These paths are protected: after you exit, loopctl puts them back as they "
            "are at the start of this run (what you add under them is removed), before the "
            "check runs and before it commits. So are the files the check's runner reads on its "
            "own (conftest.py at any level, pytest.ini, tox.ini, setup.cfg, pyproject.toml, "
            "*.pth, the -p plugins, a top-level module shadowing the runner). Do not spend the "
            "run changing them.")


def listing(patterns: tuple[str, ...]) -> str:
    """The protected paths for the envelope, one a line (quoted as data)."""
    return "\n".join(line(p) for p in patterns)
