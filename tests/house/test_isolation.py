"""What keeps a test from reaching the developer's machine (tests/conftest.py):
the autouse real-home guard catches a test that changes what is already in
the real home's loopctl places, not only one that adds or removes a file
there (shown by an inner pytest session whose "real" home is a folder of
this test's: the guard reads HOME at import); and the PATH every test starts
with finds none of the developer's agent CLIs or gh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import TESTS, controlled_path, loopctl_argv

LOOPS = "version: 1\nloops: {}\n"
INNER_TESTS = '''
import os
from pathlib import Path

REAL = Path(os.environ["GUARDED_HOME"])

def test_path_hides_the_developers_agents():
    import shutil

    assert shutil.which("claude") is None and shutil.which("gh") is None
    assert shutil.which("needed-tool") is not None


# In this order: each test starts from what the one before left.
def test_reads_only():
    assert (REAL / ".config/loopctl/loops.yaml").read_text()
    os.listdir(REAL / ".config")


def test_rewrite_same_size():
    (REAL / ".config/loopctl/loops.yaml").write_text("version: 1\\nloops: []\\n")


def test_chmod():
    (REAL / ".config/loopctl/loops.yaml").chmod(0o644)


def test_rewrite_deep_state():
    (REAL / ".local/state/loopctl/runs/job/1.json").write_text("{}")


def test_file_beside_the_config_folder():
    (REAL / ".config/loopctl.yaml").write_text("version: 1\\n")


def test_another_programs_files_are_not_watched():
    (REAL / ".config/user-dirs.dirs").write_text("XDG_X=y\\n")
    (REAL / ".config/systemd/user/other.service").write_text("[Unit]\\n")
    (REAL / ".local/state/other-app").mkdir()


def test_a_loopctl_unit_beside_other_units():
    (REAL / ".config/systemd/user/loopctl-job.timer").write_text("[Timer]\\n")


def test_symlink_instead_of_file():
    target = REAL / ".config/loopctl/loops.yaml"
    target.unlink()
    target.symlink_to("/dev/null")
'''


def guarded_home(root: Path) -> Path:
    home = root / "real-home"
    loops = home / ".config" / "loopctl" / "loops.yaml"
    loops.parent.mkdir(parents=True)
    loops.write_text(LOOPS)
    loops.chmod(0o600)
    run = home / ".local" / "state" / "loopctl" / "runs" / "job" / "1.json"
    run.parent.mkdir(parents=True)
    run.write_text("[]")
    (home / ".config" / "user-dirs.dirs").write_text("XDG_X=x\n")
    (home / ".config" / "systemd" / "user").mkdir(parents=True)
    return home


@pytest.mark.slow
def test_the_guard_fails_a_test_that_rewrites_a_real_loopctl_file(tmp_path: Path) -> None:
    home = guarded_home(tmp_path)
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (inner / "test_guarded.py").write_text(INNER_TESTS)
    (inner / "pytest.ini").write_text("[pytest]\n")  # not this checkout's addopts
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LOOPCTL_"))}
    planted = tmp_path / "dev-bin"
    planted_tools(planted, tmp_path / "ran")
    # No third-party plugin (xdist, randomly, hypothesis...): a faster start.
    # Its own --basetemp: pytest's default one is shared, and a new session
    # there deletes old sessions' folders (a whole suite's, tens of seconds).
    env.update(HOME=str(home), GUARDED_HOME=str(home), COLUMNS="400",
               PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PATH=f"{planted}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA",
         f"--basetemp={tmp_path / 'inner-tmp'}", str(inner)],
        cwd=inner, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout
    assert proc.returncode == 1, out[-3000:]
    for name in ("rewrite_same_size", "chmod", "rewrite_deep_state", "symlink_instead_of_file",
                 "file_beside_the_config_folder", "a_loopctl_unit_beside_other_units"):
        assert f"ERROR test_guarded.py::test_{name} - AssertionError: a test touched the real " \
               "home directory" in out, out[-3000:]
    for name in ("reads_only", "another_programs_files_are_not_watched"):
        assert f"ERROR test_guarded.py::test_{name}" not in out, out[-3000:]
    assert "PASSED test_guarded.py::test_path_hides_the_developers_agents" in out, out[-3000:]
    assert "9 passed, 6 errors" in out, out[-3000:]  # every call passed; 6 teardowns did not
    assert not (tmp_path / "ran").exists()


@pytest.mark.parametrize("depth", [0, 1])
def test_what_lies_deeper_in_the_near_places_is_not_hashed(tmp_path: Path, depth: int) -> None:
    """Speed: ~/.config is another program's too; only what sits directly in
    it is fingerprinted, loopctl's own folders at every depth."""
    from conftest import _fingerprint

    near = tmp_path / "config"
    folder = near / "loopctl-other" if depth else near
    folder.mkdir(parents=True)
    (folder / "loopctl.yaml").write_text("a")
    before = _fingerprint([], {near: ("loopctl*",)})
    (folder / "loopctl.yaml").write_text("b")
    assert (_fingerprint([], {near: ("loopctl*",)}) != before) is (depth == 0)


