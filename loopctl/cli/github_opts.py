"""`--on-github`, `--github-repo`, `--github-command`, `--github-anyone` for
`start` and `update` (DESIGN §19): the GitHub events that trigger a loop
through `loopctl serve`."""

from __future__ import annotations

from typing import Any


def github_changes(on_github: list[str] | None, github_repo: str | None,
                   github_command: str | None, github_anyone: bool | None) -> dict[str, Any]:
    """The options as loops.yaml keys: absent when not given, None (the key
    removed) for `none`. Read once, by parse_loop (parse_github, the rows)."""
    out: dict[str, Any] = {}
    if on_github == ["none"]:  # the filters mean nothing without events
        from loopctl.domain.setting_rules import goes_with

        return dict.fromkeys(goes_with("on_github"))
    if on_github is not None:
        out["on_github"] = list(on_github)
    for key, value in (("github_repo", github_repo), ("github_command", github_command)):
        if value is not None:
            out[key] = None if value == "none" else value
    if github_anyone is not None:
        out["github_anyone"] = github_anyone or None
    return out
