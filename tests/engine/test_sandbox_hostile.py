"""A confined hostile agent (DESIGN §14) tries to reach past its run: the
user's secrets, ~/.ssh/authorized_keys, loopctl's own files, another loop's
working directory, its supervisor, the daemon and another run. Each is
denied by the kernel, while its own work in its working directory succeeds
and its `loopctl decide` is recorded.

Real processes throughout: `loopctl run` (the supervisor), `loopctl daemon`,
a second confined run, and tests/hostile/escaper.py as the agent.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI, TESTS, wait_for

ESCAPER = TESTS / "hostile" / "escaper.py"
HOSTILE_BIN = TESTS / "hostile" / "bin"


def escaper_command() -> str:
    return shlex.join([sys.executable, str(ESCAPER)])


def secrets(home: Path) -> list[Path]:
    """Files an attacker wants, planted in the test's HOME."""
    files = [home / ".ssh" / "id_rsa", home / ".aws" / "credentials", home / ".netrc",
             home / ".config" / "gh" / "hosts.yml", home / "other-repo" / "notes.txt"]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("SECRET\n")
    return files


def start(cli: CLI, name: str, cwd: Path, *extra: str, env: dict[str, str] | None = None,
          command: str | None = None) -> None:
    pairs = [a for k, v in (env or {}).items() for a in ("--env", f"{k}={v}")]
    cli("start", "p", "--name", name, "--every", "1h", "--after", "1h", "--cwd", str(cwd),
        "--command", command or escaper_command(), *pairs, *extra, check=0)


def report_of(cwd: Path) -> dict[str, str]:
    data: dict[str, str] = json.loads((cwd / "escape-report.json").read_text())
    return data


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def other_run(cli: CLI, tmp_path: Path) -> Any:
    """Another loop's confined run, in flight: its agent's pid."""
    other = tmp_path / "other-work"
    other.mkdir()
    pid_file = other / "pid"
    start(cli, "other", other, "--sandbox", "on", "--timeout", "2m",
          env={"HOSTILE_PID_FILE": str(pid_file)})
    proc = cli.popen("run", "other", stdout=subprocess.DEVNULL)
    pid = int(wait_for(lambda: pid_file.exists() and pid_file.read_text()))
    yield pid, other
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)


def test_a_confined_agent_reaches_nothing_past_its_run(cli: CLI, tmp_path: Path,
                                                        other_run: Any) -> None:
    other_pid, other_cwd = other_run
    home = Path(os.environ["HOME"])
    stolen = secrets(home)
    work = tmp_path / "work"
    work.mkdir()
    daemon = cli.popen("daemon", "--quiet")
    try:
        wait_for(lambda: (cli.state_dir / "lease.json").exists())
        targets = [home / ".ssh" / "authorized_keys", cli.home / "loops.yaml",
                   cli.state_dir / "state.json", other_cwd / "planted.txt",
                   tmp_path / "outside.txt"]
        start(cli, "escape", work, "--sandbox", "on", env={
            "HOSTILE_READ": os.pathsep.join(map(str, stolen)),
            "HOSTILE_WRITE": os.pathsep.join(map(str, targets)),
            "HOSTILE_SIGNAL": f"{daemon.pid},{other_pid}"})
        loops_before = (cli.home / "loops.yaml").read_bytes()
        cli("run", "escape", check=0)
        report = report_of(work)
        assert alive(daemon.pid) and daemon.poll() is None
    finally:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=30)
    allowed = {k: v for k, v in report.items() if v == "ALLOWED"}
    if os.geteuid() == 0:
        # Measured on Linux 6.18: Landlock denies an unprivileged agent
        # /proc/PID/environ of a process outside its domain, but not root
        # (README, "What a run can touch"). Everything else holds for root.
        allowed = {k: v for k, v in allowed.items() if not k.endswith("/environ")}
    # Only its own private TMPDIR was writable; everything else was refused.
    assert list(allowed) == [k for k in report if k.startswith("tmpdir /")], report
    assert len(report) == len(stolen) + len(targets) + 7
    assert all(v.startswith("denied: ") for k, v in report.items()
               if k not in allowed and not (os.geteuid() == 0 and k.endswith("/environ")))
    assert alive(other_pid)
    assert not (home / ".ssh" / "authorized_keys").exists()
    assert not (other_cwd / "planted.txt").exists() and not (tmp_path / "outside.txt").exists()
    assert (cli.home / "loops.yaml").read_bytes() == loops_before
    assert b"attacker" not in (cli.state_dir / "state.json").read_bytes()
    [record] = cli.records("escape")
    assert record["outcome"] == "ok" and record["sandbox"].startswith("landlock ABI ")
    assert record["decision"]["summary"] == "tried everything"
    assert cli.json("status", "escape")["status"] == "completed"
    # The private TMPDIR is gone with the run.
    [tmpdir] = [k.split(" ", 1)[1] for k in allowed]
    assert tmpdir.startswith("/") and not os.path.exists(tmpdir)