def test_the_guard_watches_only_what_loopctl_could_write(tmp_path: Path) -> None:
    """Another program's file in ~/.config, ~/.local/state or the user's
    systemd units, or a crontab line of its own, changes nothing the guard
    sees; a loopctl file there, a loopctl unit or a loopctl cron line does."""
    from conftest import _fingerprint, near_places, own_places

    home = guarded_home(tmp_path)
    crontab = tmp_path / "spool" / "user"
    crontab.parent.mkdir()
    crontab.write_text("0 * * * * backup\n")

    def seen() -> dict[str, object]:
        return _fingerprint(own_places(home), near_places(home), [crontab])

    before = seen()
    (home / ".config" / "user-dirs.dirs").write_text("XDG_X=y\n")
    (home / ".config" / "other-app").mkdir()
    (home / ".local" / "state" / "other.log").write_text("x")
    (home / ".config" / "systemd" / "user" / "other.timer").write_text("[Timer]\n")
    crontab.write_text("0 * * * * backup --full\n")
    assert seen() == before
    for plant in (home / ".config" / "loopctl.yaml", home / ".local" / "state" / "loopctl.log",
                  home / ".config" / "systemd" / "user" / "loopctl-job.service"):
        plant.write_text("x")
        assert seen() != before, plant
        plant.unlink()
        assert seen() == before, plant
    crontab.write_text("0 * * * * backup --full\n* * * * * loopctl tick # loopctl tick for /s\n")
    assert seen() != before


def test_the_guard_knows_the_crontab_marker() -> None:
    from conftest import CRON_MARKER
    from loopctl.integrations.crontab import MARKER

    assert CRON_MARKER == MARKER


# -- the PATH -----------------------------------------------------------------


def test_every_agent_cli_with_a_preset_is_hidden() -> None:
    from conftest import HIDDEN_TOOLS
    from loopctl.agents.presets import PRESETS

    assert {p.binary for p in PRESETS.values()} - {"sh"} <= HIDDEN_TOOLS
    assert "gh" in HIDDEN_TOOLS and "sh" not in HIDDEN_TOOLS


def planted_tools(folder: Path, marker: Path) -> None:
    """A developer's bin folder: claude, codex and gh that leave a mark when
    run, beside a tool a test may need."""
    folder.mkdir()
    for name in ("claude", "codex", "gh", "needed-tool"):
        tool = folder / name
        tool.write_text(f"#!/bin/sh\necho {name} >> {marker}\necho {name} 1.0\n")
        tool.chmod(0o755)


def agents_run_under(path: str) -> dict[str, str | None]:
    import json

    proc = subprocess.run([*loopctl_argv("agents", "--json")], capture_output=True, text=True,
                          env=dict(os.environ, PATH=path), timeout=60)
    assert proc.returncode == 0, proc.stderr
    return {row["preset"]: row["path"] for row in json.loads(proc.stdout)["agents"]}


