"""`loopctl export`: a hand-off keeps the loop's guarantees (DESIGN §9, issue "G").

The simulators in tests/handoff/ play each scheduler from the exported file
alone: they extract the command it would run and fire it repeatedly with a
fresh HOME, TMPDIR and working directory, keeping only the loop's state and a
read-only definition, then count the run records.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import shlex
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from handoff.simulator import (
    EXPRESSION,
    FAKE_BIN,
    CrontabSimulator,
    Fire,
    GithubSimulator,
    K8sSimulator,
    Simulator,
    SystemdSimulator,
    parse_service,
    write_shim,
)

from conftest import CLI, agent_command, tool, wait_for

TARGETS = ["crontab", "systemd", "k8s", "github"]
IMAGE = "registry.example/loopctl-agent:1.0"
INSTALL = "loopctl @ git+https://github.com/owner/loopctl@v1.0.0"
TARGET_ARGS = {"k8s": ["--image", IMAGE], "github": ["--install", INSTALL]}
SECRET = "sk-live-SECRET-VALUE-123"


def start(cli: CLI, name: str, *args: str, prompt: str = "do the work",
          env: dict[str, str] | None = None) -> None:
    if "--prompt-file" in args:
        cli("start", "--name", name, *args, env=env, check=0)
    else:
        cli("start", prompt, "--name", name, *args, env=env, check=0)


def export(cli: CLI, name: str, target: str, out: Path, *extra: str,
           env: dict[str, str] | None = None) -> dict[str, str]:
    """Export with -o; the files written, by name."""
    proc = cli("export", name, "--to", target, "-o", str(out), *TARGET_ARGS.get(target, []),
               *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return {p.name: p.read_text() for p in sorted(out.iterdir())}


SimFactory = Callable[..., Simulator]


@pytest.fixture
def make_sim(cli: CLI, tmp_path: Path) -> Iterator[SimFactory]:
    """Export NAME to TARGET and return the scheduler simulator for it."""
    made: list[Simulator] = []

    def build(name: str, target: str, secrets: dict[str, str] | None = None,
              extra_env: dict[str, str] | None = None, home: Path | None = None,
              **kwargs: Any) -> Simulator:
        index = len(made)
        # Exported from a shell where the agents are on PATH, as a user would.
        env = {"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"}
        if home:
            env["LOOPCTL_HOME"] = str(home)
        files = export(cli, name, target, tmp_path / f"export-{index}", env=env)
        scratch = tmp_path / f"sim-{index}"
        secrets = {"ANTHROPIC_API_KEY": "test-anthropic-key", **(secrets or {})}
        extra = extra_env or {}
        sim: Simulator
        if target == "crontab":
            sim = CrontabSimulator(name, scratch, extra, table=files[f"{name}.crontab"],
                                   home=home or cli.home)
        elif target == "systemd":
            sim = SystemdSimulator(name, scratch, extra,
                                   service=files[f"loopctl-{name}.service"],
                                   home=home or cli.home)
        elif target == "k8s":
            (manifest,) = files.values()
            sim = K8sSimulator(name, scratch, extra, manifest=manifest, secrets=secrets)
        else:
            (workflow,) = files.values()
            sim = GithubSimulator(name, scratch, extra, workflow=workflow, secrets=secrets,
                                  **kwargs)
        made.append(sim)
        return sim

    yield build
    for sim in made:
        if isinstance(sim, K8sSimulator):
            sim.cleanup()


def fire_all(sim: Simulator, times: int) -> list[Fire]:
    fires = [sim.fire() for _ in range(times)]
    for fire in fires:
        assert fire.fired_loopctl, fire.describe()
    sim.check_definition_untouched()
    return fires


def assert_skipped(fire: Fire, name: str, why: str = "") -> None:
    """A skipped scheduled fire: exit 0 and one line saying why."""
    assert fire.returncode == 0, fire.describe()
    lines = fire.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"loopctl: not firing {name}: "), \
        fire.describe()
    assert why in lines[0], fire.describe()


# -- 1. the scheduler simulator --------------------------------------------------------


@pytest.mark.parametrize("target", TARGETS)
def test_max_runs_bounds_a_scheduler_that_keeps_firing(cli: CLI, make_sim: SimFactory,
                                                      target: str) -> None:
    start(cli, "capped", "--every", "1h", "--max-runs", "2",
          "--command", agent_command("--print", "worked"))
    sim = make_sim("capped", target)
    fires = fire_all(sim, 4)
    assert [f.returncode for f in fires[:2]] == [0, 0], [f.describe() for f in fires]
    for fire in fires[2:]:
        assert_skipped(fire, "capped", "iteration_limit")
    records = sim.records()
    assert len(records) == 2
    assert {r["trigger"] for r in records} == {"schedule"}
    assert {r["outcome"] for r in records} == {"ok"}


@pytest.mark.parametrize("target", TARGETS)
def test_the_last_run_max_runs_allows_still_fires(cli: CLI, make_sim: SimFactory,
                                                  target: str) -> None:
    """`--max-runs 1` on a loop that is due at the first fire (as a fresh
    loop is): `tick` would run it once, so the scheduled entry point must too,
    and leave no claimed run behind."""
    start(cli, "once", "--every", "1h", "--max-runs", "1",
          "--command", agent_command("--print", "worked"))
    sim = make_sim("once", target)
    fires = fire_all(sim, 2)
    assert fires[0].returncode == 0 and "not firing" not in fires[0].stderr, \
        fires[0].describe()
    for fire in fires[1:]:
        assert_skipped(fire, "once", "iteration_limit")
    assert [(r["outcome"], r["trigger"]) for r in sim.records()] == [("ok", "schedule")]


@pytest.mark.parametrize("target", TARGETS)
def test_a_completed_loop_stops_firing(cli: CLI, make_sim: SimFactory, target: str) -> None:
    start(cli, "done", "--every", "1h", "--command", agent_command("--decide", "complete"))
    sim = make_sim("done", target)
    fires = fire_all(sim, 3)
    assert fires[0].returncode == 0, fires[0].describe()
    for fire in fires[1:]:
        assert_skipped(fire, "done", "completed")
    assert len(sim.records()) == 1


@pytest.mark.parametrize("target", TARGETS)
def test_a_paused_loop_does_not_fire(cli: CLI, make_sim: SimFactory, target: str) -> None:
    start(cli, "held", "--every", "1h", "--command", agent_command("--print", "worked"))
    if target in ("crontab", "systemd"):
        cli("pause", "held", check=0)      # the state the local scheduler will read
        sim = make_sim("held", target)
        before = 0
    else:
        sim = make_sim("held", target)
        assert sim.fire().returncode == 0   # the first fire creates the state there
        before = len(sim.records())
        assert before == 1
        paused = sim.admin("pause", "held")  # the definition is read-only: only state changes
        assert paused.returncode == 0, paused.stderr
    fires = fire_all(sim, 2)
    for fire in fires:
        assert_skipped(fire, "held", "paused")
    assert len(sim.records()) == before


@pytest.mark.parametrize("target", TARGETS)
def test_failure_limit_stops_a_scheduler_that_keeps_firing(cli: CLI, make_sim: SimFactory,
                                                          target: str) -> None:
    start(cli, "broken", "--every", "1h", "--max-failures", "2",
          "--command", agent_command("--exit", "1"))
    sim = make_sim("broken", target)
    fires = fire_all(sim, 3)
    assert all(f.returncode != 0 for f in fires[:2]), [f.describe() for f in fires]
    for fire in fires[2:]:
        assert_skipped(fire, "broken", "failure_limit")
    records = sim.records()
    assert len(records) == 2 and {r["outcome"] for r in records} == {"failed"}


@pytest.mark.parametrize("target", TARGETS)
def test_spent_budget_stops_a_scheduler_that_keeps_firing(cli: CLI, make_sim: SimFactory,
                                                         target: str) -> None:
    local = target in ("crontab", "systemd")
    # Values stay home: crontab/systemd read FAKE_COST from the local store; on
    # k8s/github only its name travels and the target's secret store has it.
    cost = "--env=FAKE_COST=0.6" if local else "--env=FAKE_COST"
    start(cli, "spender", "--every", "1h", "--agent", "claude", "--budget-usd", "1", cost,
          env={"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"})
    sim = make_sim("spender", target, secrets={"FAKE_COST": "0.6"})
    fires = fire_all(sim, 3)
    assert [f.returncode for f in fires[:2]] == [0, 0], [f.describe() for f in fires]
    for fire in fires[2:]:
        assert_skipped(fire, "spender", "budget_limit")
    records = sim.records()
    assert len(records) == 2
    assert [r["cost_usd"] for r in records] == [0.6, 0.6]


@pytest.mark.parametrize("target", ["crontab", "systemd"])
def test_local_exports_find_the_agent_under_the_schedulers_own_path(
        cli: CLI, make_sim: SimFactory, target: str) -> None:
    """cron runs jobs with PATH=/usr/bin:/bin, a systemd user manager with
    its own short PATH: an agent found at export time (as `loopctl cron
    install` finds it) must still be found when the scheduler fires."""
    start(cli, "pathy", "--every", "1h", "--agent", "claude",
          env={"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"})
    system = "/usr/bin:/bin" if target == "crontab" else \
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    sim = make_sim("pathy", target, extra_env={"PATH": system})
    fire = sim.fire()
    assert fire.returncode == 0, fire.describe()
    assert [r["outcome"] for r in sim.records()] == ["ok"], fire.describe()


def test_scheduled_run_exits_75_when_a_run_is_in_flight(cli: CLI, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    start(cli, "busy", "--every", "1h", "--command", agent_command("--wait-for", str(gate)))
    first = cli.popen("run", "busy", "--scheduled", stderr=subprocess.PIPE)
    try:
        wait_for(lambda: (cli.state_dir / "state.json").exists()
                 and cli.state()["loops"]["busy"].get("run"))
        second = cli("run", "busy", "--scheduled")
        assert second.returncode == 75, second.stderr
        assert "in flight" in second.stderr
    finally:
        gate.touch()
        first.communicate(timeout=30)
    assert first.returncode == 0
    assert len(cli.records("busy")) == 1


def test_scheduled_run_exits_75_while_rate_limited(cli: CLI) -> None:
    start(cli, "limited", "--every", "1h", "--agent", "claude",
          "--env", "FAKE_RESET_IN=3600", env={"PATH": f"{FAKE_BIN}{os.pathsep}"
                                                     f"{os.environ['PATH']}"})
    env = {"PATH": f"{FAKE_BIN}{os.pathsep}{os.environ['PATH']}"}
    first = cli("run", "limited", "--scheduled", env=env)
    assert [r["outcome"] for r in cli.records("limited")] == ["deferred"], first.stderr
    again = cli("run", "limited", "--scheduled", env=env)
    assert again.returncode == 75, (again.stdout, again.stderr)
    assert "rate-limited" in again.stderr
    assert len(cli.records("limited")) == 1


@pytest.mark.parametrize("how", ["pause", "complete"])
def test_manual_run_refuses_an_inactive_loop_unless_forced(cli: CLI, how: str) -> None:
    if how == "pause":
        start(cli, "idle", "--every", "1h", "--command", agent_command("--print", "x"))
        cli("pause", "idle", check=0)
    else:
        start(cli, "idle", "--every", "1h", "--command", agent_command("--decide", "complete"))
        cli("run", "idle", "--scheduled", check=0)
    before = len(cli.records("idle"))
    refused = cli("run", "idle")
    assert refused.returncode == 2, refused.stderr
    word = "paused" if how == "pause" else "completed"
    assert word in refused.stderr
    assert "loopctl run idle --force" in refused.stderr
    assert len(cli.records("idle")) == before
    forced = cli("run", "idle", "--force")
    assert forced.returncode == 0, forced.stderr
    records = cli.records("idle")
    assert len(records) == before + 1 and records[-1]["trigger"] == "manual"


# -- 2. secrets never travel -----------------------------------------------------------


def b64_decoded(text: str) -> list[str]:
    """Every long base64 token in `text`, decoded (invalid ones skipped)."""
    out = []
    for token in re.findall(r"[A-Za-z0-9+/]{16,}={0,2}", text):
        try:
            out.append(base64.b64decode(token, validate=True).decode("utf-8", "replace"))
        except (binascii.Error, ValueError):
            continue
    return out


@pytest.fixture
def secret_loop(cli: CLI, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("PLAIN", raising=False)
    monkeypatch.delenv("API_TOKEN", raising=False)
    start(cli, "secretive", "--every", "1h", "--agent", "claude",
          "--env", f"API_TOKEN={SECRET}", "--env", "PLAIN")
    return "secretive"


@pytest.mark.parametrize("target", TARGETS)
def test_env_values_never_enter_an_export(cli: CLI, tmp_path: Path, secret_loop: str,
                                          target: str) -> None:
    name = secret_loop
    extra = TARGET_ARGS.get(target, [])
    texts: list[str] = []
    for mode in ("stdout", "dir", "json"):
        args = ["export", name, "--to", target, *extra]
        out = tmp_path / f"out-{mode}"
        if "dir" in mode:
            args += ["-o", str(out)]
        if "json" in mode:
            args.append("--json")
        proc = cli(*args)
        assert proc.returncode == 0, proc.stderr
        texts += [proc.stdout, proc.stderr]
        if "dir" in mode:
            texts += [p.read_text() for p in out.iterdir()]
    everything = "\n".join(texts)
    if target == "github":
        decoded = b64_decoded(everything)
        assert decoded, "expected the definition in base64"
        everything += "\n".join(decoded)
        assert any("API_TOKEN" in d for d in decoded)
    assert SECRET not in everything
    assert "SECRET-VALUE" not in everything
    text = "\n".join(p.read_text() for p in (tmp_path / "out-dir").iterdir())
    expected = {"API_TOKEN", "PLAIN", "ANTHROPIC_API_KEY"}
    if target == "k8s":
        docs = list(yaml.safe_load_all(text))
        container = docs[2]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
        refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]
                if "valueFrom" in e}
        assert set(refs) == expected
        assert all(r["name"] == f"loopctl-{name}" and r["key"] == k for k, r in refs.items())
        travelling = yaml.safe_load(docs[0]["data"]["loops.yaml"])
        assert travelling["loops"][name]["env"] == {"API_TOKEN": None, "PLAIN": None}
    elif target == "github":
        job = yaml.safe_load(text)["jobs"]["run"]
        for key in expected:
            assert job["env"][key] == "${{ secrets." + key + " }}"
    else:
        # Local targets read the values from the local store, which keeps them.
        assert "secretive" in text


def test_secrets_file_holds_the_values_privately(cli: CLI, tmp_path: Path,
                                                 secret_loop: str) -> None:
    path = tmp_path / "secret.env"
    proc = cli("export", secret_loop, "--to", "k8s", "--image", IMAGE, "--secrets-file",
               str(path), env={"PLAIN": "plain-from-env"})
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    lines = path.read_text().splitlines()
    assert f"API_TOKEN={SECRET}" in lines
    assert "PLAIN=plain-from-env" in lines
    assert SECRET not in proc.stdout + proc.stderr
    assert "plain-from-env" not in proc.stdout + proc.stderr
    assert any(line.startswith("next: kubectl create secret generic loopctl-secretive")
               for line in proc.stderr.splitlines())

    bare = tmp_path / "bare.env"
    proc = cli("export", secret_loop, "--to", "k8s", "--image", IMAGE, "--secrets-file",
               str(bare))
    assert proc.returncode == 0, proc.stderr
    assert stat.S_IMODE(bare.stat().st_mode) == 0o600
    assert not any(line.startswith("PLAIN=") for line in bare.read_text().splitlines())
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert any("PLAIN" in w for w in warnings), proc.stderr


# -- 3. user text is data --------------------------------------------------------------

HOSTILE_PROMPT = (
    "LOOPCTL_EOF\n"
    "EOF\n"
    'echo PWNED > "$MARK"\n'
    '$(touch "$MARK2")\n'
    '`touch "$MARK3"`\n'
    "${{ github.token }}\n"
    "'; touch \"$MARK\" #\n"
    "caf\u00e9 \t tab and trailing space \n"
    "no final newline"
)
ALLOWED_EXPRESSIONS = {"runner.temp", "github.run_id", "github.run_attempt",
                       "github.event_name", "github.event.schedule"}


def test_hostile_prompt_travels_as_data(cli: CLI, tmp_path: Path, make_sim: SimFactory,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = tmp_path / "PROMPT.md"
    prompt.write_bytes(HOSTILE_PROMPT.encode())
    monkeypatch.chdir(tmp_path)
    start(cli, "hostile", "--prompt-file", str(prompt), "--cron", "30 9 * * 1-5",
          "--tz", "Europe/Berlin", "--agent", "claude")
    marks = {key: tmp_path / f"marker-{key}" for key in ("MARK", "MARK2", "MARK3")}
    sim = make_sim("hostile", "github", extra_env={k: str(v) for k, v in marks.items()})
    assert isinstance(sim, GithubSimulator)

    raw = sim.workflow
    for line in HOSTILE_PROMPT.splitlines():
        if line.strip():
            assert line.strip() not in raw, line
    found = EXPRESSION.findall(raw)
    assert raw.count("${{") == len(found)
    allowed = ALLOWED_EXPRESSIONS | {"secrets.ANTHROPIC_API_KEY"}
    assert set(found) <= allowed, set(found) - allowed

    env, temp, workspace = sim.runner()
    sim.write_definition(env, temp, workspace)
    assert sim.guard_step is not None
    guard = sim.guard(env, temp, workspace)
    assert guard.returncode == 0, guard.stderr
    assert sim.outputs(temp)["fire"] in ("true", "false")
    assert (workspace / ".loopctl-prompt.md").read_bytes() == HOSTILE_PROMPT.encode()
    definition = yaml.safe_load((Path(env["LOOPCTL_HOME"]) / "loops.yaml").read_text())
    assert definition["loops"]["hostile"]["prompt_file"] == ".loopctl-prompt.md"
    for key, mark in marks.items():
        assert not mark.exists(), f"the prompt ran as a command ({key})"

    (manifest,) = export(cli, "hostile", "k8s", tmp_path / "k8s").values()
    config_map = next(yaml.safe_load_all(manifest))
    assert config_map["data"]["prompt.md"] == HOSTILE_PROMPT
    assert "PWNED" not in yaml.safe_load(config_map["data"]["loops.yaml"]).__repr__()
    for doc in list(yaml.safe_load_all(manifest))[1:]:
        assert "PWNED" not in repr(doc) and "${{" not in repr(doc)


def weird_dir(tmp_path: Path, label: str) -> Path:
    path = tmp_path / f"{label} 100% $HOME"
    path.mkdir()
    return path


@pytest.mark.parametrize("target", ["systemd", "crontab"])
def test_paths_with_spaces_and_percent_survive_the_unit(cli: CLI, tmp_path: Path,
                                                        make_sim: SimFactory,
                                                        target: str) -> None:
    cwd = weird_dir(tmp_path, "work dir")
    home = tmp_path / "loop home 50% $USER"
    env = {"LOOPCTL_HOME": str(home)}
    cli("start", "odd paths", "--name", "oddpaths", "--every", "1h", "--cwd", str(cwd),
        "--command", agent_command("--print", "in the odd dir"), env=env, check=0)
    out = tmp_path / "units"
    files = export(cli, "oddpaths", target, out, env=env)
    if target == "systemd":
        service = files["loopctl-oddpaths.service"]
        unit = parse_service(service)
        assert unit["workdir"] == str(cwd)
        assert unit["environment"]["LOOPCTL_HOME"] == str(home)
        assert unit["argv"] == [sys.executable, "-m", "loopctl", "run", "oddpaths",
                                "--scheduled"]
        analyze = tool("systemd-analyze")
        proc = subprocess.run([analyze, "verify", "--man=no",
                               *(str(out / f) for f in sorted(files))],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        assert "Failed to parse" not in proc.stderr and "Invalid" not in proc.stderr
    sim = make_sim("oddpaths", target, home=home)
    fire = sim.fire()
    assert fire.returncode == 0, fire.describe()
    records = sim.records()
    assert len(records) == 1 and records[0]["outcome"] == "ok"
    assert (home / "state" / "runs" / "oddpaths").is_dir()


# -- 4. time zones ---------------------------------------------------------------------


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
        assert pod["containers"][0]["command"] == ["loopctl", "run", "entry", "--scheduled"]
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


# -- 5. the real validators ------------------------------------------------------------


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


# -- two loops in one place ------------------------------------------------------------


def test_github_cache_of_one_loop_is_never_restored_for_another(cli: CLI,
                                                                tmp_path: Path) -> None:
    """Two workflows in one repository share its cache: `ci` must not restore
    the state `ci-nightly` saved (restore-keys match by prefix)."""
    saves: dict[str, str] = {}
    restores: dict[str, list[str]] = {}
    for name in ("ci", "ci-nightly"):
        start(cli, name, "--every", "1h", "--command", agent_command())
        (text,) = export(cli, name, "github", tmp_path / name).values()
        steps = yaml.safe_load(text)["jobs"]["run"]["steps"]
        restore = next(s for s in steps if s.get("uses", "").startswith("actions/cache/restore"))
        save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save"))
        saves[name] = save["with"]["key"].replace("${{ github.run_id }}", "42") \
            .replace("${{ github.run_attempt }}", "1")
        restores[name] = [restore["with"]["key"].replace("${{ github.run_id }}", "43"),
                          *str(restore["with"].get("restore-keys", "")).split()]
    for name, other in (("ci", "ci-nightly"), ("ci-nightly", "ci")):
        for key in restores[name]:
            assert not saves[other].startswith(key), (name, key, saves[other])


def test_k8s_objects_of_distinct_loops_do_not_collide(cli: CLI, tmp_path: Path) -> None:
    """`a_b` and `a-b` are different loops: they must not share a ConfigMap,
    a state claim, a CronJob or a Secret."""
    seen: dict[str, set[str]] = {}
    for name in ("a_b", "a-b"):
        start(cli, name, "--every", "1h", "--command", agent_command(), "--env", "TOKEN")
        (text,) = export(cli, name, "k8s", tmp_path / name).values()
        docs = list(yaml.safe_load_all(text))
        pod = docs[2]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        refs = {e["valueFrom"]["secretKeyRef"]["name"] for e in pod["containers"][0]["env"]
                if "valueFrom" in e}
        seen[name] = {f"{d['kind']}/{d['metadata']['name']}" for d in docs} | \
            {f"Secret/{r}" for r in refs}
    assert not seen["a_b"] & seen["a-b"], seen["a_b"] & seen["a-b"]
