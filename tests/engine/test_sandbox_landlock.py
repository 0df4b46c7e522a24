"""The Landlock layer against the running kernel (loopctl/engine/containment/landlock.py):
its constants are the kernel's, and each right it handles is enforced.

Each check forks a child, confines it as a run's agent is confined (the
same `Ruleset.apply`), tries one thing and reports back through a pipe.
The pure policy (loopctl/domain/confinement.py) is tested without a kernel.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from loopctl.domain import confinement
from loopctl.engine.containment import landlock

try:
    ABI = landlock.abi()
except landlock.LandlockError:
    ABI = 0
needs = pytest.mark.skipif(ABI == 0, reason="no Landlock in this kernel")


def in_confined_child(ruleset: landlock.Ruleset, action: Callable[[], object]) -> str:
    """Run `action` in a child confined by `ruleset`: 'ok' or the errno name."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        os.close(read)
        try:
            ruleset.apply()
            action()
            answer = "ok"
        except OSError as exc:
            answer = errno.errorcode.get(exc.errno or 0, str(exc))
        except BaseException as exc:  # anything else is reported too
            answer = repr(exc)
        os.write(write, answer.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        answer = handle.read().decode()
    os.waitpid(pid, 0)
    return answer


@needs
def test_the_abi_probe_and_every_right_are_the_kernels() -> None:
    """The highest bit of each kind is accepted, the next one refused: our
    constants cover exactly what this kernel handles (ABI >= 6 here)."""
    lib = landlock._lib()

    def accepted(fs: int, scoped: int) -> bool:
        attr = landlock._RulesetAttr(fs, 0, scoped)
        fd = lib.syscall(landlock.SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(24),
                         ctypes.c_uint32(0))
        if fd >= 0:
            os.close(fd)
        return bool(fd >= 0)

    assert ABI >= 6, "this machine's kernel is expected to have ABI 6 or later"
    every = landlock.fs_rights(ABI)
    assert every & landlock.FS_REFER and every & landlock.FS_TRUNCATE
    assert every & landlock.FS_IOCTL_DEV and every == (1 << 16) - 1
    assert accepted(every, landlock.SCOPE_SIGNAL | landlock.SCOPE_ABSTRACT_UNIX_SOCKET)
    assert not accepted(every | 1 << 16, 0)
    assert not accepted(1, 1 << 2)
    assert landlock.fs_rights(1) == (1 << 13) - 1 and landlock.fs_rights(4) == (1 << 15) - 1


def confined_to(writable: Path, readable: Path | None = None) -> landlock.Ruleset:
    ruleset = landlock.Ruleset(ABI)
    ruleset.allow(str(writable), ruleset.handled)
    if readable is not None:
        ruleset.allow(str(readable), landlock.READ)
    return ruleset


@needs
def test_writes_outside_the_rules_are_denied(tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (outside / "f").write_text("x")
    ruleset = confined_to(inside)
    try:
        assert in_confined_child(ruleset, lambda: (inside / "new").write_text("y")) == "ok"
        assert in_confined_child(ruleset, lambda: (outside / "new").write_text("y")) == "EACCES"
        assert in_confined_child(ruleset, lambda: (outside / "f").read_text()) == "EACCES"
        assert in_confined_child(ruleset, lambda: os.listdir(outside)) == "EACCES"
    finally:
        ruleset.close()
    assert not (outside / "new").exists()


@needs
def test_a_readable_file_cannot_be_truncated_or_moved_away(tmp_path: Path) -> None:
    """TRUNCATE (ABI 3) and REFER (ABI 2) are handled: a file it may only
    read cannot be emptied, nor renamed into a folder it may write."""
    inside, shelf = tmp_path / "in", tmp_path / "shelf"
    inside.mkdir()
    shelf.mkdir()
    book = shelf / "book"
    book.write_text("keep me")
    ruleset = confined_to(inside, readable=shelf)
    try:
        assert in_confined_child(ruleset, book.read_text) == "ok"
        assert in_confined_child(ruleset, lambda: os.truncate(book, 0)) == "EACCES"
        assert in_confined_child(ruleset, lambda: os.rename(book, inside / "b")) in (
            "EXDEV", "EACCES")
    finally:
        ruleset.close()
    assert book.read_text() == "keep me"


@needs
def test_the_confined_child_cannot_signal_its_parent(tmp_path: Path) -> None:
    """SCOPE_SIGNAL (ABI 6): not even signal 0 reaches a process outside
    the domain; its own children it may still signal."""
    ruleset = confined_to(tmp_path)
    parent = os.getpid()
    try:
        assert in_confined_child(ruleset, lambda: os.kill(parent, 0)) == "EPERM"
        assert in_confined_child(ruleset, lambda: os.kill(os.getpid(), 0)) == "ok"
        assert in_confined_child(ruleset, lambda: os.kill(parent, signal.SIGTERM)) == "EPERM"
    finally:
        ruleset.close()


@needs
def test_a_device_rule_allows_dev_null_and_not_the_rest(tmp_path: Path) -> None:
    ruleset = confined_to(tmp_path)
    ruleset.allow("/dev/null", landlock.DEVICE | landlock.READ)

    def null() -> None:
        with open("/dev/null", "w") as handle:  # O_TRUNC: the TRUNCATE right too
            handle.write("x")

    try:
        assert in_confined_child(ruleset, null) == "ok"
        assert in_confined_child(ruleset, lambda: open("/dev/zero", "rb").close()) == "EACCES"
    finally:
        ruleset.close()


def test_no_landlock_is_said_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from loopctl.engine.containment import sandbox

    monkeypatch.setenv("LOOPCTL_SANDBOX_ABI", "0")
    assert sandbox.available() == (0, "LOOPCTL_SANDBOX_ABI=0 (set in the environment)")
    monkeypatch.setenv("LOOPCTL_SANDBOX_ABI", "3")
    assert sandbox.available() == (min(3, ABI), None if ABI else sandbox.available()[1])


# -- the pure policy ----------------------------------------------------------

HOME = "/home/ann"


def inputs(**extra: object) -> confinement.Inputs:
    fields: dict[str, object] = {"preset": "claude", "home": HOME, "cwd": "/home/ann/src/app",
                                 "tmpdir": "/tmp/loopctl-x", "decision_dir": "/run/d"}
    fields.update(extra)
    return confinement.Inputs(**fields)  # type: ignore[arg-type]


def test_the_policy_never_grants_the_home() -> None:
    policy = confinement.policy(inputs(programs=("/home/ann/.nvm/versions/node/v22/bin",)))
    everything = policy.writable + policy.readable + policy.listable
    assert HOME not in everything
    for secret in (".ssh", ".aws", ".netrc", ".config/gh", ".config", ".local"):
        assert f"{HOME}/{secret}" not in everything
    assert policy.writable[:3] == ("/home/ann/src/app", "/tmp/loopctl-x", "/run/d")
    assert "/home/ann/.claude" in policy.writable and "/home/ann/.cache" in policy.writable
    assert "/tmp" not in everything and "/home" not in everything


@pytest.mark.parametrize("entry, expected", [
    ("/home/ann/.nvm/versions/node/v22/bin", ("/home/ann/.nvm/versions/node/v22/bin",
                                              "/home/ann/.nvm/versions/node/v22")),
    ("/home/ann/.pyenv/shims", ("/home/ann/.pyenv/shims", "/home/ann/.pyenv")),
    ("/usr/local/bin", ("/usr/local/bin", "/usr/local")),
    ("/home/ann/.local/bin", ("/home/ann/.local/bin",)),
    ("/home/ann/bin", ("/home/ann/bin",)),
    ("/home/bob/bin", ("/home/bob/bin",)),
    ("/root/bin", ("/root/bin",)),
    ("/bin", ("/bin",)),
    (HOME, ()),
    ("/home", ()),
    ("/", ()),
    ("relative/bin", ()),
])
def test_program_dirs_widen_to_a_prefix_never_a_home(entry: str,
                                                     expected: tuple[str, ...]) -> None:
    assert confinement.program_dirs(entry, HOME) == expected


def test_modes() -> None:
    assert confinement.mode_for(None, None) == "auto"
    assert confinement.mode_for(None, "on") == "on"
    assert confinement.mode_for("off", "on") == "off"
    assert confinement.wants("auto", agent=True) and not confinement.wants("auto", agent=False)
    assert confinement.wants("on", agent=False) and not confinement.wants("off", agent=True)
