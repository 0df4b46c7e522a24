"""A stand-in for the GitHub CLI (`gh`) in loopctl's workspace tests.

Every call appends its argv (without `gh`) and cwd as one JSON line to
$FAKE_GH_LOG. It knows only the pull requests it opened (kept in
$FAKE_GH_LOG.prs.json), as GitHub would:
  pr create --base B --head H   opens PR 7 for branch H (H must not be B, and
                                must have no open PR yet); prints its URL
  pr checks|ready|merge SEL     SEL must name an open PR: its head branch,
                                its number or its URL; prints $FAKE_GH_CHECKS
                                (default: one passing check "ci") for checks
Anything else about a PR (the base branch, another branch, no selector) is
refused as gh refuses it ("no pull requests found", exit 1), and the log line
gets a "refused" key: the fixtures fail a test whose product asked about a
PR it did not open (`refusals`).
FAKE_GH_FAIL=create|checks|ready|merge makes that subcommand print an error
on stderr and exit 1. FAKE_GH_PR_URL replaces the URL `pr create` prints
(`none`: it prints no URL at all); FAKE_GH_CHECKS_FILE names a file whose
text `pr checks` prints, read at each call. Each logged line of `pr checks`, `pr
ready` and `pr merge` also has "pr": the PR it was asked about (its first
argument after the subcommand), so a test can check that loopctl named the
PR `pr create` returned rather than a branch.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

PR_NUMBER = 7
PR_URL = f"https://github.com/o/r/pull/{PR_NUMBER}"
PASSING = [{"name": "ci", "state": "SUCCESS", "bucket": "pass"}]
ASKS_ABOUT_A_PR = {"checks", "ready", "merge"}


def option(argv: list[str], name: str) -> str | None:
    """The value after `name` (gh takes the next argument whatever it is)."""
    if name in argv and argv.index(name) + 1 < len(argv):
        return argv[argv.index(name) + 1]
    return None


def open_prs(log: Path) -> dict[str, str]:
    """Head branch -> base branch of every PR this fake opened for the test."""
    try:
        return dict(json.loads(Path(f"{log}.prs.json").read_text()))
    except FileNotFoundError:
        return {}


def create(argv: list[str], log: Path) -> str | None:
    """Open the PR, or why not."""
    base, head = option(argv, "--base"), option(argv, "--head")
    prs = open_prs(log)
    if not base or not head:
        return "pr create: --base and --head are required (no TTY to ask)"
    if head == base:
        return f"pr create: head branch {head!r} is the base branch"
    if head in prs:
        return f"a pull request for branch {head!r} already exists"
    prs[head] = base
    Path(f"{log}.prs.json").write_text(json.dumps(prs))
    return None


def selected(argv: list[str], log: Path) -> str | None:
    """Why the PR `gh pr SUB SEL` names is not one this fake opened, or None."""
    sel = argv[2] if len(argv) > 2 and not argv[2].startswith("-") else None
    prs = open_prs(log)
    if sel is None:
        return "no PR named: gh would guess from the current branch"
    urls = (PR_URL, os.environ.get("FAKE_GH_PR_URL") or PR_URL)
    if sel in prs or (prs and sel in (str(PR_NUMBER), *urls)):
        return None
    return f'no pull requests found for branch "{sel}"'


def refusal(sub: str | None, argv: list[str], log: Path) -> str | None:
    if sub == "create":
        return create(argv, log)
    if sub in ASKS_ABOUT_A_PR:
        return selected(argv, log)
    return None


def _checks_answer() -> str:
    """$FAKE_GH_CHECKS_FILE's text when set (a test can change the answer
    while a hand-off waits), else $FAKE_GH_CHECKS, else one passing check."""
    path = os.environ.get("FAKE_GH_CHECKS_FILE")
    if path:
        with open(path) as handle:
            return handle.read()
    return os.environ.get("FAKE_GH_CHECKS") or json.dumps(PASSING)


def main(argv: list[str]) -> int:
    log = Path(os.environ["FAKE_GH_LOG"])
    sub = argv[1] if len(argv) > 1 and argv[0] == "pr" else None
    failing = sub is not None and sub == os.environ.get("FAKE_GH_FAIL")
    refused = None if failing else refusal(sub, argv, log)
    entry: dict[str, object] = {"argv": argv, "cwd": os.getcwd()}
    if sub in ASKS_ABOUT_A_PR:
        entry["pr"] = argv[2] if len(argv) > 2 else None
    if refused:
        entry["refused"] = refused
    with open(log, "a") as handle:
        handle.write(json.dumps(entry) + "\n")
    if failing:
        print(f"fake gh: pr {sub} refused (FAKE_GH_FAIL)", file=sys.stderr)
        return 1
    if refused:
        print(refused, file=sys.stderr)
        return 1
    if sub == "create":
        url = os.environ.get("FAKE_GH_PR_URL") or PR_URL
        print("Creating draft pull request" if url == "none" else url)
    elif sub == "checks":
        print(_checks_answer())
    return 0


def refusals(log: Path) -> list[str]:
    """What the fake refused during a test (the fixtures assert none)."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [f"gh {' '.join(e['argv'])}: {e['refused']}" for e in lines if "refused" in e]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
