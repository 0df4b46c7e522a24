"""Running git for workspaces (DESIGN §12, §15) so that nothing the agent left
in its worktree can choose what git runs.

Two kinds of call:
- `git(repo, ...)` runs against the user's repository (fetch, push, branches,
  `worktree add/remove`) from its checkout, which no agent works in.
- `tree_git(ws, ...)` runs against one run's worktree with `--git-dir` set to
  the admin folder loopctl recorded when it made the worktree and
  `--work-tree` to the worktree: the worktree's `.git` link is never read, so
  an agent pointing it at a git directory it wrote (or at the user's own
  repository) changes nothing.

Every call forces off what would run a program from configuration the agent
could have reached (`git config` in the worktree writes the repository's
config, or with `extensions.worktreeConfig` its `config.worktree`, which `-c`
cannot switch off but does override): fsmonitor, hooks, signing, automatic
gc, the `ext::` transport. Filter drivers named by attributes in the tree are
switched off one by one (`drivers_off`): git 2.39 has no `--attr-source`,
and an info/attributes override would change the user's own checkout too.
The user's global config stays read: it holds `core.excludesFile` (dropping
it would commit what the user ignores everywhere) and push credentials.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from loopctl.domain.checks import check_branch, check_branch_prefix
from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.domain.untrusted import plain

GIT_TIMEOUT = 120.0
GIT_OUTPUT = 256 << 20  # bytes of stdout (and of stderr's end) read of one git call
LOCK_RETRIES = 6          # git's own locks (index.lock, ref locks) when loops share a repo
_LOCKED = re.compile(r"\.lock'?: File exists|cannot lock ref|Unable to create .*\.lock|"
                     r"could not lock", re.I)
# `-c` beats every config file, includes and config.worktree among them.
SAFE = ("-c", "core.fsmonitor=false", "-c", "core.hooksPath=/dev/null",
        "-c", "commit.gpgSign=false", "-c", "tag.gpgSign=false",
        "-c", "gc.auto=0", "-c", "maintenance.auto=false",
        "-c", "protocol.ext.allow=never", "-c", "core.untrackedCache=false",
        "-c", "diff.external=", "-c", "core.pager=cat")
# What a driver named in attributes runs, per attribute.
_DRIVER_KEYS = {"filter": ("clean", "smudge", "process"), "diff": ("command", "textconv"),
                "merge": ("driver",)}
# Variables that would make git look somewhere else than loopctl says, or
# read config loopctl did not name. (GIT_SSH and the like stay: they are the
# driver's own environment, which the agent cannot set, and pushes need them.)
_DROPPED = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR",
            "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE",
            "GIT_CEILING_DIRECTORIES", "GIT_CONFIG", "GIT_CONFIG_PARAMETERS",
            "GIT_CONFIG_COUNT", "GIT_EXTERNAL_DIFF", "GIT_ATTR_SOURCE")


class GitError(LoopctlError):
    pass


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in _DROPPED and not k.startswith("GIT_CONFIG_KEY_")
           and not k.startswith("GIT_CONFIG_VALUE_")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", LC_ALL="C",
               GIT_PAGER="cat", GIT_ATTR_NOSYSTEM="1")
    env.update(extra or {})
    return env


def run(argv: Sequence[str], *, check: bool = True, timeout: float = GIT_TIMEOUT,
        env: dict[str, str] | None = None, stdin: str | None = None,
        what: str = "") -> subprocess.CompletedProcess[str]:
    """`git ARGV` with loopctl's safety settings, retrying while another git
    holds one of its locks."""
    for attempt in range(LOCK_RETRIES):
        proc = _once(argv, timeout, environment(env), stdin, what)
        if proc.returncode == 0 or not _LOCKED.search(proc.stderr):
            break
        time.sleep(0.2 * 2 ** attempt)
    if check and proc.returncode != 0:
        raise GitError(f"git {what} failed: {last_line(proc)}")
    return proc


def _once(argv: Sequence[str], timeout: float, env: dict[str, str], stdin: str | None,
          what: str) -> subprocess.CompletedProcess[str]:
    """One git call through the bounded runner. Not in a session of its own:
    an interactive `loopctl run`'s push may need ssh to ask on the terminal."""
    from loopctl.integrations import subprocess_runner as runner

    try:
        ran = runner.run(["git", *SAFE, *argv], env=env, timeout=timeout, session=False,
                         stdin=None if stdin is None else stdin.encode("utf-8", "surrogateescape"),
                         out_limit=GIT_OUTPUT, err_limit=GIT_OUTPUT)
    except FileNotFoundError:
        raise UsageError("git is not installed; --worktree needs it") from None
    if ran.timed_out:
        raise GitError(f"git {what} timed out after {timeout:g}s")
    if ran.truncated:
        raise GitError(f"git {what} printed over {GIT_OUTPUT >> 20} MiB; not read further")
    return subprocess.CompletedProcess(
        ["git", *SAFE, *argv], ran.returncode, ran.out.decode("utf-8", "surrogateescape"),
        ran.err.decode("utf-8", "surrogateescape"))