def test_an_agent_preset_is_confined_by_default(cli: CLI, tmp_path: Path) -> None:
    """auto (the default) confines agent presets: the hostile claude cannot
    read ~/.ssh, and the record says it ran confined."""
    stolen = secrets(Path(os.environ["HOME"]))
    work = tmp_path / "work"
    work.mkdir()
    record_file = tmp_path / "argv.jsonl"
    env = {"PATH": f"{HOSTILE_BIN}{os.pathsep}{os.environ['PATH']}",
           "HOSTILE_RECORD": str(record_file), "HOSTILE_SESSION_FILE": str(stolen[0])}
    cli("start", "p", "--name", "agent", "--agent", "claude", "--every", "1h",
        "--cwd", str(work), env=env, check=0)
    proc = cli("run", "agent", env=env)
    assert "Permission denied" in proc.stdout + proc.stderr
    assert not record_file.exists()
    [record] = cli.records("agent")
    assert record["sandbox"].startswith("landlock ABI ") and record["outcome"] == "failed"


def test_a_shell_loop_is_confined_only_with_on(cli: CLI, tmp_path: Path) -> None:
    secret = secrets(Path(os.environ["HOME"]))[0]
    (tmp_path / "work").mkdir()
    cli("start", f"cat {secret}", "--name", "plain", "--every", "1h",
        "--cwd", str(tmp_path / "work"), check=0)
    assert "SECRET" in cli("run", "plain", check=0).stdout
    assert cli.records("plain")[0]["sandbox"] == "off"
    cli("update", "plain", "--sandbox", "on", check=0)
    proc = cli("run", "plain", "--force")
    assert "SECRET" not in proc.stdout and "Permission denied" in proc.stdout
    assert cli.records("plain")[-1]["sandbox"].startswith("landlock ABI ")


