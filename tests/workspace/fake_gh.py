"""A stand-in for the GitHub CLI (`gh`) in loopctl's workspace tests.

Every call appends its argv (without `gh`) and cwd as one JSON line to
$FAKE_GH_LOG. It answers:
  pr create   prints https://github.com/o/r/pull/7
  pr checks   prints $FAKE_GH_CHECKS (default: one passing check "ci")
  pr ready    exit 0
  pr merge    exit 0
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

PR_URL = "https://github.com/o/r/pull/7"
PASSING = [{"name": "ci", "state": "SUCCESS", "bucket": "pass"}]


def _checks_answer() -> str:
    """$FAKE_GH_CHECKS_FILE's text when set (a test can change the answer
    while a hand-off waits), else $FAKE_GH_CHECKS, else one passing check."""
    path = os.environ.get("FAKE_GH_CHECKS_FILE")
    if path:
        with open(path) as handle:
            return handle.read()
    return os.environ.get("FAKE_GH_CHECKS") or json.dumps(PASSING)


def main(argv: list[str]) -> int:
    log = os.environ.get("FAKE_GH_LOG")
    sub = argv[1] if len(argv) > 1 and argv[0] == "pr" else None
    if log:
        entry: dict[str, object] = {"argv": argv, "cwd": os.getcwd()}
        if sub in ("checks", "ready", "merge"):
            entry["pr"] = argv[2] if len(argv) > 2 else None
        with open(log, "a") as handle:
            handle.write(json.dumps(entry) + "\n")
    if sub is not None and sub == os.environ.get("FAKE_GH_FAIL"):
        print(f"fake gh: pr {sub} refused (FAKE_GH_FAIL)", file=sys.stderr)
        return 1
    if sub == "create":
        url = os.environ.get("FAKE_GH_PR_URL") or PR_URL
        print("Creating draft pull request" if url == "none" else url)
    elif sub == "checks":
        print(_checks_answer())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