def _what(args: Sequence[str]) -> str:
    return " ".join(a for a in args[:2] if not a.startswith("-c"))


def git(repo: str | Path, *args: str, check: bool = True,
        timeout: float = GIT_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """A git command on the user's repository, from its top level (the
    user's checkout, which the agent never works in)."""
    return run(["-C", str(repo), *args], check=check, timeout=timeout, what=_what(args))


def tree_git(git_dir: str | Path, work_tree: str | Path, *args: str, check: bool = True,
             env: dict[str, str] | None = None,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """A git command on one worktree, named by loopctl's record of it."""
    return run(["--git-dir", str(git_dir), "--work-tree", str(work_tree), *args],
               check=check, env=env, stdin=stdin, what=_what(args))


def drivers_off(names: Iterable[tuple[str, str]]) -> dict[str, str]:
    """GIT_CONFIG_COUNT variables emptying every driver named: an empty
    `filter.X.clean` (or `process`) means no filter (verified with git 2.39)."""
    env: dict[str, str] = {}
    count = 0
    for attribute, name in sorted(set(names)):
        for key in _DRIVER_KEYS.get(attribute, ()):
            env[f"GIT_CONFIG_KEY_{count}"] = f"{attribute}.{name}.{key}"
            env[f"GIT_CONFIG_VALUE_{count}"] = ""
            count += 1
        if attribute == "filter":
            env[f"GIT_CONFIG_KEY_{count}"] = f"filter.{name}.required"
            env[f"GIT_CONFIG_VALUE_{count}"] = "false"
            count += 1
    if count:
        env["GIT_CONFIG_COUNT"] = str(count)
    return env


def named_drivers(git_dir: str | Path, work_tree: str | Path,
                  paths: Sequence[str]) -> set[tuple[str, str]]:
    """(attribute, driver) pairs the attributes in the tree name for `paths`."""
    if not paths:
        return set()
    proc = tree_git(git_dir, work_tree, "check-attr", "-z", "--stdin", *_DRIVER_KEYS,
                    stdin="\0".join(paths) + "\0")
    fields = proc.stdout.split("\0")
    found = set()
    for i in range(0, len(fields) - 2, 3):
        attribute, value = fields[i + 1], fields[i + 2]
        # Even "set"/"unset"/"unspecified": a driver may bear that name,
        # and emptying one that does not exist costs nothing.
        if value:
            found.add((attribute, value))
    return found


def last_line(proc: subprocess.CompletedProcess[str]) -> str:
    """git's own reason: its `fatal:`/`error:` line when there is one (the
    last line is often advice)."""
    lines = [ln.strip() for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
    reasons = [ln for ln in lines if ln.startswith(("fatal:", "error:", "remote:", "!"))]
    chosen = reasons[0] if reasons else (lines[-1] if lines else f"exit {proc.returncode}")
    return plain(chosen)[:300]  # a remote's `remote:` lines are anyone's text


def check_ref(name: str, what: str) -> str:
    """A branch name git accepts and no command can mistake for an option:
    the one rule of loopctl.domain.checks."""
    return check_branch(name, what)


def check_prefix(prefix: str) -> str:
    return check_branch_prefix(prefix, "--branch-prefix")
