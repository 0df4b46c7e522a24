"""`--worktree` and its hand-off options (DESIGN §12, §15), for `start` and
`update`: checked as the settings table says, then with git itself.
"""

from __future__ import annotations

from typing import Any

from loopctl.cli.options import fail
from loopctl.cli.protect_opts import protect_given, warn_unmatched
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
             "checks_timeout": checks_timeout, "max_file_size": max_file_size,
             "protect": protect_given(protect)}
    if worktree is False:  # off: its hand-off settings (and the PR's) go with it
        from loopctl.domain.setting_rules import goes_with

        return dict.fromkeys(goes_with("worktree"))
    if pr is False:  # no PR: nothing to fix either
        given["fix_attempts"] = None
    given = {k: v if v != [] else None  # `--protect none`: [] clears
             for k, v in given.items() if v is not None or k == "fix_attempts"}
    merged = {**current, **given}
    _check_handoff_options(merged)
    if not merged.get("worktree"):
        return given
    # Only for --worktree loops: loaded by every start, they would cost it ms.
    from loopctl.domain.setting_rules import option_name
    from loopctl.integrations.context_rules import git_repository
    from loopctl.integrations.git import check_prefix, check_ref
    from loopctl.integrations.worktree import check_handoff_targets

    repo, branch = git_repository(cwd, option_name("worktree"))  # the row's context rule
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


def _check_handoff_options(merged: dict[str, Any]) -> None:
    """The rows' `needs` rule (parse_loop checks it too, in the same words),
    here before git is asked about any of them."""
    from loopctl.domain.setting_rules import needs_text, option_name, unmet_need

    unmet = unmet_need(merged)
    if unmet:
        fail(needs_text(*unmet, option_name))
