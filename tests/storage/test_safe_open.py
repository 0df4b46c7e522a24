"""Opening what an agent could have replaced (storage/safe_open.py) and
finding the repository to record (engine/repo_record.py): links at any
component, FIFOs, devices, oversize files and `.git` links naming the root
or the home, on real files."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from loopctl.engine import repo_record
from loopctl.storage import safe_open


def test_a_link_at_any_component_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    (tmp_path / "real" / "lf").symlink_to(tmp_path / "real" / "f")
    assert safe_open.read_file(str(tmp_path / "real" / "f"), 10) == b"x"
    with pytest.raises(safe_open.Refused) as middle:
        safe_open.read_file(str(tmp_path / "link" / "f"), 10)
    assert middle.value.path == str(tmp_path / "link")
    assert middle.value.why == "a symbolic link, not a real folder"
    with pytest.raises(safe_open.Refused, match="a symbolic link$"):
        safe_open.read_file(str(tmp_path / "real" / "lf"), 10)
    with pytest.raises(safe_open.Refused, match="a symbolic link, not a real folder or file"):
        safe_open.open_rule(str(tmp_path / "real" / "lf"))


def test_a_fifo_or_device_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    began = time.monotonic()
    with pytest.raises(safe_open.Refused, match="a FIFO, not a regular file"):
        safe_open.read_file(str(fifo), 10)
    assert time.monotonic() - began < 2
    with pytest.raises(safe_open.Refused, match="a device, not a regular file"):
        safe_open.read_file("/dev/zero", 10)
    with pytest.raises(safe_open.Refused, match="a FIFO, not a real folder or file"):
        safe_open.open_rule(str(fifo))


def test_reads_are_bounded_and_missing_is_none(tmp_path: Path) -> None:
    big = tmp_path / "big"
    big.write_bytes(b"a" * 100)
    assert safe_open.read_file(str(big), 10) == b"a" * 10
    with pytest.raises(safe_open.Refused, match="larger than 10 bytes"):
        safe_open.read_file(str(big), 10, whole=True)
    assert safe_open.read_file(str(tmp_path / "no" / "such"), 10) is None
    assert safe_open.open_rule(str(tmp_path / "nothing")) is None


def test_make_dirs_never_creates_through_a_link(tmp_path: Path) -> None:
    target = tmp_path / "home"
    target.mkdir()
    cache = tmp_path / "cache"
    cache.symlink_to(target)
    with pytest.raises(safe_open.Refused):
        safe_open.make_dirs(str(cache / "tool"))
    assert not (target / "tool").exists()
    safe_open.make_dirs(str(tmp_path / "a" / "b"))
    assert (tmp_path / "a" / "b").is_dir()


def git(*args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], check=True,
                   capture_output=True)


def test_the_recorded_repository(tmp_path: Path) -> None:
    home = tmp_path / "home"
    repo = home / "repo"
    (repo / "sub").mkdir(parents=True)
    git("-C", str(repo), "init", "-q", "-b", "main")
    git("-C", str(repo), "commit", "-q", "--allow-empty", "-m", "0")
    assert repo_record.find(str(repo / "sub"), str(home)) == (str(repo),)
    linked = tmp_path / "linked"
    git("-C", str(repo), "worktree", "add", "-q", str(linked))
    found = repo_record.find(str(linked), str(home))
    assert found == (str(linked), str(repo / ".git" / "worktrees" / "linked"),
                     str(repo / ".git"))
    git("-C", str(home), "init", "-q")  # a home kept in git: never granted
    assert repo_record.find(str(home / "elsewhere"), str(home)) == ()


@pytest.mark.parametrize("link, commondir", [("gitdir: /", None), ("gitdir: g", "HOME"),
                                             ("gitdir: g", "FIFO")])
def test_a_planted_git_link_is_refused(tmp_path: Path, link: str,
                                       commondir: str | None) -> None:
    home = tmp_path / "home"
    work = home / "work"
    (work / "g").mkdir(parents=True)
    (work / ".git").write_text(link + "\n")
    if commondir == "HOME":
        (work / "g" / "commondir").write_text(f"{home}\n")
    elif commondir == "FIFO":
        os.mkfifo(work / "g" / "commondir")
    with pytest.raises(safe_open.Refused):
        repo_record.find(str(work), str(home))


def test_a_link_counts_as_planted_only_inside_a_writable_folder(tmp_path: Path) -> None:
    from loopctl.engine.containment.sandbox import planted_link

    mine, theirs = tmp_path / "mine", tmp_path / "writable"
    (mine / "real").mkdir(parents=True)
    theirs.mkdir()
    (mine / "link").symlink_to(mine / "real")       # the user's link: fine
    (theirs / "hop").symlink_to(mine / "link")      # the agent's: planted
    (mine / "via").symlink_to(theirs / "hop")       # reaching one through another
    writable = (str(theirs),)
    assert not planted_link(str(mine / "link" / "x"), writable)
    assert planted_link(str(theirs / "hop" / "x"), writable)
    assert planted_link(str(mine / "via"), writable)
    assert not planted_link(str(theirs / "missing"), writable)
