"""`--worktree` and its hand-off options (DESIGN §12, §15), for `start` and
`update`: checked as the settings table says, then with git itself.
"""

from __future__ import annotations

from typing import Any

from loopctl.cli.options import duration, fail
from loopctl.cli.protect_opts import protect_given, warn_unmatched
from loopctl.cli.setting_opts import given as given_setting
from loopctl.domain.errors import UsageError


def workspace_changes(cwd: str, current: dict[str, Any], *, worktree: bool | None,
                      base: str | None, branch_prefix: str | None, push: str | None,
                      pr: bool | None, merge: str | None, checks_timeout: str | None,
                      copy: list[str] | None, max_file_size: str | None = None,
                      protect: list[str] | None = None) -> dict[str, Any]:
    """--worktree and its hand-off options as loops.yaml keys; checked with
    git itself (a repository at --cwd, branch names git accepts)."""
    given = {"worktree": worktree, "base": base, "branch_prefix": branch_prefix, "push": push,
             "pr": pr, "merge": merge, "copy": copy,
             "checks_timeout": duration(checks_timeout, "--checks-timeout"),
             "max_file_size": _size(max_file_size), "protect": protect_given(protect)}
    if worktree is False:  # off: its hand-off settings go with it
        return dict.fromkeys(("worktree", "base", "branch_prefix", "push", "pr", "merge",
                              "checks_timeout", "copy", "max_file_size", "fix_attempts",
                              "protect"))
    if pr is False:  # no PR: nothing to fix either
        given["fix_attempts"] = None
    given = {k: v if v != [] else None  # `--protect none`: [] clears
             for k, v in given.items() if v is not None or k == "fix_attempts"}
    given_setting("merge", merge)  # the row's rule, named by the flag
    merged = {**current, **given}
    _check_handoff_options(merged)
    if not merged.get("worktree"):
        return given
    # Only for --worktree loops: loaded by every start, they would cost it ms.
    from loopctl.integrations.git import check_prefix, check_ref
    from loopctl.integrations.worktree import check_handoff_targets, repository

    repo, branch = repository(cwd)
    if merged.get("base") is None:
        if branch is None:
            fail(f"--worktree: {cwd} has no branch checked out (detached HEAD); give --base")
        given["base"] = branch
    check_ref(str(merged.get("base") or given["base"]), "--base")
    if branch_prefix is not None:
        check_prefix(branch_prefix)
    if {"base", "push", "worktree"} & set(given):
        base_ref = str(merged.get("base") or given["base"])
        try:
            check_handoff_targets(repo, base_ref, merged.get("push"))
        except UsageError as exc:
            if base is not None or "--base" not in exc.message:
                raise
            fail(f"--worktree: the branch checked out in {repo}, {base_ref!r}, has no commit "
                 "to start runs from; commit first, or give --base")
    if copy:
        from loopctl.integrations.copying import refuse_tracked

        refuse_tracked(repo, tuple(copy))
    warn_unmatched(repo, str(merged.get("base") or given["base"]), given.get("protect"))
    return given


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    from loopctl.domain.sizes import parse_size

    return parse_size(text, "--max-file-size")


def _check_handoff_options(merged: dict[str, Any]) -> None:
    """The table's rule, in option names (loops.yaml says `'push' needs
    'worktree: true'`); before git is asked about any of them."""
    from loopctl.domain.loop_settings import unmet_need

    unmet = unmet_need(merged)
    if unmet:
        key, needed = unmet
        what = "--worktree" if needed == "worktree" else f"--{needed}"
        fail(f"--{key.replace('_', '-')} needs {what}"
             + (" (it hands off the branch of each run's worktree)"
                if needed == "worktree" else ""))
