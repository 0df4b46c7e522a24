"""What `--protect` costs per run (DESIGN §16): putting the protected paths
back in a run's worktree, on a repository of 10,000 files (`--files`).

The repository: `src/` with 100 folders of files, `tests/` with 200 test
files, `ci/check.sh`, `pyproject.toml`; one commit; a real `git worktree`
of it, as loopctl makes for a run. The subject is loopctl's own restore
(`loopctl.integrations.protect.restore`, what the supervisor calls) with a
handful of protected paths: `tests/`, `ci/check.sh`, `**/conftest.py`,
`pyproject.toml`, `setup.cfg`. Three cases, each repetition on the same worktree:

- `clean`: the agent changed nothing protected (the common run);
- `runner`: the same, with what the check's runner reads added (for
  `python -m pytest -q`: conftest.py at every level, the ini files, `*.pth`,
  a module shadowing pytest; integrations/check_reads.py), found per run as
  the supervisor does;
- `dirty`: before each repetition 5 test files are rewritten, 1 deleted,
  1 replaced by a symlink and 3 added (one in `__pycache__`), the agent's
  worst ordinary case; the restore must leave `git status` clean.

The baseline, interleaved in the same run: `git status --porcelain` on the
same worktree (one git process over the whole tree, what any tool that
looks at a worktree pays). Medians of N (`--n`, default 30; `--quick` 10),
wall and CPU (user+sys of this process and the git processes it waited for,
`RUSAGE_CHILDREN`). Goal: the restore under 50 ms, judged on CPU (a busy
machine stretches wall time; CPU is what the restore costs it).

    python bench/protect.py [--quick] [--n N] [--files 10000]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from _common import Workspace, children_cpu, header, median, result, spread

PATTERNS = ("tests/", "ci/check.sh", "**/conftest.py", "pyproject.toml", "setup.cfg")
# The `runner` case adds what this check's runner reads (DESIGN §16), found
# as the supervisor finds it: once per run, before the restore.
CHECK = ("python", "-m", "pytest", "-q")


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(cwd), *args], capture_output=True, text=True,
                          env=dict(os.environ, LC_ALL="C"))
    if proc.returncode != 0:
        raise RuntimeError(f"git {args!r}: {proc.stderr.strip()[:300]}")
    return proc.stdout


def make_repo(root: Path, files: int) -> Path:
    repo = root / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "ci").mkdir()
    for i in range(200):
        (repo / "tests" / f"test_{i:03}.py").write_text(f"def test_{i}():\n    assert {i}\n")
    (repo / "tests" / "conftest.py").write_text("import pytest\n")
    (repo / "ci" / "check.sh").write_text("pytest -q\n")
    (repo / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (repo / ".gitignore").write_text("__pycache__/\n")
    rest = files - 204
    for i in range(rest):
        folder = repo / "src" / f"pkg{i % 100:02}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"mod_{i}.py").write_text(f"VALUE = {i}\n")
    git(root, "init", "-q", "-b", "main", str(repo))
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=b", "-c", "user.email=b@x", "commit", "-q", "-m", "base")
    return repo


def make_worktree(repo: Path, root: Path) -> object:
    from loopctl.integrations.worktree import Workspace as Run
    from loopctl.integrations.worktree import common_dir, find_admin

    folder = root / "wt"
    git(repo, "worktree", "add", "-q", "-b", "run", str(folder), "main")
    admin = find_admin(common_dir(str(repo)), folder)
    sha = git(repo, "rev-parse", "main").strip()
    return Run(str(repo), folder, "run", "main", "main", sha, admin=str(admin))


def dirty(tree: Path) -> None:
    tests = tree / "tests"
    for i in range(5):
        (tests / f"test_{i:03}.py").write_text("def test_x():\n    assert True\n")
    (tests / "test_010.py").unlink()
    (tests / "test_011.py").unlink()
    os.symlink("/etc/passwd", tests / "test_011.py")
    (tests / "test_new.py").write_text("x = 1\n")
    (tests / "helper.py").write_text("y = 2\n")
    (tests / "__pycache__").mkdir(exist_ok=True)
    (tests / "__pycache__" / "conftest.cpython-311.pyc").write_bytes(b"\0planted")


def measure(action: Callable[[], object], wall: list[float], cpu: list[float]) -> None:
    before = children_cpu()
    mine, t0 = time.process_time(), time.perf_counter()
    action()
    wall.append(time.perf_counter() - t0)
    cpu.append(time.process_time() - mine + children_cpu() - before)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int)
    parser.add_argument("--files", type=int, default=10_000)
    args = parser.parse_args()
    n = args.n or (10 if args.quick else 30)
    from loopctl.integrations.check_reads import runner_specs
    from loopctl.integrations.protect import restore

    header(f"--protect: restore {len(PATTERNS)} protected paths, {args.files} files")
    ws = Workspace("protect")
    try:
        repo = make_repo(ws.root, args.files)
        run = make_worktree(repo, ws.root)
        tree = run.path  # type: ignore[attr-defined]
        restore(run, PATTERNS)  # warm: the index's stat data, the page cache
        cases = ("git status", "clean", "runner", "dirty")
        wall: dict[str, list[float]] = {c: [] for c in cases}
        cpu: dict[str, list[float]] = {c: [] for c in cases}
        changed: list[int] = []
        status = ["git", "-C", str(tree), "status", "--porcelain"]
        for _ in range(n):
            measure(lambda: subprocess.run(status, capture_output=True, check=True),
                    wall["git status"], cpu["git status"])
            measure(lambda: restore(run, PATTERNS), wall["clean"], cpu["clean"])
            measure(lambda: restore(run, PATTERNS, (), runner_specs(run, CHECK)),
                    wall["runner"], cpu["runner"])
            dirty(tree)
            measure(lambda: changed.append(len(restore(run, PATTERNS).changed)),
                    wall["dirty"], cpu["dirty"])
            left = git(tree, "status", "--porcelain", "--ignored")
            if left.strip():
                raise RuntimeError(f"the restore left changes: {left[:300]}")
    finally:
        ws.close()
    for label, figures in (("wall", wall), ("CPU", cpu)):
        base = median(figures["git status"])
        for case in cases:
            xs = figures[case]
            ratio = "" if case == "git status" else f"  ({median(xs) / base:.2f}x git status)"
            print(f"   {label:4} {case:10} {spread(xs)}{ratio}")
    print(f"   dirty: {changed[-1]} protected paths reported changed per repetition")
    ms = {f"{k}_{c.replace(' ', '_')}_ms": round(median(v[c]) * 1e3, 1)
          for k, v in (("wall", wall), ("cpu", cpu)) for c in cases}
    worst = max(median(cpu["clean"]), median(cpu["dirty"]))
    result("protect restore", f"CPU clean {ms['cpu_clean_ms']} ms, with the check's runner "
           f"files {ms['cpu_runner_ms']} ms, dirty "
           f"{ms['cpu_dirty_ms']} ms (git status {ms['cpu_git_status_ms']} ms); wall clean "
           f"{ms['wall_clean_ms']} ms, dirty {ms['wall_dirty_ms']} ms", "< 50 ms CPU",
           worst < 0.050, files=args.files, **ms)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
