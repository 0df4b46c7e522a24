"""`--on-github`, `--github-repo`, `--github-command`, `--github-anyone` for
`start` and `update` (DESIGN §19): the GitHub events that trigger a loop
through `loopctl serve`."""

from __future__ import annotations

from typing import Any

from loopctl.domain.errors import UsageError


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
