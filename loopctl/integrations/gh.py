"""The GitHub CLI steps of a hand-off (DESIGN §12, §15): open a draft PR, wait
for its checks, mark it ready, merge it.

Every step after `gh pr create` names the PR by the URL that call printed,
never by branch: a branch name can match another PR (an older one of the same
branch, a fork's), the URL only the one just opened.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Callable
from typing import Any

from loopctl.domain.untrusted import line
from loopctl.fast.data_class import record
from loopctl.integrations import subprocess_runner as runner
from loopctl.integrations.git import GIT_TIMEOUT, GitError, last_line

NO_CHECKS_AFTER = 180.0   # a PR with no checks reported by then is "no checks": never merged
CANCEL_POLL = 0.5
# What a hand-off step reads of gh's output: a URL, a checks list.
MAX_OUTPUT = 2**20
_PR_URL = re.compile(r"https://[^\s/]+/[^\s/]+/[^\s/]+/pull/[0-9]+")


def gh(*args: str, cwd: str, timeout: float = GIT_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """`gh ARGS` for the hand-off steps, through `run_bounded`: its output
    read to MAX_OUTPUT, its whole session killed at the timeout."""
    ran = run_bounded(list(args), cwd, MAX_OUTPUT, False, timeout)
    if ran.missing:
        raise GitError("gh (GitHub CLI) is not on PATH; install it and `gh auth login`")
    if ran.code is None:
        raise GitError(f"gh {args[0]} {args[1]} timed out")
    return subprocess.CompletedProcess(["gh", *args], ran.code, ran.out.decode("utf-8", "replace"),
                                       ran.err.decode("utf-8", "replace"))


MAX_STDERR = 2000


@record
class Answer:
    code: int | None       # None: gh could not start, or was killed at the timeout
    out: bytes
    err: str
    cut: bool = False      # more came than the bound


def timeout() -> float:
    from loopctl.settings import knob

    return knob("LOOPCTL_GH_TIMEOUT")


@record
class Ran:
    code: int | None  # None: it could not start, or was killed at the timeout
    out: bytes
    err: bytes  # its end, at most MAX_STDERR * 4 bytes
    cut: bool = False  # more output came than the bound
    missing: bool = False  # gh is not on PATH
    why: str = ""  # why it could not start


def call(args: list[str], cwd: str, limit: int, keep_tail: bool = False) -> Answer:
    """`gh ARGS`: at most `limit` bytes of stdout (its start, or with
    `keep_tail` its end), killed with its children at $LOOPCTL_GH_TIMEOUT;
    its stderr one printable line."""
    seconds = timeout()
    ran = run_bounded(args, cwd, limit, keep_tail, seconds)
    if ran.missing:
        return Answer(None, b"", "gh (GitHub CLI) is not on PATH")
    if ran.why:
        return Answer(None, b"", ran.why)
    if ran.code is None:
        return Answer(None, b"", f"gh {' '.join(args[:2])} timed out after {seconds:g}s")
    return Answer(ran.code, ran.out, line(ran.err.decode("utf-8", "replace"))[-MAX_STDERR:],
                  ran.cut)


def run_bounded(args: list[str], cwd: str, limit: int, keep_tail: bool,
                seconds: float) -> Ran:
    """The one way loopctl runs gh: no prompt, no colour, its own session
    (killed whole at the deadline), stdout read no further than `limit`."""
    env = dict(os.environ, GH_PROMPT_DISABLED="1", NO_COLOR="1", GH_NO_UPDATE_NOTIFIER="1",
               GH_SPINNER_DISABLED="1")
    try:
        ran = runner.run(["gh", *args], env=env, timeout=seconds, cwd=cwd, out_limit=limit,
                         keep_tail=keep_tail, err_limit=MAX_STDERR * 4)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            return Ran(None, b"", b"", missing=True)
        return Ran(None, b"", b"", why=f"gh could not start: {exc.strerror}")
    if ran.timed_out:
        return Ran(None, b"", ran.err)
    return Ran(ran.returncode, ran.out, ran.err, ran.truncated)


def open_pr(repo: str, base: str, branch: str, title: str, body: str) -> str:
    """A draft PR; its URL, as gh printed it."""
    # gh (pflag) takes the next argument as the value even when it starts
    # with `-`, so a prompt opening the body cannot become a flag.
    proc = gh("pr", "create", "--draft", "--base", base, "--head", branch,
              "--title", title[:250], "--body", body, cwd=repo)
    if proc.returncode != 0:
        raise GitError(f"gh pr create failed: {last_line(proc)}")
    urls = _PR_URL.findall(proc.stdout)
    if not urls:
        # Without its URL no later step could name this PR for sure.
        raise GitError("gh pr create printed no PR URL: "
                       f"{last_line(proc) if proc.stdout.strip() else 'nothing'}")
    return str(urls[-1])


def ready(repo: str, pr: str) -> None:
    proc = gh("pr", "ready", pr, cwd=repo)
    if proc.returncode != 0:
        raise GitError(f"gh pr ready failed: {last_line(proc)}")


def merge(repo: str, pr: str, method: str) -> None:
    proc = gh("pr", "merge", pr, f"--{method}", cwd=repo)
    if proc.returncode != 0:
        raise GitError(f"gh pr merge failed: {last_line(proc)}")


def wait_for_checks(repo: str, pr: str, timeout: float,
                    cancelled: Callable[[], bool] = lambda: False) -> str | None:
    """None when all checks passed; else why not (failing, pending, none,
    or the hand-off was cancelled while waiting)."""
    started = time.monotonic()
    while True:
        proc = gh("pr", "checks", pr, "--json", "name,state,bucket", cwd=repo)
        checks = _checks(proc.stdout) if proc.returncode in (0, 1, 8) else None
        elapsed = time.monotonic() - started
        if checks:
            failing = [c["name"] for c in checks if c.get("bucket") in ("fail", "cancel")]
            if failing:
                return "checks failing: " + ", ".join(str(n) for n in failing)[:300]
            if all(c.get("bucket") in ("pass", "skipping") for c in checks):
                return None
        elif elapsed >= min(NO_CHECKS_AFTER, timeout):
            return "no checks reported: not merged without them"
        if elapsed >= timeout:
            return f"checks still pending after {timeout:g}s"
        if _wait_or_cancel(min(10.0, max(timeout - elapsed, 0.1)), cancelled):
            return "hand-off cancelled while checks were pending"


def _wait_or_cancel(seconds: float, cancelled: Callable[[], bool]) -> bool:
    """Sleep `seconds` in short slices; True as soon as `cancelled()` is:
    a `stop --kill` during a 30-minute wait takes effect within a second."""
    end = time.monotonic() + seconds
    while True:
        if cancelled():
            return True
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(CANCEL_POLL, left))


def _checks(text: str) -> list[dict[str, Any]]:
    import json

    try:
        data = json.loads(text or "[]")
    except ValueError:
        return []
    return [c for c in data if isinstance(c, dict)] if isinstance(data, list) else []
