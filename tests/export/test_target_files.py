"""What `loopctl export` writes for each target (DESIGN §9, issue "G"): time
zones (GitHub's UTC-only cron with a guard step, a zone shift that would move
the day, k8s/systemd/crontab keeping the zone), the export command's own
contract (every target runs the scheduled entry point; `--image`,
`--state-size`, `--install`; the definition and prompt in base64), and the
real validators (kubernetes-validate, the GitHub workflow schema,
systemd-analyze) run on a loop that has everything an export must carry.
"""

from __future__ import annotations

import base64
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import CLI, agent_command, tool
from export.simulator import GithubSimulator, parse_service, write_shim
from export.support import (
    IMAGE,
    INSTALL,
    SECRET,
    TARGET_ARGS,
    TARGETS,
    SimFactory,
    export,
    make_sim_fixture,  # noqa: F401 - the make_sim fixture
    start,
    weird_dir,
)

# -- time zones ------------------------------------------------------------------------


def date_shim(folder: Path) -> Path:
    """A `date` that prints $FAKE_OFFSET for Europe/Berlin (and +0000 for any
    other TZ, so the guard must pass the zone)."""
    folder.mkdir()
    shim = folder / "date"
    shim.write_text('#!/bin/sh\nif [ "$TZ" = Europe/Berlin ]; then echo "$FAKE_OFFSET"; '
                    'else echo +0000; fi\n')
    shim.chmod(0o755)
    return folder


@pytest.fixture
def berlin(cli: CLI) -> str:
    start(cli, "berlin", "--cron", "30 9 * * 1-5", "--tz", "Europe/Berlin",
          "--command", agent_command("--print", "guten Morgen"))
    return "berlin"


def test_github_keeps_berlin_wall_clock_time_with_two_lines_and_a_guard(
        cli: CLI, tmp_path: Path, make_sim: SimFactory, berlin: str) -> None:
    sim = make_sim(berlin, "github")
    assert isinstance(sim, GithubSimulator)
    assert sorted(sim.crons) == ["30 7 * * 1-5", "30 8 * * 1-5"]
    assert sim.guard_step is not None and sim.guard_step["id"] == "zone"
    assert set(sim.guard_step["env"]) == {"EVENT", "SCHEDULE"}
    assert sim.run_step["if"] == "steps.zone.outputs.fire == 'true'"
    for line in sim.crons:
        assert line not in sim.guard_step["env"]["SCHEDULE"]
    dates = date_shim(tmp_path / "datebin")
    want = {"30 8 * * 1-5": "+0100", "30 7 * * 1-5": "+0200"}
    shim = write_shim(tmp_path / "shim")
    for line in sim.crons:
        for offset in ("+0100", "+0200"):
            sim.schedule = line
            sim.extra_env = {"PATH": f"{dates}:{shim}:/usr/bin:/bin", "FAKE_OFFSET": offset}
            env, temp, workspace = sim.runner()
            guard = sim.guard(env, temp, workspace)
            assert guard.returncode == 0, guard.stderr
            fire = sim.outputs(temp)["fire"]
            assert fire == ("true" if want[line] == offset else "false"), (line, offset)
            if fire == "false":
                assert "not firing" in guard.stdout
    # A manual dispatch always fires; an unknown line never does.
    sim.extra_env = {"PATH": f"{dates}:/usr/bin:/bin", "FAKE_OFFSET": "+0100"}
    sim.event = "workflow_dispatch"
    sim.schedule = ""
    env, temp, workspace = sim.runner()
    assert sim.guard(env, temp, workspace).returncode == 0
    assert sim.outputs(temp)["fire"] == "true"
    sim.event, sim.schedule = "schedule", "0 0 * * *"
    env, temp, workspace = sim.runner()
    assert sim.guard(env, temp, workspace).returncode == 0
    assert sim.outputs(temp)["fire"] == "false"


def test_github_guard_with_the_real_date_fires_exactly_one_line(
        make_sim: SimFactory, berlin: str) -> None:
    if not Path("/usr/share/zoneinfo/Europe/Berlin").exists():
        pytest.skip("no tzdata for Europe/Berlin")
    fired = []
    for index in range(2):
        sim = make_sim(berlin, "github")
        assert isinstance(sim, GithubSimulator)
        sim.schedule = sim.crons[index]
        fire = sim.fire()
        fired.append(fire.fired_loopctl)
        if fire.fired_loopctl:
            assert fire.returncode == 0, fire.describe()
            assert len(sim.records()) == 1
    assert sorted(fired) == [False, True]


@pytest.mark.parametrize("tz", [None, "UTC"])
def test_github_utc_schedule_has_one_line_and_no_guard(cli: CLI, make_sim: SimFactory,
                                                       tz: str | None) -> None:
    zone = ["--tz", tz] if tz else []
    start(cli, "utc", "--cron", "30 9 * * 1-5", *zone, "--command", agent_command())
    sim = make_sim("utc", "github")
    assert isinstance(sim, GithubSimulator)
    assert sim.crons == ["30 9 * * 1-5"]
    assert sim.guard_step is None and "if" not in sim.run_step
    assert "steps.zone" not in sim.workflow


