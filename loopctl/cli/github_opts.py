"""`--on-github`, `--github-repo`, `--github-command`, `--github-anyone` for
`start` and `update` (DESIGN §19): the GitHub events that trigger a loop
through `loopctl serve`."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from loopctl.cli.setting_opts import OptionGroup
from loopctl.domain.errors import UsageError

OnGithub = Annotated[Optional[list[str]], typer.Option(
    "--on-github", metavar="EVENT[.ACTION]",
    help="GitHub webhook event that triggers the loop through `loopctl serve`, e.g. "
         "check_suite.completed or issue_comment.created (repeatable; `none` clears).")]
GithubRepo = Annotated[Optional[str], typer.Option(
    "--github-repo", metavar="OWNER/NAME",
    help="Only events of this repository trigger (`none` clears).")]
GithubCommand = Annotated[Optional[str], typer.Option(
    "--github-command", metavar="WORD",
    help="Only comments whose first word is WORD trigger, e.g. /fix (`none` clears).")]
GithubAnyone = Annotated[Optional[bool], typer.Option(
    "--github-anyone/--github-members-only",
    help="Let comments, issues and PRs by anyone trigger, not only authors with write "
         "access (bots never do).", show_default=False)]
GITHUB_OPTS: OptionGroup = {"on_github": (OnGithub, None), "github_repo": (GithubRepo, None),
                            "github_command": (GithubCommand, None),
                            "github_anyone": (GithubAnyone, None)}


def github_changes(on_github: list[str] | None, github_repo: str | None,
                   github_command: str | None, github_anyone: bool | None) -> dict[str, Any]:
    """The options as loops.yaml keys: absent when not given, None (the key
    removed) for `none`. Checked by the one set of rules (parse_github)."""
    from loopctl.domain.github import parse_github

    out: dict[str, Any] = {}
    if on_github == ["none"]:  # the filters mean nothing without events
        return dict.fromkeys(("on_github", "github_repo", "github_command", "github_anyone"))
    if on_github is not None:
        out["on_github"] = list(on_github)
    for key, value in (("github_repo", github_repo), ("github_command", github_command)):
        if value is not None:
            out[key] = None if value == "none" else value
    if github_anyone is not None:
        out["github_anyone"] = github_anyone or None
    given = {k: v for k, v in out.items() if v is not None}
    given.setdefault("on_github", ["push"])  # `update` may add a filter to a loop's events
    try:
        parse_github(given, "bad option")
    except UsageError as exc:  # name the flag the user typed, not the key
        message = exc.message.replace("bad option: ", "", 1)
        for key in ("on_github", "github_repo", "github_command"):
            message = message.replace(f"'{key}'", "--" + key.replace("_", "-"))
        raise UsageError(message) from None
    return out
