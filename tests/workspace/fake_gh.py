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

PR feedback (DESIGN §16) asks three more things, each checked:
  pr view URL --json F          URL must be one this fake printed (by URL only:
                                loopctl names PRs by URL); prints state
                                ($FAKE_GH_PR_STATE, default OPEN), headRefName
                                (the PR's head, or $FAKE_GH_HEAD) and
                                isCrossRepository ($FAKE_GH_CROSS=1: true)
  pr checks SEL                 exits 1 when a check failed, 8 when one is
                                pending, as gh does
  run view ID --log-failed -R R ID must be a run named in a link of the checks
                                `pr checks` prints now, R must be github.com/o/r;
                                prints $FAKE_GH_RUN_LOG_FILE (bytes) or a line
The PRs it opens are numbered 7, 8, ...; $FAKE_GH_HANG=view|checks|run makes
that call sleep for an hour (loopctl must kill it).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

PR_NUMBER = 7
PR_URL = f"https://github.com/o/r/pull/{PR_NUMBER}"
PASSING = [{"name": "ci", "state": "SUCCESS", "bucket": "pass"}]
ASKS_ABOUT_A_PR = {"checks", "ready", "merge", "view"}
REPO = "github.com/o/r"


def url_of(index: int) -> str:
    return f"https://github.com/o/r/pull/{PR_NUMBER + index}"


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
    urls = [url_of(i) for i in range(len(prs))]
    if prs and os.environ.get("FAKE_GH_PR_URL"):
        urls.append(os.environ["FAKE_GH_PR_URL"])
    if argv[1] == "view":  # only ever by URL
        return None if sel in urls else f"pr view: {sel!r} is not the URL of an open PR"
    if sel in prs or sel in urls or sel in (str(PR_NUMBER + i) for i in range(len(prs))):
        return None
    return f'no pull requests found for branch "{sel}"'


def refusal(sub: str | None, argv: list[str], log: Path) -> str | None:
    if sub == "create":
        return create(argv, log)
    if sub in ASKS_ABOUT_A_PR:
        return selected(argv, log)
    if sub == "run":
        return run_refusal(argv)
    return None


def run_refusal(argv: list[str]) -> str | None:
    """`gh run view ID --log-failed -R github.com/o/r` about a run the
    checks name, or why not."""
    if argv[:2] != ["run", "view"] or "--log-failed" not in argv:
        return f"unexpected: gh {' '.join(argv[:4])}"
    if option(argv, "-R") != REPO:
        return f"run view: -R {option(argv, '-R')!r} is not {REPO}"
    run = argv[2] if len(argv) > 2 else ""
    links = [str(c.get("link", "")) for c in json.loads(_checks_answer() or "[]")]
    if not run.isdigit() or not any(f"/actions/runs/{run}/" in link + "/" for link in links):
        return f"run view: no run {run!r} among the checks' links"
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
    if argv[:1] == ["run"]:
        sub = "run"
    failing = sub is not None and sub == os.environ.get("FAKE_GH_FAIL")
    refused = None if failing else refusal(sub, argv, log)
    entry: dict[str, object] = {"argv": argv, "cwd": os.getcwd()}
    if sub in ASKS_ABOUT_A_PR:
        entry["pr"] = argv[2] if len(argv) > 2 else None
    if sub == "run":
        entry["run"] = argv[2] if len(argv) > 2 else None
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
    if os.environ.get("FAKE_GH_HANG") == sub:
        time.sleep(3600)
    return answer(sub, argv, log)


def answer(sub: str | None, argv: list[str], log: Path) -> int:
    """What gh prints for a call it accepted; its exit code."""
    if sub == "create":
        url = os.environ.get("FAKE_GH_PR_URL") or url_of(len(open_prs(log)) - 1)
        print("Creating draft pull request" if url == "none" else url)
    elif sub == "checks":
        text = _checks_answer()
        print(text)
        buckets = {c.get("bucket") for c in json.loads(text or "[]")}
        return 1 if buckets & {"fail", "cancel"} else 8 if "pending" in buckets else 0
    elif sub == "view":
        heads = list(open_prs(log))
        urls = [url_of(i) for i in range(len(heads))]
        head = heads[urls.index(argv[2])] if argv[2] in urls else heads[-1]
        print(json.dumps({"state": os.environ.get("FAKE_GH_PR_STATE", "OPEN"),
                          "headRefName": os.environ.get("FAKE_GH_HEAD", head),
                          "isCrossRepository": os.environ.get("FAKE_GH_CROSS") == "1"}))
    elif sub == "run":
        path = os.environ.get("FAKE_GH_RUN_LOG_FILE")
        sys.stdout.flush()
        sys.stdout.buffer.write(Path(path).read_bytes() if path else
                                b"build\tTest\tFAILED tests/test_x.py::test_y\n")
    return 0


def refusals(log: Path) -> list[str]:
    """What the fake refused during a test (the fixtures assert none)."""
    if not log.exists():
        return []
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    return [f"gh {' '.join(e['argv'])}: {e['refused']}" for e in lines if "refused" in e]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