def test_github_refuses_a_zone_shift_that_moves_the_day(cli: CLI) -> None:
    # 01:30 Monday in Tokyo is 16:30 Sunday in UTC: the day-of-week field moves.
    start(cli, "tokyo", "--cron", "30 1 * * 1", "--tz", "Asia/Tokyo",
          "--command", agent_command())
    proc = cli("export", "tokyo", "--to", "github", "--install", INSTALL)
    assert proc.returncode == 2, proc.stdout
    assert "midnight" in proc.stderr and "--tz UTC" in proc.stderr
    assert proc.stdout == ""


def test_github_late_evening_in_tokyo_stays_on_the_same_utc_day(cli: CLI,
                                                                make_sim: SimFactory) -> None:
    # 23:30 in Tokyo (UTC+9, no DST) is 14:30 UTC the same day: no day moves.
    start(cli, "tokyo", "--cron", "30 23 * * 1", "--tz", "Asia/Tokyo",
          "--command", agent_command())
    sim = make_sim("tokyo", "github")
    assert isinstance(sim, GithubSimulator)
    assert sim.crons == ["30 14 * * 1"] and sim.guard_step is None


def test_k8s_and_systemd_keep_the_zone(cli: CLI, tmp_path: Path, berlin: str) -> None:
    (manifest,) = export(cli, berlin, "k8s", tmp_path / "k8s").values()
    cron_job = list(yaml.safe_load_all(manifest))[2]
    assert cron_job["spec"]["timeZone"] == "Europe/Berlin"
    assert cron_job["spec"]["schedule"] == "30 9 * * 1-5"
    assert cron_job["spec"]["concurrencyPolicy"] == "Forbid"
    units = export(cli, berlin, "systemd", tmp_path / "systemd")
    calendar = units["loopctl-berlin.timer"].split("OnCalendar=", 1)[1].splitlines()[0]
    assert calendar.endswith(" Europe/Berlin"), calendar
    assert calendar == "Mon..Fri *-*-* 09:30:00 Europe/Berlin"


def test_crontab_keeps_the_zone_or_says_it_cannot(cli: CLI, berlin: str) -> None:
    proc = cli("export", berlin, "--to", "crontab")
    assert proc.returncode == 0, proc.stderr
    if "CRON_TZ=Europe/Berlin" not in proc.stdout:
        assert "CRON_TZ" in proc.stderr and "Europe/Berlin" in proc.stderr


# -- the export command's own contract -------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_every_target_runs_the_scheduled_entry_point(cli: CLI, tmp_path: Path,
                                                     target: str) -> None:
    start(cli, "entry", "--every", "1h", "--command", agent_command())
    proc = cli("export", "entry", "--to", target, *TARGET_ARGS.get(target, []))
    assert proc.returncode == 0, proc.stderr
    data = cli.json("export", "entry", "--to", target, *TARGET_ARGS.get(target, []))
    assert data["version"] == 1 and data["files"] and data["next_steps"]
    nexts = [line for line in proc.stderr.splitlines() if line.startswith("next: ")]
    assert nexts == [f"next: {step}" for step in data["next_steps"]], proc.stderr
    for text in data["files"].values():
        assert text in proc.stdout
    local = [sys.executable, "-m", "loopctl", "run", "entry", "--scheduled"]
    if target == "crontab":
        (table,) = data["files"].values()
        assert f" {shlex.join(local)} >> " in table
    elif target == "systemd":
        assert parse_service(data["files"]["loopctl-entry.service"])["argv"] == local
    elif target == "k8s":
        (text,) = data["files"].values()
        cron_job = list(yaml.safe_load_all(text))[2]
        pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert pod["containers"][0]["command"] == [
            "loopctl", "run", "entry", "--scheduled",
            "--slot", "k8s-job:loopctl-entry:$(LOOPCTL_K8S_JOB)"]  # the Job's slot
    else:
        (text,) = data["files"].values()
        steps = yaml.safe_load(text)["jobs"]["run"]["steps"]
        assert [s["run"] for s in steps if "loopctl run" in s.get("run", "")] == \
            ["loopctl run entry --scheduled"]


