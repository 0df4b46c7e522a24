"""PR feedback and notes (DESIGN §16): the pure rules.

PR feedback: with `--pr`, before a run loopctl asks `gh` about the newest PR
the loop opened. When its checks failed, the run continues that PR (its
worktree on the PR's head branch, its hand-off a push to it), at most
`--fix-attempts` times per PR; then the PR is left for review. Everything
`gh` says is untrusted: JSON bounded and checked field by field, a head
branch accepted only when it is the loop's own run branch, log text shown
to the agent only as sanitized data.

Notes: `--notes` keeps one file per loop across runs; what the agent leaves
in its copy is kept, cut at 64 KiB. Its content is only ever file content,
never a path, an argument or a placeholder.

Nothing here touches a file, a process or the clock.
"""

from __future__ import annotations

import json
import re

from loopctl.domain.gates import tail_text
from loopctl.domain.names import is_run_id
from loopctl.domain.run_parts import MAX_CHECKS_SHOWN, PlanRecord
from loopctl.domain.untrusted import block, line
from loopctl.fast.data_class import factory, record
from loopctl.fast.lazy_re import lazy

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any

DEFAULT_FIX_ATTEMPTS = 3
LOG_TAIL = 8 * 1024          # bytes of check names and log tails in the envelope
MAX_NOTES = 64 * 1024        # bytes of notes kept
MAX_LOG_RUNS = 3             # `gh run view --log-failed` calls per look
MAX_FIELD = 300              # characters of a check's name, workflow or link

# The fields asked of gh, as its manual lists them (cli.github.com/manual):
#   gh pr view URL --json ...    JSON fields include state (OPEN, CLOSED,
#                                MERGED), headRefName, isCrossRepository
#   gh pr checks URL --json ...  JSON fields: bucket, completedAt, description,
#                                event, link, name, startedAt, state, workflow;
#                                bucket is pass, fail, pending, skipping or
#                                cancel; exit 8 means checks pending
PR_FIELDS = "state,headRefName,isCrossRepository"
CHECK_FIELDS = "name,state,bucket,link,workflow"
BUCKETS = ("pass", "fail", "pending", "skipping", "cancel")

PR_URL = lazy(r"https://([A-Za-z0-9.-]+)/([A-Za-z0-9_.-]+)/([A-Za-z0-9_.-]+)/pull/"
                    r"([0-9]{1,10})")


# -- what gh says ----------------------------------------------------------------------


@record(frozen=True)
class Check:
    name: str
    bucket: str
    link: str = ""
    workflow: str = ""


@record(frozen=True)
class PullRequest:
    state: str       # OPEN, CLOSED, MERGED (anything else: not open)
    head: str        # headRefName, unchecked
    cross: bool      # the head is in a fork


def _json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


def _short(value: Any) -> str:
    return line(value)[:MAX_FIELD] if isinstance(value, str) else ""


def read_pr(data: bytes) -> PullRequest | None:
    """`gh pr view --json state,headRefName,isCrossRepository`; None when
    it is not that shape."""
    found = _json(data)
    if not isinstance(found, dict) or not isinstance(found.get("state"), str) \
            or not isinstance(found.get("headRefName"), str) \
            or not isinstance(found.get("isCrossRepository"), bool):
        return None
    return PullRequest(found["state"][:20], found["headRefName"][:1000],
                       found["isCrossRepository"])


def read_checks(data: bytes) -> list[Check] | None:
    """`gh pr checks --json name,state,bucket,link,workflow`; None when it
    is not a list of such objects (a row with an unknown bucket is skipped)."""
    found = _json(data)
    if not isinstance(found, list):
        return None
    rows = []
    for item in found[:1000]:
        if isinstance(item, dict) and item.get("bucket") in BUCKETS:
            rows.append(Check(_short(item.get("name")) or "?", item["bucket"],
                              _short(item.get("link")), _short(item.get("workflow"))))
    return rows


def own_branch(branch: str, prefix: str, loop: str) -> bool:
    """Exactly one of this loop's run branches, `<prefix><loop>/<run-id>`:
    never a branch of another loop, a `-`-prefixed name or a `..` path."""
    head = f"{prefix}{loop}/"
    return branch.startswith(head) and is_run_id(branch[len(head):]) \
        and not branch.startswith("-")


def actions_run(link: str, pr_url: str) -> str | None:
    """The GitHub Actions run id in a check's link, when the link is a run
    of the PR's own repository (`https://HOST/OWNER/REPO/actions/runs/ID/...`)."""
    pr = PR_URL.fullmatch(pr_url)
    if pr is None:
        return None
    host, owner, repo = (re.escape(part) for part in pr.groups()[:3])
    found = re.fullmatch(rf"https://{host}/{owner}/{repo}/actions/runs/([0-9]{{1,20}})"
                         r"(?:/job/[0-9]{1,20})?(?:[?#].*)?", link)
    return found.group(1) if found else None


def repo_of(pr_url: str) -> str | None:
    """`HOST/OWNER/REPO` of a PR URL, as `gh -R` takes it."""
    found = PR_URL.fullmatch(pr_url)
    return "/".join(found.groups()[:3]) if found else None


# -- what to do ------------------------------------------------------------------------


