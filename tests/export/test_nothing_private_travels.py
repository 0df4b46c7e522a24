"""`loopctl export` carries nothing it must not (DESIGN §9, issue "G"): env
values and secrets never enter an export (only their names travel; a
`--secrets-file` holds the values privately), a hostile prompt travels as data
and never runs, paths with spaces and `%` survive the unit, and two loops never
share a GitHub cache key or a Kubernetes object.
"""

from __future__ import annotations

import base64
import binascii
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import CLI, agent_command, tool
from export.simulator import EXPRESSION, GithubSimulator, parse_service
from export.support import (
    IMAGE,
    SECRET,
    TARGET_ARGS,
    TARGETS,
    SimFactory,
    export,
    make_sim_fixture,  # noqa: F401 - the make_sim fixture
    start,
    weird_dir,
)

# -- secrets never travel --------------------------------------------------------------


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
                if "secretKeyRef" in e.get("valueFrom", {})}
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


# -- user text is data -----------------------------------------------------------------

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
                if "secretKeyRef" in e.get("valueFrom", {})}
        seen[name] = {f"{d['kind']}/{d['metadata']['name']}" for d in docs} | \
            {f"Secret/{r}" for r in refs}
    assert not seen["a_b"] & seen["a-b"], seen["a_b"] & seen["a-b"]