def test_k8s_needs_an_image_and_sizes_the_claim(cli: CLI) -> None:
    start(cli, "kube", "--every", "1h", "--command", agent_command())
    proc = cli("export", "kube", "--to", "k8s")
    assert proc.returncode == 2 and "--image" in proc.stderr
    assert proc.stdout == ""
    data = cli.json("export", "kube", "--to", "k8s", "--image", IMAGE, "--state-size", "5Gi")
    (text,) = data["files"].values()
    config_map, claim, cron_job = yaml.safe_load_all(text)
    assert claim["metadata"]["name"] == "loopctl-kube-state"
    assert claim["spec"]["resources"]["requests"]["storage"] == "5Gi"
    pod = cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LOOPCTL_HOME"] == "/loopctl"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/loopctl/loops.yaml"] == {"name": "definition", "mountPath":
                                             "/loopctl/loops.yaml", "subPath": "loops.yaml",
                                             "readOnly": True}
    assert mounts["/loopctl/state"]["name"] == "state"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["state"]["persistentVolumeClaim"]["claimName"] == "loopctl-kube-state"
    assert volumes["definition"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert cli("export", "kube", "--to", "k8s", "--image", IMAGE,
               "--state-size", "lots").returncode == 2


def test_github_refuses_an_unpinned_install(cli: CLI) -> None:
    start(cli, "gh", "--every", "1h", "--command", agent_command())
    for spec in ("loopctl", "loopctl==1.0", "--index-url=x"):
        proc = cli("export", "gh", "--to", "github", f"--install={spec}")
        assert proc.returncode == 2, (spec, proc.stdout)
        assert "--install" in proc.stderr and proc.stdout == "", spec


def test_github_without_install_refuses_this_editable_checkout(cli: CLI) -> None:
    from importlib import metadata

    raw = metadata.distribution("loopctl").read_text("direct_url.json") or ""
    if "file:" not in raw:
        pytest.skip("loopctl is not installed from a local checkout here")
    start(cli, "gh", "--every", "1h", "--command", agent_command())
    proc = cli("export", "gh", "--to", "github")
    assert proc.returncode == 2, proc.stdout
    assert "--install" in proc.stderr and proc.stdout == ""


def test_github_workflow_carries_definition_and_prompt_in_base64(
        cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = tmp_path / "LOOP.md"
    prompt.write_text("fix what is red\n")
    monkeypatch.chdir(tmp_path)
    start(cli, "b64", "--prompt-file", str(prompt), "--every", "1h",
          "--command", agent_command())
    (text,) = export(cli, "b64", "github", tmp_path / "gh").values()
    steps = yaml.safe_load(text)["jobs"]["run"]["steps"]
    write = next(s for s in steps if s.get("name") == "Write the loop definition")
    assert base64.b64decode(write["env"]["PROMPT"]).decode() == "fix what is red\n"
    definition = yaml.safe_load(base64.b64decode(write["env"]["DEFINITION"]).decode())
    assert definition["loops"]["b64"]["cwd"] == "."
    assert 'chmod 0400 "$LOOPCTL_HOME/loops.yaml"' in write["run"]
    assert '"$LOOPCTL_HOME/loops.yaml"' in write["run"] and ".loopctl-prompt.md" in write["run"]
    uses = [s.get("uses", "") for s in steps]
    assert any(u.startswith("actions/cache/restore@") for u in uses)
    assert any(u.startswith("actions/cache/save@") for u in uses)


# -- the real validators ---------------------------------------------------------------


@pytest.fixture
def rich_loop(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A loop with everything an export must carry: agent preset, env names
    and values, a prompt file, a zone with DST and a path with odd bytes."""
    cwd = weird_dir(tmp_path, "rich")
    (cwd / "TASK.md").write_text("keep it green\n")
    monkeypatch.chdir(cwd)
    cli("start", "--name", "rich", "--cron", "15 6 * * 1-5", "--tz", "Europe/Berlin",
        "--agent", "claude", "--prompt-file", "TASK.md", "--cwd", str(cwd),
        "--env", f"API_TOKEN={SECRET}", "--env", "PLAIN", "--timeout", "25m", check=0)
    return "rich"


def test_k8s_export_passes_kubernetes_validate_strict(cli: CLI, tmp_path: Path,
                                                      rich_loop: str) -> None:
    validate = tool("kubernetes-validate")
    out = tmp_path / "k8s"
    export(cli, rich_loop, "k8s", out, "--state-size", "2Gi")
    (path,) = out.iterdir()
    docs = list(yaml.safe_load_all(path.read_text()))
    assert [d["kind"] for d in docs] == ["ConfigMap", "PersistentVolumeClaim", "CronJob"]
    assert docs[0]["data"]["prompt.md"] == "keep it green\n"
    proc = subprocess.run([validate, "--strict", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    for resource in ("configmap/loopctl-rich", "persistentvolumeclaim/loopctl-rich-state",
                     "cronjob/loopctl-rich"):
        assert f"passed for resource {resource} " in out, out


def test_github_export_passes_the_workflow_schema(cli: CLI, tmp_path: Path,
                                                  rich_loop: str) -> None:
    checker = tool("check-jsonschema")
    out = tmp_path / "gh"
    export(cli, rich_loop, "github", out)
    (path,) = out.iterdir()
    proc = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_systemd_export_passes_systemd_analyze_verify(cli: CLI, tmp_path: Path,
                                                      rich_loop: str) -> None:
    analyze = tool("systemd-analyze")
    out = tmp_path / "systemd"
    files = export(cli, rich_loop, "systemd", out)
    assert sorted(files) == ["loopctl-rich.service", "loopctl-rich.timer"]
    proc = subprocess.run([analyze, "verify", "--man=no", *(str(p) for p in
                                                           sorted(out.iterdir()))],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "Failed to parse" not in proc.stderr
    calendar = files["loopctl-rich.timer"].split("OnCalendar=", 1)[1].splitlines()[0]
    check = subprocess.run([analyze, "calendar", calendar], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    unit = parse_service(files["loopctl-rich.service"])
    assert unit["workdir"] == str(tmp_path / "rich 100% $HOME")