def test_on_never_runs_unconfined(cli: CLI, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    cli("start", f"touch {marker}", "--name", "strict", "--every", "1h", "--sandbox", "on",
        "--cwd", str(tmp_path), check=0)
    proc = cli("run", "strict", env={"LOOPCTL_SANDBOX_ABI": "0"})
    assert proc.returncode != 0 and not marker.exists()
    [record] = cli.records("strict")
    assert record["outcome"] == "failed" and record["sandbox"] == "unavailable"
    assert record["note"].startswith("sandbox unavailable: LOOPCTL_SANDBOX_ABI=0")


def test_auto_says_once_when_it_cannot_confine(cli: CLI, tmp_path: Path) -> None:
    env = {"LOOPCTL_SANDBOX_ABI": "0", "PATH": f"{HOSTILE_BIN}{os.pathsep}{os.environ['PATH']}"}
    (tmp_path / "work").mkdir()
    proc = cli("start", "p", "--name", "loose", "--agent", "claude", "--every", "1h",
               "--cwd", str(tmp_path / "work"), env=env, check=0)
    assert "sandbox is unavailable here (LOOPCTL_SANDBOX_ABI=0" in proc.stderr
    assert "runs will be unconfined" in proc.stderr
    cli("run", "loose", env=env, check=0)
    [record] = cli.records("loose")
    assert record["sandbox"].startswith("sandbox unavailable, running unconfined")
    doctor = cli("doctor", env=env)
    assert "sandbox" in doctor.stdout and "unavailable" in doctor.stdout


def test_yolo_with_off_warns(cli: CLI, tmp_path: Path) -> None:
    proc = cli("start", "p", "--name", "wild", "--agent", "claude", "--every", "1h", "--yolo",
               "--sandbox", "off", "--cwd", str(tmp_path), check=0)
    assert "--yolo with --sandbox off" in proc.stderr


def test_a_working_directory_holding_the_home_is_refused(cli: CLI, tmp_path: Path) -> None:
    """Confined in a folder that holds the home, the agent could write all of
    it: `on` refuses to start rather than pretend."""
    started = cli("start", "true", "--name", "wide", "--every", "1h", "--cwd", str(tmp_path),
                  "--sandbox", "on", check=0)
    assert "holds your home" in started.stderr and "every run will fail" in started.stderr
    assert cli("run", "wide").returncode != 0
    [record] = cli.records("wide")
    assert record["outcome"] == "failed"
    assert record["note"].startswith("sandbox unavailable: the working directory ")
    assert "holds the home" in record["note"]


def test_nothing_a_run_plants_makes_the_next_one_unconfined(cli: CLI, tmp_path: Path) -> None:
    """A confined opencode may write ~/.cache, so it can turn its own
    ~/.cache/opencode into a file. The next run (auto) must not then fall
    back to running unconfined: it fails, saying why."""
    planted = Path(os.environ["HOME"]) / ".cache" / "opencode"
    planted.parent.mkdir(parents=True)
    planted.write_text("not a folder")
    work = tmp_path / "work"
    work.mkdir()
    cli("start", "p", "--name", "oc", "--agent", "opencode", "--every", "1h",
        "--cwd", str(work), check=0)
    assert cli("run", "oc").returncode != 0
    [record] = cli.records("oc")
    assert record["outcome"] == "failed" and record["sandbox"] == "unavailable"
    assert record["note"] == f"sandbox refused {planted}: a regular file, not a real folder"


def test_auto_runs_unconfined_where_the_cwd_holds_the_home(cli: CLI, tmp_path: Path) -> None:
    """A container whose HOME is its workdir: auto says so and runs (on
    refuses: test_a_working_directory_holding_the_home_is_refused)."""
    env = {"PATH": f"{HOSTILE_BIN}{os.pathsep}{os.environ['PATH']}"}
    started = cli("start", "p", "--name", "wide", "--agent", "claude", "--every", "1h",
                  "--cwd", str(tmp_path), env=env, check=0)
    assert "holds your home" in started.stderr and "runs will be unconfined" in started.stderr
    cli("run", "wide", env=env, check=0)
    [record] = cli.records("wide")
    assert record["outcome"] == "ok"
    assert record["sandbox"].startswith("sandbox unavailable, running unconfined: the working")


def test_sandbox_write_and_read_widen_it(cli: CLI, tmp_path: Path) -> None:
    shared, extra = tmp_path / "shared", tmp_path / "extra.txt"
    shared.mkdir()
    extra.write_text("readable\n")
    work = tmp_path / "work"
    work.mkdir()
    cli("start", f"cat {extra} && echo hi > {shared}/out && echo no > {extra}", "--name", "wide",
        "--every", "1h", "--cwd", str(work), "--sandbox", "on", "--sandbox-write", str(shared),
        "--sandbox-read", str(extra), check=0)
    proc = cli("run", "wide")
    assert "readable" in proc.stdout and "Permission denied" in proc.stdout
    assert (shared / "out").read_text() == "hi\n" and extra.read_text() == "readable\n"


def test_top_level_sandbox_is_the_default(cli: CLI, tmp_path: Path) -> None:
    secret = secrets(Path(os.environ["HOME"]))[0]
    (tmp_path / "work").mkdir()
    cli("start", f"cat {secret}", "--name", "plain", "--every", "1h",
        "--cwd", str(tmp_path / "work"), check=0)
    loops = cli.home / "loops.yaml"
    loops.write_text("sandbox: on\n" + loops.read_text())
    proc = cli("run", "plain")
    assert "SECRET" not in proc.stdout and "Permission denied" in proc.stdout
    # The loop's own setting wins over the file's.
    cli("update", "plain", "--sandbox", "off", check=0)
    assert "SECRET" in cli("run", "plain", "--force", check=0).stdout


@pytest.mark.parametrize("args, expected", [
    (["--sandbox", "maybe"], "bad --sandbox 'maybe': expected one of auto, on, off"),
    (["--sandbox-write", "/no/such/dir"], "bad --sandbox-write '/no/such/dir': no such file"),
    (["--sandbox-read", "a\nb"], "bad --sandbox-read"),
    (["--sandbox-write", ""], "bad --sandbox-write ''"),
    (["--sandbox-read", "/"], "bad --sandbox-read '/': it is the root, your home or a folder"),
])
def test_bad_sandbox_options_are_one_line(cli: CLI, args: list[str], expected: str) -> None:
    proc = cli("start", "p", "--name", "bad", "--every", "1h", *args)
    assert proc.returncode == 2, proc.stderr
    [line] = [x for x in proc.stderr.splitlines() if x.strip()]
    assert expected in line and "Traceback" not in proc.stderr
    assert not (cli.home / "loops.yaml").exists()


def test_a_bad_top_level_sandbox_is_refused(cli: CLI, tmp_path: Path) -> None:
    cli("start", "true", "--name", "ok", "--every", "1h", "--cwd", str(tmp_path), check=0)
    loops = cli.home / "loops.yaml"
    before = "sandbox: sometimes\n" + loops.read_text()
    loops.write_text(before)
    proc = cli("ls")
    assert proc.returncode != 0
    assert "'sandbox' must be one of auto, on, off" in proc.stderr
    assert loops.read_text() == before


@pytest.mark.parametrize("mode", ["on", "off"])
def test_a_gate_is_confined_like_the_agent(cli: CLI, tmp_path: Path, mode: str) -> None:
    """DESIGN §14/§17: `--if` runs under the agent's sandbox. A gate that
    finds work only if it can read ~/.ssh/id_rsa: confined, it cannot
    (exit 1, the fire is skipped); with `--sandbox off` (the control) it can,
    and the agent runs."""
    secrets(Path(os.environ["HOME"]))
    cwd = tmp_path / "work"
    cwd.mkdir()
    gate = shlex.join(["sh", "-c", 'cat "$HOME/.ssh/id_rsa" >/dev/null 2>&1 && exit 0; exit 1'])
    start(cli, "gated", cwd, "--sandbox", mode, "--if", gate, command="true")
    cli("run", "gated", check=0 if mode == "off" else None)
    [record] = cli.records("gated")
    assert record["outcome"] == ("ok" if mode == "off" else "skipped"), record
    assert record["gate"]["exit_code"] == (0 if mode == "off" else 1), record
    assert record["sandbox"].startswith("landlock") == (mode == "on"), record
