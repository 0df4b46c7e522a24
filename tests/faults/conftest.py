"""The fault suite: real processes, one theme per file. A fault also tested
outside this folder names that file from tests/.

 1  concurrent tick, daemon and run       test_concurrent_drivers.py
 2  lease at the TTL boundary             storage/test_lease.py (pure, and lease files)
 3  lease holder dead or pid reused       storage/test_lease.py;
                                          engine/test_drivers_sharing_a_home.py
 4  daemon SIGSTOPped across a due time   test_daemon_sigstop.py
 5  daemon SIGTERM with a run in flight   engine/test_drivers_sharing_a_home.py;
                                          test_crash_recovery.py
 6  supervisor SIGKILLed                  engine/test_firing.py; test_crash_recovery.py,
                                          test_daemon_idle.py
 7  timeout of a setsid() tree            engine/test_firing.py; test_crash_recovery.py
 8  clock a year forward                  test_clock.py
 9  clock two hours back                  test_clock.py
10  DST in America/New_York               test_clock.py
11  SIGKILL of any writer, 200 times      test_sigkill_writers.py
                                          (and storage/test_store_durability.py)
12  disk full                             test_disk_full.py
13  read-only home                        test_readonly_home.py
14  one broken entry, daemon running      test_broken_definitions.py, test_daemon_idle.py
15  garbage loops.yaml, daemon running    engine/test_drivers_sharing_a_home.py;
                                          test_broken_definitions.py
16  agents misusing stdin/stdout          test_agent_output.py
17  hooks that hang, fail, cannot run     engine/test_attention.py; test_hooks.py
18  random input at the CLI               test_cli_properties.py
                                          (and domain/test_input_properties.py)

Fixtures here: cleanup of every process a test started, and file systems that
are full or read-only (real mounts; skipped where the machine does not allow
mounting)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from process_support import kill_leftovers


@pytest.fixture(autouse=True)
def reap_test_processes(tmp_path: Path) -> Iterator[None]:
    """Agents, supervisors, daemons and hooks outlive a failing test; kill
    the ones started for this test (their LOOPCTL_HOME is under tmp_path)."""
    yield
    kill_leftovers(tmp_path)


def _run(*argv: str) -> bool:
    return subprocess.run(list(argv), capture_output=True).returncode == 0


def unmount(where: Path) -> None:
    if not _run("umount", str(where)):
        _run("umount", "-l", str(where))


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[object]:
    """`mount_tmpfs(dir, size)`: a small tmpfs at dir, unmounted at teardown."""
    mounted: list[Path] = []

    def mount(where: Path, size: str) -> Path:
        where.mkdir(parents=True, exist_ok=True)
        if not _run("mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                    str(where)):
            pytest.skip("cannot mount a tmpfs here (needs root / CAP_SYS_ADMIN)")
        mounted.append(where)
        return where

    yield mount
    kill_leftovers(tmp_path)
    for where in reversed(mounted):
        unmount(where)


@pytest.fixture
def read_only(tmp_path: Path) -> Iterator[object]:
    """`read_only(dir)`: make dir a read-only bind mount of itself."""
    mounted: list[Path] = []

    def make(where: Path) -> Path:
        if not _run("mount", "--bind", str(where), str(where)):
            pytest.skip("cannot bind-mount here (needs root / CAP_SYS_ADMIN)")
        mounted.append(where)
        if not _run("mount", "-o", "remount,ro,bind", str(where)):
            pytest.skip("cannot remount read-only here")
        probe = where / ".probe"
        try:
            probe.write_text("x")
        except OSError:
            return where
        probe.unlink()
        pytest.skip("the read-only mount is still writable")
        return where  # unreachable

    yield make
    for where in reversed(mounted):
        unmount(where)