@record
class Plan:
    """What a look at the loop's PR decided for the next run."""

    action: str                 # continue | review | drop | none
    url: str = ""
    branch: str = ""
    why: str = ""
    failed: list[Check] = factory(list)
    attempt: int = 0            # continue: this run is fix attempt N ...
    limit: int = 0              # ... of limit
    logs: dict[str, str] = factory(dict)  # run id -> tail of its failed steps' log
    note: str | None = None     # what went wrong setting the run up

    def record(self) -> PlanRecord:
        """The run record's `pr_feedback`."""
        go_on = self.action == "continue"
        return PlanRecord.written(
            pr=self.url, action=self.action, why=self.why,
            failed_checks=[c.name for c in self.failed[:MAX_CHECKS_SHOWN]] or None,
            attempt=self.attempt if go_on else None, of=self.limit if go_on else None,
            branch=self.branch if go_on else None, note=self.note or None)


def plan(pr: PullRequest | None, checks: list[Check] | None, tracked: dict[str, Any],
         prefix: str, loop: str, limit: int) -> Plan:
    """Continue the PR, leave it for review, stop following it, or nothing."""
    url, branch = str(tracked.get("url")), str(tracked.get("branch"))
    base = Plan("none", url, branch)
    if pr is None:
        base.why = "gh pr view gave no usable answer"
        return base
    if pr.state != "OPEN":
        base.action, base.why = "drop", f"the PR is {line(pr.state).lower() or 'not open'}"
        return base
    if pr.cross or pr.head != branch or not own_branch(pr.head, prefix, loop) \
            or not own_branch(branch, prefix, loop):
        base.action = "drop"
        base.why = (f"its head branch {line(pr.head)[:120]!r} is not this loop's run branch "
                    f"{line(branch)[:120]!r}" + (" (a fork's)" if pr.cross else "")
                    + "; not continued")
        return base
    if checks is None:
        base.why = "gh pr checks gave no usable answer"
        return base
    return _by_checks(base, checks, int(tracked.get("fixes") or 0), limit)


def _by_checks(base: Plan, checks: list[Check], fixes: int, limit: int) -> Plan:
    failed = [c for c in checks if c.bucket == "fail"]
    if any(c.bucket == "pending" for c in checks):
        base.why = "checks pending"
    elif not failed:
        base.why = "no failed checks" if checks else "no checks reported"
    elif fixes >= limit:
        base.action, base.failed = "review", failed
        base.why = (f"its checks still fail after {fixes} fix run(s) (--fix-attempts "
                    f"{limit}): {', '.join(c.name for c in failed[:5])}")
    else:
        base.action, base.failed = "continue", failed
        base.attempt, base.limit = fixes + 1, limit
        base.why = f"checks failed: {', '.join(c.name for c in failed[:5])}"
    return base


def log_runs(found: Plan) -> list[str]:
    """The Actions runs whose failed steps' logs are worth asking for."""
    runs: list[str] = []
    for check in found.failed:
        run = actions_run(check.link, found.url)
        if run and run not in runs:
            runs.append(run)
    return runs[:MAX_LOG_RUNS]


# -- what the agent is shown -----------------------------------------------------------


def feedback_text(found: Plan) -> str:
    """The failed checks and the tails of their logs, at most LOG_TAIL
    bytes, sanitized: the envelope quotes it as data."""
    rows = [f"- {c.name}" + (f" ({c.workflow})" if c.workflow else "")
            + (f": {c.link}" if c.link else "") for c in found.failed[:MAX_CHECKS_SHOWN]]
    if len(found.failed) > MAX_CHECKS_SHOWN:
        rows.append(f"- and {len(found.failed) - MAX_CHECKS_SHOWN} more")
    head = block("\n".join(rows))[: LOG_TAIL // 2]
    logs = [(run, text) for run, text in found.logs.items() if text.strip()]
    room = LOG_TAIL - len(head.encode()) - 64 * len(logs)
    parts = [head]
    for run, text in logs:
        share = max(room // len(logs), 0)
        body = block(tail_text(text.encode(), share))
        parts.append(f"\nFailed steps of run {run} (the last {share} bytes at most):\n{body}")
    out = "".join(parts).encode()[:LOG_TAIL]
    return out.decode("utf-8", errors="ignore")


def envelope_lines(found: Plan) -> list[str]:
    """What the envelope says about the PR this run continues (the data
    block itself is added by the envelope)."""
    return [f"This run continues pull request {found.url} (fix attempt {found.attempt} of "
            f"{found.limit}): its checks failed. Make them pass; loopctl pushes your commits "
            f"to its branch {found.branch}, which updates the PR."]


# -- notes -----------------------------------------------------------------------------


def keep_notes(data: bytes, size: int | None = None) -> tuple[str, list[str]]:
    """What the agent left in its notes, as kept: at most MAX_NOTES bytes
    (cut at a character boundary), UTF-8 (invalid bytes become U+FFFD),
    no NUL. The notes say why anything was changed. `size`: the file's
    whole size, when only its start was read."""
    notes: list[str] = []
    if len(data) > MAX_NOTES:
        notes.append(f"notes cut to {MAX_NOTES // 1024} KiB (the agent left "
                     f"{max(size or 0, len(data))} bytes)")
        end = MAX_NOTES
        while end > MAX_NOTES - 4 and data[end] & 0xC0 == 0x80:
            end -= 1  # not inside a character: back to where it starts
        data = data[:end]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", errors="replace")
        notes.append("notes held invalid UTF-8: replaced with U+FFFD")
    if "\0" in text:
        text = text.replace("\0", "\ufffd")
        notes.append("notes held NUL bytes: replaced with U+FFFD")
    return text, notes
