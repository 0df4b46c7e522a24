"""What a hostile agent leaves in its worktree cannot steer loopctl's git
(issue 25, DESIGN §15): a `.git` link pointing at a git directory it wrote
or at the user's own repository, a `.git` folder of its own, config it wrote
through its link (fsmonitor, filters, hooks, includes, config.worktree), a
HEAD pointed at the user's branch, symlinks, huge files, nested
repositories. Nothing planted runs (no marker file is ever created) and
nothing lands outside the run branch: the user's branch, index and files
stay as they were. Also: no repository-wide prune, `--copy` of ignored
files only, cancellation between hand-off steps, the PR named by its URL,
and `rm` deleting only its own loop's branches.

The agent is `sh -c SCRIPT` run by real `loopctl run` processes against
real git; `gh` is tests/workspace/fake_gh.py.
"""

from __future__ import annotations

import json
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLI, wait_for
from integrations.test_workspace import (
    FAKE_GH,
    FakeGh,
    Repo,
    git,
    last_record,
    make_repo,
    snapshot,
    start,
)
from loopctl.domain.model import parse_loop
from loopctl.integrations import delivery, worktree
from loopctl.integrations.copying import copy_ignored

RUN_ID = "20261201T030000Z-0001"
BIG = 2 * 2**20


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    return make_repo(tmp_path)


@pytest.fixture
def fake_gh(tmp_path: Path) -> FakeGh:
    folder = tmp_path / "gh-bin"
    folder.mkdir()
    script = folder / "gh"
    script.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                      f"{shlex.quote(str(FAKE_GH))} \"$@\"\n")
    script.chmod(0o755)
    return FakeGh(folder, tmp_path / "gh.jsonl")


@pytest.fixture
def markers(tmp_path: Path) -> Path:
    """A folder that stays empty unless something planted runs; `hook.sh
    NAME` (the planted program) creates NAME in it."""
    folder = tmp_path / "markers"
    folder.mkdir()
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {shlex.quote(str(folder))}/\"$1\"\ncat\n")
    hook.chmod(0o755)
    return folder


def hook(markers: Path, name: str) -> str:
    return f"{markers.parent / 'hook.sh'} {name}"


def planted_config(markers: Path, git_dir: str) -> str:
    """Shell lines writing into `git_dir`'s config everything that would
    make a git command run a program: each one names its own marker."""
    hooks = markers.parent / "hooks"
    lines = [f"mkdir -p {hooks}"]
    for name in ("pre-commit", "post-commit", "commit-msg", "reference-transaction",
                 "post-index-change", "pre-auto-gc", "post-checkout", "pre-push"):
        lines.append(f"printf '#!/bin/sh\\n{hook(markers, 'hook-' + name)}\\n' "
                     f"> {hooks}/{name}; chmod +x {hooks}/{name}")
    include = markers.parent / "included.cfg"
    lines.append(f"printf '[core]\\n\\tfsmonitor = {hook(markers, 'included-fsmonitor')}\\n' "
                 f"> {include}")
    settings = {
        "core.fsmonitor": hook(markers, "fsmonitor"),
        "core.hooksPath": str(hooks),
        "filter.evil.clean": hook(markers, "filter-clean"),
        "filter.evil.smudge": hook(markers, "filter-smudge"),
        "filter.proc.process": hook(markers, "filter-process"),
        "filter.proc.required": "true",
        "diff.evil.textconv": hook(markers, "diff-textconv"),
        "diff.evil.command": hook(markers, "diff-command"),
        "diff.external": hook(markers, "diff-external"),
        "merge.evil.driver": hook(markers, "merge-driver"),
        "commit.gpgSign": "true",
        "gpg.program": hook(markers, "gpg"),
        "gc.auto": "1",
        "include.path": str(include),
    }
    # `git_dir` is shell text (it may be `"$GD"`), the values are quoted.
    lines += [f"git --git-dir={git_dir} config {k} {shlex.quote(v)}"
              for k, v in settings.items()]
    lines.append("printf '* filter=evil diff=evil merge=evil\\n*.p filter=proc\\n' "
                 "> .gitattributes")
    lines.append("echo data > file.p")
    return "\n".join(lines)


