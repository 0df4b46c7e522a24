"""Cron integration and exports, checked with the real tools (issue 6)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import actionlint_support as actionlint
import pytest
from faults.support import home_processes

from conftest import CLI, TESTS, tool, wait_for

REAL_CRON = os.environ.get("LOOPCTL_REAL_CRON") == "1"


@contextmanager
def throwaway_user(tmp_path: Path, root_alias: bool = False) -> Iterator[str]:
    """A user made for one test and deleted after it, with its crontab: the
    real-crontab tests touch no crontab but this one's. Only as root and
    with LOOPCTL_REAL_CRON=1 (.ci/run sets both). `root_alias`: uid 0 under
    this name, for a job that must reach what only root can."""
    if os.geteuid() != 0 or not REAL_CRON:
        pytest.skip("makes a throwaway user: needs root and LOOPCTL_REAL_CRON=1 (CI has both)")
    name = f"loopctl-test-{secrets.token_hex(4)}"
    home = tmp_path / "throwaway-home"  # exists (cron changes into it); nothing else uses it
    home.mkdir()
    argv = ["useradd", "--no-create-home", "--home-dir", str(home),
            "--shell", "/usr/sbin/nologin"]
    if root_alias:
        argv += ["--non-unique", "--uid", "0", "--gid", "0"]
    made = subprocess.run([*argv, name], capture_output=True, text=True)
    assert made.returncode == 0, made.stderr
    try:
        yield name
    finally:
        subprocess.run([tool("crontab"), "-u", name, "-r"], capture_output=True)
        # --force: a uid-0 alias counts as logged in (root runs processes);
        # without --remove, userdel leaves every file alone.
        gone = subprocess.run(["userdel", "--force", name], capture_output=True, text=True)
        assert gone.returncode == 0, gone.stderr


@pytest.fixture
def fake_crontab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    table = tmp_path / "crontab.txt"
    monkeypatch.setenv("LOOPCTL_CRONTAB", str(TESTS / "cronbin" / "crontab"))
    monkeypatch.setenv("FAKE_CRONTAB_FILE", str(table))
    return table


def test_cron_install_is_idempotent_and_uninstall_removes_only_its_line(
        cli: CLI, fake_crontab: Path) -> None:
    fake_crontab.write_text("# my own jobs\n0 3 * * * /usr/bin/backup\n")
    first = cli.json("cron", "install")
    assert first["changed"] is True
    second = cli.json("cron", "install")
    assert second["changed"] is False
    lines = fake_crontab.read_text().splitlines()
    assert lines[:2] == ["# my own jobs", "0 3 * * * /usr/bin/backup"]
    mine = [line for line in lines if "loopctl tick for" in line]
    assert len(mine) == 1
    line = mine[0]
    assert line.startswith("* * * * * PATH=")
    assert f"LOOPCTL_HOME={cli.home}" in line
    assert " -m loopctl tick --quiet >> " in line and "cron.log 2>&1" in line
    status = cli.json("cron", "status")
    assert status["installed"] is True
    cli("cron", "uninstall", check=0)
    assert fake_crontab.read_text().splitlines() == ["# my own jobs",
                                                     "0 3 * * * /usr/bin/backup"]
    assert cli.json("cron", "status")["installed"] is False


def test_cron_path_finds_the_agents_the_loops_name(cli: CLI, fake_crontab: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(TESTS / "bin") + os.pathsep + os.environ["PATH"])
    cli("start", "--name", "c", "--every", "1h", "--agent", "claude", "--", "p", check=0)
    line = cli.json("cron", "install")["line"]
    path = line.split("PATH=", 1)[1].split(" ", 1)[0]
    assert str(TESTS / "bin") in path.split(os.pathsep)


def test_cron_without_a_crontab_program_says_what_to_do(cli: CLI,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("LOOPCTL_CRONTAB", raising=False)
    proc = subprocess.run([sys.executable, "-m", "loopctl", "cron", "install"],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "install cron" in proc.stderr and "loopctl daemon" in proc.stderr


TARGET_ARGS = {"k8s": ["--image", "registry.example/loopctl-agent:1.0"],
               "github": ["--install", "loopctl @ git+https://github.com/owner/loopctl@v1.0.0"]}


def export(cli: CLI, name: str, target: str, out: Path, *extra: str) -> list[Path]:
    proc = cli("export", name, "--to", target, "-o", str(out), *TARGET_ARGS.get(target, []),
               *extra)
    assert proc.returncode == 0, proc.stderr
    return sorted(out.iterdir())


@pytest.fixture
def loops(cli: CLI, tmp_path: Path) -> None:
    prompt = tmp_path / "LOOP.md"
    prompt.write_text("fix what is red\n")
    cli("start", "--name", "ci", "--every", "10m", "--agent", "claude", "--timeout", "25m",
        "--", "check the build", check=0)
    cli("start", "--name", "nightly", "--cron", "30 2 * * 1-5", "--tz", "Europe/Berlin",
        "--prompt-file", str(prompt), "--agent", "codex", check=0)
    cli("start", "--name", "odd", "--every", "7m", "--", "echo odd", check=0)


@pytest.mark.parametrize("name", ["ci", "nightly", "odd"])
def test_systemd_units_pass_systemd_analyze_verify(cli: CLI, tmp_path: Path, loops: None,
                                                   name: str) -> None:
    analyze = tool("systemd-analyze")
    files = export(cli, name, "systemd", tmp_path / "units")
    assert [f.suffix for f in files] == [".service", ".timer"]
    timer = files[1].read_text()
    proc = subprocess.run([analyze, "verify", "--man=no", *map(str, files)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Failed to parse" not in proc.stderr
    if name != "nightly":
        # --every waits after each run ends, as loopctl does (issue 29): a
        # monotonic timer on the service's inactivity, not wall-clock slots.
        every = {"ci": 600, "odd": 420}[name]
        assert f"OnUnitInactiveSec={every}s" in timer and "OnCalendar=" not in timer
        assert "OnActiveSec=" in timer  # the first fire: the service was never inactive
        return
    assert "Persistent=true" in timer
    calendar = timer.split("OnCalendar=", 1)[1].splitlines()[0]
    check = subprocess.run([analyze, "calendar", calendar], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_systemd_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    analyze = tool("systemd-analyze")
    timer = tmp_path / "broken.timer"
    timer.write_text("[Timer]\nOnCalendar=not-a-time\n")
    (tmp_path / "broken.service").write_text("[Service]\nExecStart=/bin/true\n")
    proc = subprocess.run([analyze, "verify", "--man=no", str(timer)], capture_output=True,
                          text=True)
    assert proc.returncode != 0


@pytest.mark.parametrize("name", ["ci", "nightly"])
def test_k8s_cronjob_passes_kubernetes_validate_strict(cli: CLI, tmp_path: Path, loops: None,
                                                       name: str) -> None:
    validate = tool("kubernetes-validate")
    import yaml

    (path,) = export(cli, name, "k8s", tmp_path / "k8s")
    config_map, claim, cron_job = list(yaml.safe_load_all(path.read_text()))
    assert claim["kind"] == "PersistentVolumeClaim"
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    spec = cron_job["spec"]
    assert spec["concurrencyPolicy"] == "Forbid"
    assert spec["startingDeadlineSeconds"] > 0
    assert spec["successfulJobsHistoryLimit"] and spec["failedJobsHistoryLimit"]
    container = spec["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["loopctl", "run", name, "--scheduled", "--slot",
                                    f"k8s-job:loopctl-{name}:$(LOOPCTL_K8S_JOB)"]
    pod = spec["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert all(m["readOnly"] for m in container["volumeMounts"] if m["name"] == "definition")
    loops_yaml = yaml.safe_load(config_map["data"]["loops.yaml"])
    assert name in loops_yaml["loops"]
    if name == "nightly":
        assert spec["timeZone"] == "Europe/Berlin"
        assert config_map["data"]["prompt.md"] == "fix what is red\n"
    proc = subprocess.run([validate, "--strict", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_kubernetes_validate_strict_rejects_an_unknown_field(tmp_path: Path) -> None:
    validate = tool("kubernetes-validate")
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: batch/v1\nkind: CronJob\nmetadata: {name: x}\n"
                   "spec: {schedule: '* * * * *', bogus: 1, jobTemplate: {spec: {template: "
                   "{spec: {containers: [{name: a, image: b}], restartPolicy: Never}}}}}\n")
    proc = subprocess.run([validate, "--strict", str(bad)], capture_output=True, text=True)
    assert proc.returncode != 0


@pytest.mark.parametrize("name", ["ci", "nightly", "odd"])
def test_github_workflow_passes_the_workflow_schema(cli: CLI, tmp_path: Path, loops: None,
                                                   name: str) -> None:
    checker = tool("check-jsonschema")
    import yaml

    # 7m is no even cron step: GitHub fires it on wall-clock slots only if asked
    (path,) = export(cli, name, "github", tmp_path / "gh",
                     *(["--allow-drift"] if name == "odd" else []))
    flow = yaml.safe_load(path.read_text())
    triggers = flow[True] if True in flow else flow["on"]  # YAML 1.1 reads `on` as true
    assert "workflow_dispatch" in triggers and triggers["schedule"][0]["cron"]
    assert flow["concurrency"]["group"] == f"loopctl-{name}"
    job = flow["jobs"]["run"]
    if name == "ci":
        assert job["timeout-minutes"] == 35  # the run's 25m plus 10m to install and cache
        assert job["env"]["ANTHROPIC_API_KEY"] == "${{ secrets.ANTHROPIC_API_KEY }}"
    proc = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    actionlint.lint(path.read_text(), path.name)
    assert "env" not in job or "LOOPCTL_HOME" not in job["env"]


def test_actionlint_catches_a_context_the_schema_lets_through(tmp_path: Path) -> None:
    """The schema passes a job `env` that names `runner`; GitHub refuses the
    workflow, and so does actionlint."""
    checker = tool("check-jsonschema")
    flow = tmp_path / "flow.yml"
    flow.write_text("on: push\njobs:\n  run:\n    runs-on: ubuntu-latest\n    env:\n"
                    "      HOME_DIR: ${{ runner.temp }}/home\n    steps:\n      - run: echo\n")
    proc = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(flow)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    with pytest.raises(AssertionError, match='context "runner" is not allowed here'):
        actionlint.lint(flow.read_text())


def test_github_export_of_a_sub_five_minute_loop_is_refused_or_warned(cli: CLI) -> None:
    cli("start", "--name", "fast", "--every", "1m", "--", "echo", check=0)
    proc = cli("export", "fast", "--to", "github", *TARGET_ARGS["github"])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "at most every 5 minutes" in proc.stderr and "--allow-drift" in proc.stderr
    proc = cli("export", "fast", "--to", "github", "--allow-drift", *TARGET_ARGS["github"])
    assert proc.returncode == 0
    assert "*/5 * * * *" in proc.stdout and "5 minutes" in proc.stderr


def test_crontab_export_is_accepted_by_the_real_crontab(cli: CLI, tmp_path: Path,
                                                        loops: None) -> None:
    program = tool("crontab")
    (path,) = export(cli, "ci", "crontab", tmp_path / "cron")
    line = path.read_text()
    assert line.startswith("*/10 * * * * ")
    with throwaway_user(tmp_path) as user:  # its crontab is the only one touched
        proc = subprocess.run([program, "-u", user, str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        listed = subprocess.run([program, "-u", user, "-l"], capture_output=True, text=True)
        assert line.strip() in listed.stdout
        bad = tmp_path / "bad.crontab"
        bad.write_text("61 * * * * true\n")
        assert subprocess.run([program, "-u", user, str(bad)],
                              capture_output=True).returncode != 0


@pytest.mark.parametrize("every,cron", [("1m", "* * * * *"), ("15m", "*/15 * * * *"),
                                        ("1h", "0 * * * *"), ("6h", "0 */6 * * *"),
                                        ("1d", "0 0 * * *"), ("1w", "0 0 * * 0")])
def test_every_converts_to_cron(every: str, cron: str) -> None:
    from loopctl.domain.durations import parse_duration
    from loopctl.integrations.export import every_to_cron

    warnings: list[str] = []
    assert every_to_cron(parse_duration(every), warnings) == cron


def test_every_that_cron_cannot_express_is_refused_or_warned(cli: CLI) -> None:
    cli("start", "--name", "tiny", "--every", "30s", "--", "echo", check=0)
    proc = cli("export", "tiny", "--to", "crontab")
    assert proc.returncode == 2 and "at most once a minute" in proc.stderr
    cli("start", "--name", "self", "--every", "auto", "--", "echo", check=0)
    assert cli("export", "self", "--to", "systemd").returncode == 2
    cli("start", "--name", "seven", "--every", "7m", "--", "echo", check=0)
    for to in ("crontab", "k8s", "github"):
        proc = cli("export", "seven", "--to", to, *TARGET_ARGS.get(to, []))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, (to, proc.stderr)
        assert "became every 6m" in proc.stderr and "--allow-drift" in proc.stderr
    proc = cli("export", "seven", "--to", "crontab", "--allow-drift")
    assert proc.returncode == 0 and "became every 6m" in proc.stderr


@pytest.mark.slow
@pytest.mark.waits_on_wall_clock
@pytest.mark.skipif(not REAL_CRON,
                    reason="needs a running cron daemon (set LOOPCTL_REAL_CRON=1; CI does)")
def test_real_cron_runs_a_loop_within_two_minutes(cli: CLI, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    program = tool("crontab")
    cli("start", "--name", "cronjob", "--every", "1m", "--", "echo fired by cron", check=0)
    cli("tick", "--wait", check=0)  # the first run; cron must bring the second
    first = cli.records("cronjob")
    assert len(first) == 1
    # uid 0 under a name of its own: the job runs this test's interpreter and
    # writes this test's home, which only root can reach (pytest's temp
    # folders are 0700), yet no existing user's crontab is read or written.
    with throwaway_user(tmp_path, root_alias=True) as user:
        wrapper = tmp_path / "crontab-for-user"
        wrapper.write_text(f"#!/bin/sh\nexec {program} -u {user} \"$@\"\n")
        wrapper.chmod(0o700)
        monkeypatch.setenv("LOOPCTL_CRONTAB", str(wrapper))
        cli("cron", "install", check=0)
        try:
            status = cli.json("cron", "status")
            assert status["installed"] is True and status["cron_running"] is True, status
            listed = subprocess.run([program, "-u", user, "-l"], capture_output=True, text=True)
            assert status["line"] in listed.stdout
            records = wait_for(lambda: len(cli.records("cronjob")) >= 2
                               and cli.records("cronjob"), timeout=150, interval=2)
            assert records[1]["outcome"] == "ok"
            assert "fired by cron" in Path(records[1]["log"]).read_text()
        finally:
            cli("cron", "uninstall")
            # A tick cron started at the last minute may still be writing the home.
            wait_for(lambda: not home_processes(tmp_path), timeout=60)


@pytest.mark.slow
@pytest.mark.waits_on_wall_clock
@pytest.mark.skipif(not REAL_CRON,
                    reason="needs a running cron daemon (set LOOPCTL_REAL_CRON=1; CI does)")
def test_real_cron_fires_a_home_found_from_home_when_cron_s_home_is_another(
        cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No LOOPCTL_HOME or XDG_*: the home is under this shell's HOME, while
    cron runs the line with the throwaway user's passwd HOME. The line pins
    the home it was installed for, so the loop fires there."""
    for name in ("LOOPCTL_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"):
        monkeypatch.delenv(name)
    state = Path(os.environ["HOME"]) / ".local" / "state" / "loopctl"
    program = tool("crontab")
    cli("start", "--name", "cronjob", "--every", "1h", "--", "echo fired by cron", check=0)
    with throwaway_user(tmp_path, root_alias=True) as user:
        passwd_home = subprocess.run(["getent", "passwd", user], capture_output=True,
                                     text=True, check=True).stdout.split(":")[5]
        assert passwd_home != os.environ["HOME"]
        wrapper = tmp_path / "crontab-for-user"
        wrapper.write_text(f"#!/bin/sh\nexec {program} -u {user} \"$@\"\n")
        wrapper.chmod(0o700)
        monkeypatch.setenv("LOOPCTL_CRONTAB", str(wrapper))
        cli("cron", "install", check=0)
        try:
            found = wait_for(lambda: sorted((state / "runs" / "cronjob").glob("*.json")),
                             timeout=150, interval=2)
            record = json.loads(found[0].read_text())
            assert record["outcome"] == "ok", record
            assert "fired by cron" in Path(record["log"]).read_text()
            report = json.loads(cli("doctor", "--json").stdout)
            [driver] = [f for f in report["findings"] if f["check"] == "drivers"]
            assert driver["level"] == "ok" and "last tick" in driver["message"], driver
            assert not (Path(passwd_home) / ".local").exists()  # no tick read an empty home
        finally:
            cli("cron", "uninstall")
            wait_for(lambda: not xdg_processes(tmp_path), timeout=60)


def xdg_processes(under: Path) -> list[int]:
    """Processes a tick of this test's home started (their XDG_STATE_HOME is here)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            value = proc.environ().get("XDG_STATE_HOME", "")
        except (psutil.Error, OSError):
            continue
        if proc.pid != os.getpid() and value.startswith(str(under) + os.sep):
            found.append(proc.pid)
    return found