def test_the_test_path_never_runs_a_developers_agent_cli(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    planted = tmp_path / "dev-bin"
    planted_tools(planted, marker)
    developers = f"{planted}{os.pathsep}{os.environ['PATH']}"
    # The control: under the developer's own PATH, `agents` runs them.
    assert agents_run_under(developers)["claude"] == str(planted / "claude")
    assert sorted(marker.read_text().split()) == ["claude", "codex"]
    marker.unlink()
    path = controlled_path(developers, tmp_path / "shadows")
    found = agents_run_under(path)
    assert (found["claude"], found["codex"]) == (None, None)
    assert not marker.exists()
    import shutil

    assert shutil.which("gh", path=path) is None
    needed = shutil.which("needed-tool", path=path)
    assert needed is not None and os.path.realpath(needed) == str(planted / "needed-tool")
    assert shutil.which("sh", path=path) is not None


def test_every_test_starts_with_the_controlled_path(test_path: str) -> None:
    import shutil

    from conftest import HIDDEN_TOOLS

    assert os.environ["PATH"] == test_path
    found = {name: shutil.which(name) for name in HIDDEN_TOOLS}
    assert found == dict.fromkeys(HIDDEN_TOOLS), found


def test_git_reads_no_system_config(tmp_path: Path) -> None:
    """A machine's /etc/gitconfig (`commit.gpgsign`, a hooksPath) is not read
    in a test (GIT_CONFIG_SYSTEM points git at a stand-in for it)."""
    system = tmp_path / "gitconfig"
    system.write_text("[loopctl]\n\tprobe = from-the-system\n")
    env = dict(os.environ, GIT_CONFIG_SYSTEM=str(system))
    probe = ["git", "config", "--get", "loopctl.probe"]
    assert subprocess.run(probe, env=env, capture_output=True).returncode == 1
    env.pop("GIT_CONFIG_NOSYSTEM")  # the control: without it, git reads that file
    assert subprocess.run(probe, env=env, capture_output=True, text=True).stdout == \
        "from-the-system\n"


# -- a crontab edited outside the suite (issue 51, item 26) -------------------

CRON_TESTS = '''
import os
import subprocess
import time
from pathlib import Path

SIGNALS = Path(os.environ["GUARD_SIGNALS"])


def test_another_process_edits_the_crontab_meanwhile():
    (SIGNALS / "waiting").touch()
    deadline = time.monotonic() + 60
    while not (SIGNALS / "edited").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert (SIGNALS / "edited").exists()


def test_the_suite_edits_the_crontab():
    line = "* * * * * loopctl tick # loopctl tick for /suite\\n"
    old = subprocess.run(["crontab", "-l"], capture_output=True, text=True).stdout
    subprocess.run(["crontab", "-"], input=old + line, text=True, check=True)
'''


def fake_crontab(folder: Path, spool: Path) -> None:
    folder.mkdir()
    tool = folder / "crontab"
    tool.write_text(f'#!/bin/sh\nif [ "$1" = -l ]; then cat "{spool}"; else cat > "{spool}"; fi\n')
    tool.chmod(0o755)


def test_the_guard_tells_a_crontab_edit_outside_the_suite_from_its_own(tmp_path: Path) -> None:
    from conftest import wait_for

    inner, signals, spool = tmp_path / "inner", tmp_path / "signals", tmp_path / "spool"
    for folder in (inner, signals):
        folder.mkdir()
    spool.write_text("0 * * * * backup\n")
    (inner / "conftest.py").write_text((TESTS / "conftest.py").read_text())
    (inner / "test_cron.py").write_text(CRON_TESTS)
    (inner / "pytest.ini").write_text("[pytest]\n")
    fake_crontab(tmp_path / "bin", spool)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "LOOPCTL_"))}
    env.update(HOME=str(guarded_home(tmp_path)), COLUMNS="400", GUARD_CRONTABS=str(spool),
               GUARD_SIGNALS=str(signals), PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
               PATH=f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", "-W",
         "default", f"--basetemp={tmp_path / 'inner-tmp'}", str(inner)],
        cwd=inner, env=env, stdout=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: (signals / "waiting").exists(), timeout=60)
        with spool.open("a") as crontab:  # this process is not the inner suite's
            crontab.write("* * * * * loopctl tick # loopctl tick for /elsewhere\n")
        (signals / "edited").touch()
        out, _ = proc.communicate(timeout=120)
    finally:
        (signals / "edited").touch()
        if proc.poll() is None:
            proc.kill()
    assert "ERROR test_cron.py::test_another_process_edits" not in out, out[-3000:]
    assert "UserWarning: changed outside the test suite" in out, out[-3000:]
    assert "ERROR test_cron.py::test_the_suite_edits_the_crontab - AssertionError: a test " \
           "touched the real home directory" in out, out[-3000:]
    assert "/suite" in spool.read_text()  # the suite's edit went through the shim