def assert_nothing_ran(markers: Path) -> None:
    assert sorted(p.name for p in markers.iterdir()) == []


def run_once(cli: CLI, repo: Repo, name: str, script: str, *extra: str,
             env: dict[str, str] | None = None) -> dict[str, object]:
    start(cli, repo, name, script, *extra, env=env)
    cli("run", name, env=env, check=None)
    return last_record(cli, name)


def tree_of(repo: Repo, branch: str) -> list[str]:
    return repo.git("ls-tree", "-r", "--name-only", branch).split()


# -- the worktree's .git link ----------------------------------------------------------


def test_a_git_link_to_a_git_directory_the_agent_wrote_runs_nothing(
        cli: CLI, repo: Repo, markers: Path, tmp_path: Path) -> None:
    evil = tmp_path / "evil"
    script = f"git init -q {evil}\n" + planted_config(markers, shlex.quote(str(evil / ".git"))) + \
        f"\necho 'gitdir: {evil / '.git'}' > .git\necho work > work.txt\n"
    before = snapshot(repo.path)
    record = run_once(cli, repo, "evil", script)
    assert_nothing_ran(markers)
    assert record["handoff"] == "committed", record
    branch = str(record["branch"])
    assert {"work.txt", ".gitattributes", "file.p"} <= set(tree_of(repo, branch))
    assert repo.git("show", f"{branch}:work.txt") == "work\n"
    assert ".git" not in tree_of(repo, branch)
    # Nothing went into the planted repository either.
    assert git(evil, "rev-list", "--all") == ""
    assert snapshot(repo.path) == before


def test_a_git_link_to_the_users_own_repository_leaves_it_alone(
        cli: CLI, repo: Repo) -> None:
    main = repo.sha("main")
    before = snapshot(repo.path)
    script = (f"echo 'gitdir: {repo.path / '.git'}' > .git\necho work > work.txt\n"
              "printf 'agent edit\\n' >> README.md\n")
    record = run_once(cli, repo, "intouser", script)
    assert record["handoff"] == "committed", record
    assert repo.sha("main") == main  # no commit on the user's checked-out branch
    assert snapshot(repo.path) == before  # index, files, HEAD, stash untouched
    branch = str(record["branch"])
    assert repo.git("show", f"{branch}:work.txt") == "work\n"
    assert repo.git("show", f"{branch}:README.md").endswith("agent edit\n")
    assert repo.worktrees() == [str(repo.path)]


def test_a_git_folder_the_agent_put_in_place_of_the_link_runs_nothing(
        cli: CLI, repo: Repo, markers: Path) -> None:
    script = "rm .git && git init -q . && " + planted_config(markers, ".git").replace(
        "\n", " && ") + " && echo work > work.txt"
    record = run_once(cli, repo, "gitdir", script)
    assert_nothing_ran(markers)
    assert record["handoff"] == "committed", record
    assert repo.git("show", f"{record['branch']}:work.txt") == "work\n"
    assert repo.worktrees() == [str(repo.path)]


def test_config_the_agent_wrote_through_its_link_runs_nothing(
        cli: CLI, repo: Repo, markers: Path) -> None:
    """`git config` in the worktree writes the repository's config (and, with
    extensions.worktreeConfig, config.worktree): `-c` and the drivers-off
    list override every key that would run a program."""
    script = "GD=$(git rev-parse --git-common-dir)\n" + planted_config(markers, '"$GD"') + "\n" + \
        "git config extensions.worktreeConfig true\n" + \
        f"git config --worktree core.fsmonitor {shlex.quote(hook(markers, 'wt-fsmonitor'))}\n" \
        "echo work > work.txt\n"
    main = repo.sha("main")
    record = run_once(cli, repo, "viaconfig", script)
    assert_nothing_ran(markers)
    assert record["handoff"] == "committed", record
    assert repo.git("show", f"{record['branch']}:file.p") == "data\n"  # no filter applied
    assert repo.sha("main") == main
    # The next run's `worktree add` (a checkout: post-checkout hook,
    # fsmonitor) under the config the last agent left runs nothing either.
    cli("run", "viaconfig", check=0)
    assert_nothing_ran(markers)
    assert last_record(cli, "viaconfig")["handoff"] == "committed"


