"""Exports join the team store (DESIGN §21, issue 54 item 7): a loop exported
from a store-backed home runs on its target (played by the export
simulators of tests/export) against the same store, the DSN given only
through the target's secret store; the slot it takes is the team's, so a
local driver does not run it again, and the other way round."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import psycopg
import pytest
from export.simulator import GithubSimulator, K8sSimulator, Simulator
from export.support import INSTALL

from loopctl.domain.model import LoopDef
from store.machines import Machine, hourly

pytestmark = pytest.mark.real_processes

PASSWORD = "s3cret-PW-42"
HOUR = 3600


def with_password(dsn: str) -> str:
    """The DSN as a team's secret holds it (the test server trusts
    127.0.0.1, so the password is carried and ignored)."""
    return dsn.replace("loopctl@", f"loopctl:{PASSWORD}@", 1)


def laptop(tmp_path: Path, dsn: str, prompt: str = "true") -> Machine:
    home = Machine("laptop", tmp_path / "laptop")
    home.define(hourly(dsn, tmp_path, prompt))
    init = home.run("store", "init")
    assert init.returncode == 0, init.stderr
    return home


def export(home: Machine, target: str, out: Path, secret_dsn: str) -> str:
    """Export with LOOPCTL_STORE (holding a password) in the shell: the
    file(s) written, joined."""
    extra = ["--image", "registry.example/loop:1"] if target == "k8s" else ["--install",
                                                                            INSTALL]
    env = dict(home.env(), LOOPCTL_STORE=secret_dsn)
    proc = subprocess.run([sys.executable, "-m", "loopctl", "export", "hourly", "--to", target,
                           "-o", str(out), *extra], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "gh secret set LOOPCTL_STORE" in proc.stderr or target != "github", proc.stderr
    return "".join(p.read_text() for p in sorted(out.iterdir()))


def simulator(target: str, text: str, scratch: Path, secret_dsn: str) -> Simulator:
    secrets = {"LOOPCTL_STORE": secret_dsn}
    if target == "k8s":
        return K8sSimulator("hourly", scratch, manifest=text, secrets=secrets)
    return GithubSimulator("hourly", scratch, workflow=text, secrets=secrets)


def claims(dsn: str) -> list[tuple[str, str]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute("SELECT slot, machine FROM loopctl.slot_claims "
                            "ORDER BY slot").fetchall()


def tick_at(home: Machine, offset: int) -> dict[str, Any]:
    """`tick --wait --json` on the laptop, its clock `offset` seconds ahead
    (as the simulator's fires are)."""
    env = dict(home.env(), LOOPCTL_CLOCK_OFFSET=str(offset))
    proc = subprocess.run([sys.executable, "-m", "loopctl", "tick", "--wait", "--json"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


@pytest.mark.parametrize("target", ["k8s", "github"])
def test_an_exported_loop_takes_its_slots_in_the_team_store(tmp_path: Path, pg_dsn: str,
                                                            target: str) -> None:
    home = laptop(tmp_path, pg_dsn)
    secret_dsn = with_password(pg_dsn)
    text = export(home, target, tmp_path / "out", secret_dsn)
    machine = f"{target}:loopctl-hourly"
    sim = simulator(target, text, tmp_path / "sim", secret_dsn)
    try:
        # The target fires first (its clock an hour on): the slot is its own.
        first = sim.fire()
        assert first.returncode == 0, first.describe()
        assert [m for _, m in claims(pg_dsn)] == [machine], first.describe()
        # The laptop's tick for that same hour does not run it again: the
        # loop's state is the team's, so it knows the slot was served.
        tick = tick_at(home, HOUR)
        assert not tick["fired"], tick
        assert tick["skipped"] == [{"loop": "hourly", "reason": "not due"}], tick
        assert [m for _, m in claims(pg_dsn)] == [machine]
        # And the other way round: the laptop's tick fires the next hour first.
        tick = tick_at(home, 2 * HOUR)
        assert len(tick["fired"]) == 1, tick
        assert [m for _, m in claims(pg_dsn)] == [machine, "laptop"], tick
        second = sim.fire()
        assert second.returncode == 0, second.describe()
        assert "already ran" in second.stderr, second.describe()
        assert [m for _, m in claims(pg_dsn)] == [machine, "laptop"]
        assert len(sim.records()) == 1
    finally:
        if isinstance(sim, K8sSimulator):
            sim.cleanup()


@pytest.mark.parametrize("target", ["k8s", "github"])
def test_the_generated_files_hold_no_dsn(tmp_path: Path, pg_dsn: str, target: str) -> None:
    home = laptop(tmp_path, pg_dsn)
    text = export(home, target, tmp_path / "out", with_password(pg_dsn))
    host_port = pg_dsn.split("@", 1)[1].split("/", 1)[0]
    assert PASSWORD not in text
    assert host_port not in text and "postgresql://" not in text
    assert "LOOPCTL_STORE" in text  # by name, from the target's secret store


def test_systemd_reads_the_dsn_from_a_private_environment_file(tmp_path: Path,
                                                                pg_dsn: str) -> None:
    home = laptop(tmp_path, pg_dsn)
    out = tmp_path / "out"
    env = dict(home.env(), LOOPCTL_STORE=with_password(pg_dsn))
    proc = subprocess.run([sys.executable, "-m", "loopctl", "export", "hourly", "--to",
                           "systemd", "-o", str(out)], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    service = (out / "loopctl-hourly.service").read_text()
    assert PASSWORD not in service
    env_file = home.home / "loopctl" / "store.env"
    assert f"EnvironmentFile={env_file}\n" in service
    assert 'Environment="LOOPCTL_MACHINE=laptop"' in service
    assert oct(env_file.stat().st_mode & 0o777) == "0o600"
    assert env_file.read_text() == f'LOOPCTL_STORE="{with_password(pg_dsn)}"\n'


def test_exporting_needs_neither_psycopg_nor_the_server(tmp_path: Path) -> None:
    """Exports do not connect: with psycopg missing (a shadowing package
    that fails to import) and the store's port closed, export still works."""
    shadow = tmp_path / "shadow"
    (shadow / "psycopg").mkdir(parents=True)
    (shadow / "psycopg" / "__init__.py").write_text("raise ImportError('not here')\n")
    home = Machine("laptop", tmp_path / "laptop")
    home.define(hourly("postgresql://loopctl@127.0.0.1:1/loops", tmp_path, "true"))
    env = dict(home.env(), PYTHONPATH=str(shadow))
    proc = subprocess.run([sys.executable, "-m", "loopctl", "export", "hourly", "--to", "k8s",
                           "--image", "registry.example/loop:1"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "LOOPCTL_STORE" in proc.stdout
    ls = subprocess.run([sys.executable, "-m", "loopctl", "ls"], capture_output=True,
                        text=True, env=env, timeout=60)
    assert ls.returncode == 3  # the commands that act on loops still fail closed


def test_an_export_of_a_home_without_a_store_names_none(tmp_path: Path) -> None:
    home = Machine("laptop", tmp_path / "laptop")
    home.define(hourly("x", tmp_path, "true").replace("store: x\n", ""))
    env = {k: v for k, v in home.env().items() if k != "LOOPCTL_STORE"}
    proc = subprocess.run([sys.executable, "-m", "loopctl", "export", "hourly", "--to", "k8s",
                           "--image", "registry.example/loop:1"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "LOOPCTL_STORE" not in proc.stdout and "LOOPCTL_MACHINE" not in proc.stdout


def test_a_bad_store_is_refused_at_export(tmp_path: Path) -> None:
    home = Machine("laptop", tmp_path / "laptop")
    home.define(hourly("postgresql://u:pw@127.0.0.1:1/db", tmp_path, "true"))
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "loopctl", "export", "hourly", "--to", "k8s",
                           "--image", "registry.example/loop:1", "-o", str(out)],
                          capture_output=True, text=True, env=home.env(), timeout=60)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.count("\n") == 1 and "holds a password" in proc.stderr
    assert not out.exists()



def loaded(folder: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> LoopDef:
    """The loop `hourly` as a home in `folder` with this loops.yaml reads it."""
    from loopctl.storage.store import Store

    folder.mkdir(parents=True)
    (folder / "loops.yaml").write_text(text)
    monkeypatch.setenv("LOOPCTL_HOME", str(folder))
    return Store().read_defs().loops["hourly"]


ENTRY = """\
version: 1
loops:
  hourly:
    prompt_file: {prompt_file}
    agent: shell
    cron: {cron}
    cwd: {cwd}
    timeout: 1m
    env: {{TOKEN: abc, NAME_ONLY: null}}
    on_attention: echo attention
    notify: [json://example.invalid/hook]
    created_at: '2026-12-01T00:00:00Z'
"""


@pytest.mark.parametrize("target", ["k8s", "github"])
def test_a_home_and_its_export_agree_on_the_definition_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """What the export drops (cwd, created_at, hooks, notify URLs, env
    values, the prompt file's place) is what the digest leaves out; a real
    difference (another prompt, another schedule) still differs."""
    from loopctl.domain.team import definition_digest
    from loopctl.integrations.export.common import traveling_definition

    (tmp_path / "p.md").write_text("do the work")
    home = loaded(tmp_path / "home", ENTRY.format(prompt_file="p.md", cron="0 * * * *",
                                                  cwd=tmp_path), monkeypatch)
    where = "/loopctl/prompt.md" if target == "k8s" else "prompt.md"
    exported = loaded(tmp_path / "target", traveling_definition(home, where), monkeypatch)
    assert exported.cwd != home.cwd and exported.env != home.env
    assert definition_digest(exported) == definition_digest(home)
    for name, changed in [("cron", ENTRY.format(prompt_file="p.md", cron="5 * * * *",
                                                cwd=tmp_path)),
                          ("prompt", ENTRY.replace("prompt_file: {prompt_file}",
                                                   "prompt: another").format(
                                                       cron="0 * * * *", cwd=tmp_path))]:
        other = loaded(tmp_path / name, changed, monkeypatch)
        assert definition_digest(other) != definition_digest(home), name


def test_export_warns_of_machines_globs_and_a_crontab_without_the_store(
        tmp_path: Path) -> None:
    home = Machine("laptop", tmp_path / "laptop")
    home.define(hourly("postgresql://loopctl@127.0.0.1:1/loops", tmp_path, "true",
                       extra="    machines: [runner-*]\n"))
    env = dict(home.env(), LOOPCTL_STORE="postgresql://loopctl:pw@127.0.0.1:1/loops")
    k8s = subprocess.run([sys.executable, "-m", "loopctl", "export", "hourly", "--to", "k8s",
                          "--image", "registry.example/loop:1"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert "leave out this target's name in the store, k8s:loopctl-hourly" in k8s.stderr
    cron = subprocess.run([sys.executable, "-m", "loopctl", "export", "hourly", "--to",
                           "crontab"], capture_output=True, text=True, env=env, timeout=60)
    assert cron.returncode == 0 and "pw@" not in cron.stdout
    assert "does not carry LOOPCTL_STORE" in cron.stderr
