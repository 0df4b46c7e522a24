"""A stand-in for the GitHub CLI (`gh`) in loopctl's workspace tests.

Every call appends its argv (without `gh`) and cwd as one JSON line to
$FAKE_GH_LOG. It answers:
  pr create   prints https://github.com/o/r/pull/7
  pr checks   prints $FAKE_GH_CHECKS (default: one passing check "ci")
  pr ready    exit 0
  pr merge    exit 0
FAKE_GH_FAIL=create|checks|ready|merge makes that subcommand print an error
on stderr and exit 1.
"""

from __future__ import annotations

import json
import os
import sys

PR_URL = "https://github.com/o/r/pull/7"
PASSING = [{"name": "ci", "state": "SUCCESS", "bucket": "pass"}]


def main(argv: list[str]) -> int:
    log = os.environ.get("FAKE_GH_LOG")
    if log:
        with open(log, "a") as handle:
            handle.write(json.dumps({"argv": argv, "cwd": os.getcwd()}) + "\n")
    sub = argv[1] if len(argv) > 1 and argv[0] == "pr" else None
    if sub is not None and sub == os.environ.get("FAKE_GH_FAIL"):
        print(f"fake gh: pr {sub} refused (FAKE_GH_FAIL)", file=sys.stderr)
        return 1
    if sub == "create":
        print(PR_URL)
    elif sub == "checks":
        print(os.environ.get("FAKE_GH_CHECKS") or json.dumps(PASSING))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