def test_a_head_pointed_at_the_users_branch_moves_only_the_run_branch(
        cli: CLI, repo: Repo) -> None:
    main = repo.sha("main")
    before = snapshot(repo.path)
    record = run_once(cli, repo, "head", "git symbolic-ref HEAD refs/heads/main; "
                      "echo work > work.txt")
    assert repo.sha("main") == main
    assert snapshot(repo.path) == before
    assert record["handoff"] == "committed", record
    assert repo.git("show", f"{record['branch']}:work.txt") == "work\n"
    assert "switched to main" in str(record["handoff_note"])


# -- what lands on the branch ----------------------------------------------------------


def test_a_symlink_is_committed_as_a_link_never_as_what_it_points_at(
        cli: CLI, repo: Repo, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("TOKEN=outside\n")
    record = run_once(cli, repo, "links", f"ln -s {secret} leak; mkdir d; ln -s {tmp_path} d/out")
    branch = str(record["branch"])
    assert repo.git("cat-file", "-p", f"{branch}:leak") == str(secret)
    listing = repo.git("ls-tree", "-r", branch)
    assert "120000" in listing and "TOKEN" not in repo.git("log", "-p", branch)


def test_a_nested_repository_with_hooks_and_fsmonitor_runs_nothing(
        cli: CLI, repo: Repo, markers: Path) -> None:
    script = ("git init -q sub && echo x > sub/f && git -C sub add f && "
              "git -C sub -c user.name=a -c user.email=a@b commit -q -m sub && " +
              planted_config(markers, "sub/.git").replace("\n", " && ") +
              " && printf '[submodule \"sub\"]\\n\\tpath = sub\\n\\turl = ./sub\\n"
              f"\\tupdate = !{hook(markers, 'submodule-update')}\\n' > .gitmodules")
    record = run_once(cli, repo, "nested", script)
    assert_nothing_ran(markers)
    assert record["handoff"] == "committed", record
    assert "160000 commit" in repo.git("ls-tree", str(record["branch"]), "sub")


def test_a_file_over_max_file_size_is_left_out_and_listed(
        cli: CLI, repo: Repo, fake_gh: FakeGh) -> None:
    env = fake_gh.env()
    script = f"head -c {BIG} /dev/zero > big.bin; echo small > small.txt"
    record = run_once(cli, repo, "huge", script, "--max-file-size", "1MiB",
                      "--push", "origin", "--pr", env=env)
    assert record["left_out"] == [{"path": "big.bin", "bytes": BIG}]
    assert record["handoff"] == "pr_opened", record
    branch = str(record["branch"])
    assert tree_of(repo, branch) == [".gitignore", "README.md", "small.txt"]
    # Never hashed into the user's repository at all.
    blob = subprocess.run(["git", "hash-object", "--stdin"], input=b"\0" * BIG,
                          capture_output=True, check=True).stdout.decode().strip()
    assert subprocess.run(["git", "-C", str(repo.path), "cat-file", "-e", blob],
                          capture_output=True).returncode != 0
    body = fake_gh.calls()[0]
    assert "big.bin" in body[body.index("--body") + 1]
    assert cli.json("show", "huge")["definition"]["max_file_size"] == "1MiB"


def test_a_file_over_the_limit_in_the_agents_own_commit_is_never_pushed(
        cli: CLI, repo: Repo) -> None:
    script = (f"head -c {BIG} /dev/zero > big.bin; git add big.bin; "
              "git -c user.name=a -c user.email=a@b commit -q -m big")
    record = run_once(cli, repo, "ownbig", script, "--max-file-size", "1M",
                      "--push", "origin")
    assert record["handoff"] == "handoff_failed", record
    assert "big.bin" in str(record["handoff_error"])
    assert repo.remote_sha(str(record["branch"])) is None


def test_sizes_parse_as_people_type_them() -> None:
    from loopctl.domain.sizes import format_size, parse_size

    assert [parse_size(t) for t in ("1048576", "500K", "50MiB", "50M", "1GB", "2g")] == \
        [2**20, 500 * 2**10, 50 * 2**20, 50 * 2**20, 2**30, 2 * 2**30]
    assert [format_size(n) for n in (2**20, 3 * 2**30, 1000)] == ["1MiB", "3GiB", "1000B"]
    loop = parse_loop("job", {"prompt": "p", "every": "1h", "cwd": "/tmp", "worktree": True,
                              "max_file_size": "10M"})
    assert loop.max_file_size == 10 * 2**20


def test_update_changes_max_file_size(cli: CLI, repo: Repo) -> None:
    start(cli, repo, "upd", "true")
    assert "max_file_size" not in cli.json("show", "upd")["definition"]
    cli("update", "upd", "--max-file-size", "5M", check=0)
    assert cli.json("show", "upd")["definition"]["max_file_size"] == "5MiB"


# One size parser for every option (domain/sizes.py): past 1 PiB is a typo.
@pytest.mark.parametrize("size", ["0", "-1", "lots", "2000T"])
def test_a_bad_max_file_size_is_refused(cli: CLI, repo: Repo, size: str) -> None:
    proc = start(cli, repo, "badsize", "true", "--max-file-size", size, check=2)
    assert "--max-file-size" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert cli("show", "badsize").returncode != 0


# -- the user's other worktrees --------------------------------------------------------


def test_a_users_absent_worktree_keeps_its_metadata(
        cli: CLI, repo: Repo, tmp_path: Path) -> None:
    theirs = tmp_path / "usb" / "feature"
    repo.git("worktree", "add", "-q", "-b", "feature", str(theirs))
    (theirs / "staged.txt").write_text("staged on the drive\n")
    git(theirs, "add", "staged.txt")
    admin = Path(git(theirs, "rev-parse", "--absolute-git-dir").strip())
    theirs.parent.rename(tmp_path / "unmounted")  # the drive is gone for now
    record = run_once(cli, repo, "prune", "echo x > x.txt")
    assert record["handoff"] == "committed"
    cli("rm", "prune", check=0)
    assert admin.is_dir() and (admin / "index").is_file()
    assert str(theirs) in repo.git("worktree", "list", "--porcelain")


# -- --copy ----------------------------------------------------------------------------


def test_copy_of_a_tracked_file_is_refused_at_start(cli: CLI, repo: Repo) -> None:
    (repo.path / "README.md").write_text("the user's uncommitted edit\n")
    proc = start(cli, repo, "tracked", "true", "--copy", "README.md", check=2)
    assert "tracked by git" in proc.stderr and ".gitignore" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert cli("show", "tracked").returncode != 0


def test_copy_takes_only_ignored_files_even_when_the_definition_names_others(
        repo: Repo, tmp_path: Path) -> None:
    (repo.path / "README.md").write_text("the user's uncommitted edit\n")
    (repo.path / ".env").write_text("S=1\n")
    (repo.path / "loose.txt").write_text("untracked, not ignored\n")
    folder = tmp_path / "wt"
    repo.git("worktree", "add", "-q", "-b", "run", str(folder))
    copied = copy_ignored(str(repo.path), folder, ("README.md", ".env", "loose.txt"))
    assert (folder / "README.md").read_text() == "hello\nworld\n"
    assert not (folder / "loose.txt").exists()
    assert (folder / ".env").read_text() == "S=1\n"
    assert copied == [".env"]


def test_copy_never_creates_a_folder_through_a_committed_symlink(
        repo: Repo, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    repo.git("checkout", "-q", "-b", "linky")
    (repo.path / "conf").symlink_to(outside)
    repo.git("add", "conf")
    repo.git("commit", "-q", "-m", "conf is a link")
    repo.git("checkout", "-q", "main")
    (repo.path / "conf" / "sub").mkdir(parents=True)
    (repo.path / "conf" / "sub" / "db.env").write_text("DB=1\n")
    (repo.path / ".gitignore").write_text(".env\n*.env\n")
    folder = tmp_path / "wt"
    repo.git("worktree", "add", "-q", "-b", "run", str(folder), "linky")
    copied = copy_ignored(str(repo.path), folder, ("conf/sub/*.env",))
    assert list(outside.iterdir()) == []
    assert copied == []


def test_a_copy_that_cannot_be_made_fails_the_run_cleanly(cli: CLI, repo: Repo) -> None:
    (repo.path / "cfg").write_text("a file in the base\n")
    repo.git("add", "cfg")
    repo.git("commit", "-q", "-m", "cfg file")
    repo.git("checkout", "-q", "-b", "dev")
    repo.git("rm", "-q", "cfg")
    repo.git("commit", "-q", "-m", "cfg goes")
    (repo.path / "cfg").mkdir()
    (repo.path / "cfg" / "app.env").write_text("A=1\n")
    (repo.path / ".gitignore").write_text("*.env\n")
    start(cli, repo, "cfgcopy", "echo ran > ran.txt", "--base", "main", "--copy", "cfg/*.env")
    proc = cli("run", "cfgcopy")
    assert "Traceback" not in proc.stderr
    record = last_record(cli, "cfgcopy")
    assert record["outcome"] == "failed"
    assert "--copy cfg/app.env" in str(record["note"])
    st = cli.state()["loops"]["cfgcopy"]
    assert st["run"] is None and st["status"] == "active" and st["failures"] == 1
    assert not (cli.state_dir / "worktrees" / "cfgcopy").exists()
    assert repo.branches() == [] and repo.worktrees() == [str(repo.path)]


# -- cancellation and the PR's address -------------------------------------------------


def prepared(repo: Repo, tmp_path: Path, **extra: object) -> tuple[object, worktree.Workspace]:
    loop = parse_loop("job", {"prompt": "p", "every": "1h", "cwd": str(repo.path),
                              "worktree": True, "base": "main", **extra})
    ws = worktree.prepare(loop, RUN_ID, tmp_path / "worktrees" / "job")
    (ws.path / "work.txt").write_text("work\n")
    return loop, ws


def test_a_cancelled_hand_off_pushes_nothing(repo: Repo, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             fake_gh: FakeGh) -> None:
    for key, value in fake_gh.env().items():
        monkeypatch.setenv(key, value)
    loop, ws = prepared(repo, tmp_path, push="origin", pr=True, merge="squash")
    made = delivery.commit(ws, "m", RUN_ID)
    worktree.remove(ws)
    handoff = delivery.hand_off(ws, loop, made, "t", "b", lambda: True)
    assert handoff.handoff == "committed"
    assert handoff.fields["handoff_note"] == "hand-off cancelled before the push"
    assert repo.remote_sha(ws.branch) is None and fake_gh.calls() == []


def test_a_hand_off_cancelled_after_the_pr_opens_neither_readies_nor_merges(
        repo: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        fake_gh: FakeGh) -> None:
    for key, value in fake_gh.env().items():
        monkeypatch.setenv(key, value)
    loop, ws = prepared(repo, tmp_path, push="origin", pr=True, merge="squash")
    made = delivery.commit(ws, "m", RUN_ID)
    worktree.remove(ws)
    asked = iter([False, False])  # the push and the PR go; then the loop is stopped
    handoff = delivery.hand_off(ws, loop, made, "t", "b", lambda: next(asked, True))
    assert handoff.handoff == "pr_opened"
    assert [c[1] for c in fake_gh.calls()] == ["create", "checks"]
    assert "hand-off cancelled before gh pr ready" in handoff.fields["handoff_note"]


@pytest.mark.parametrize("verb", [["stop", "--kill"], ["pause"], ["SIGTERM"]],
                         ids=["stop-kill", "pause", "sigterm"])
def test_stop_kill_pause_or_sigterm_while_checks_are_pending_stops_the_hand_off(
        cli: CLI, repo: Repo, fake_gh: FakeGh, tmp_path: Path, verb: list[str]) -> None:
    answer = tmp_path / "checks.json"
    answer.write_text(json.dumps([{"name": "ci", "bucket": "pending"}]))
    env = fake_gh.env(FAKE_GH_CHECKS_FILE=str(answer))
    start(cli, repo, "cancel", "echo work > work.txt", "--push", "origin", "--pr",
          "--merge", "squash", "--checks-timeout", "10m", env=env)
    runner = cli.popen("run", "cancel", env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: any(c[:2] == ["pr", "checks"] for c in fake_gh.calls()), timeout=60)
        if verb == ["SIGTERM"]:
            runner.send_signal(signal.SIGTERM)  # the flag alone: the state says nothing
        else:
            cli(*verb, "cancel", check=0)
        answer.write_text(json.dumps([{"name": "ci", "bucket": "pass"}]))  # checks now pass
        runner.wait(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
    subs = [c[1] for c in fake_gh.calls()]
    assert "ready" not in subs and "merge" not in subs
    record = last_record(cli, "cancel")
    assert record["handoff"] == "pr_opened", record
    assert "cancelled" in str(record["handoff_note"])


@pytest.mark.parametrize(("url", "handoff"), [
    pytest.param("https://github.com/o/r/pull/42", "merged", id="url"),
    pytest.param("none", "handoff_failed", id="no-url"),
])
def test_steps_after_create_name_the_pr_create_returned(
        cli: CLI, repo: Repo, fake_gh: FakeGh, url: str, handoff: str) -> None:
    env = fake_gh.env(FAKE_GH_PR_URL=url)
    record = run_once(cli, repo, "byurl", "echo w > w.txt", "--push", "origin", "--pr",
                      "--merge", "squash", env=env)
    assert record["handoff"] == handoff, record
    lines = [json.loads(line) for line in fake_gh.log.read_text().splitlines()]
    later = [entry for entry in lines if entry["argv"][1] != "create"]
    if url == "none":
        assert later == [] and "no PR URL" in str(record["handoff_error"])
        return
    assert [e["argv"][1] for e in later] == ["checks", "ready", "merge"]
    assert all(e["pr"] == url for e in later)


# -- rm --------------------------------------------------------------------------------


def test_rm_deletes_only_its_own_loops_branches(cli: CLI, repo: Repo) -> None:
    start(cli, repo, "a", "true")
    own = f"loopctl/a/{RUN_ID}"
    others = [f"loopctl/a-b/{RUN_ID}", f"loopctl/a/x/{RUN_ID}", "loopctl/a/notes",
              f"loopctl/ab/{RUN_ID}"]
    for branch in (own, *others):
        repo.git("branch", branch, "main")
        repo.git("push", "-q", "origin", branch)  # pushed: `rm` may delete the loop's own
    assert worktree.loop_branches(str(repo.path), "loopctl/", "a") == [own]
    cli("rm", "a", check=0)
    assert sorted(repo.branches("loopctl/**")) == sorted(others)


def test_the_cleanup_after_a_lost_run_ignores_a_planted_git_link(
        repo: Repo, tmp_path: Path) -> None:
    """A supervisor killed before its hand-off: the next driver removes the
    worktree whatever its `.git` says, and the user's repository keeps its
    branch, index and files."""
    _, ws = prepared(repo, tmp_path)
    (ws.path / ".git").write_text(f"gitdir: {repo.path / '.git'}\n")
    before = snapshot(repo.path)
    note = worktree.cleanup_lost(ws.to_json(), ws.path, "job", RUN_ID)
    assert note == "worktree removed; no commits, branch deleted"
    assert not ws.path.exists() and not Path(ws.admin).exists()
    assert snapshot(repo.path) == before and repo.branches() == []


def test_discard_removes_only_the_worktree_at_loopctls_path(
        repo: Repo, tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    repo.git("worktree", "add", "-q", "-b", "theirs", str(theirs))
    shutil.rmtree(theirs)  # absent, as on an unmounted drive
    _, ws = prepared(repo, tmp_path)
    worktree.discard(ws.repo, ws.path)
    assert not ws.path.exists() and not Path(ws.admin).exists()
    assert str(theirs) in repo.git("worktree", "list", "--porcelain")
