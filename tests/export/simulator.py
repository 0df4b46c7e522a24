"""Play the scheduler an export was written for (DESIGN §9, issue "G").

Each simulator extracts, from the exported file(s) alone, the command the
scheduler would run and the environment it would give it, then fires it:
every fire gets a fresh HOME and TMPDIR (and, for k8s and GitHub, a fresh
working directory); only the loop's state persists between fires, and the
definition is read-only (checked by content and inode, since root ignores
file modes).

No real `loopctl` executable is used: a shim directory first on PATH makes
`loopctl` mean `<this python> -m loopctl`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import yaml

from export.cron_readers import wall_times

TESTS = Path(__file__).resolve().parent.parent
FAKE_BIN = TESTS / "bin"
K8S_ROOT = "/loopctl"
K8S_USER_HOME = "/home/loopctl"  # the pod's HOME, an emptyDir beside /work
JOB_LABEL = "metadata.labels['job-name']"  # what the kubelet can give a pod of a Job
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def write_shim(folder: Path) -> Path:
    """A directory holding a `loopctl` that runs this interpreter's loopctl."""
    folder.mkdir(parents=True, exist_ok=True)
    shim = folder / "loopctl"
    shim.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} -m loopctl \"$@\"\n")
    shim.chmod(0o755)
    return folder


@dataclass
class Fire:
    """One scheduler fire: the loopctl step's result, or None when a guard
    step skipped it."""

    proc: subprocess.CompletedProcess[str] | None
    guard: subprocess.CompletedProcess[str] | None = None

    @property
    def fired_loopctl(self) -> bool:
        return self.proc is not None

    @property
    def returncode(self) -> int:
        assert self.proc is not None, "the guard skipped this fire"
        return self.proc.returncode

    @property
    def stderr(self) -> str:
        return self.proc.stderr if self.proc is not None else ""

    def describe(self) -> str:
        if self.proc is None:
            return f"guard skipped: {self.guard.stdout if self.guard else ''}"
        proc = self.proc
        return f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"


@dataclass
class Simulator:
    """What every scheduler simulation shares: a scratch area, a base
    environment (like cron's: almost empty) and extra variables a test
    injects into the scheduler's environment."""

    name: str
    scratch: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    fires: int = 0

    def __post_init__(self) -> None:
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.shim = write_shim(self.scratch / "shim")

    def base_env(self) -> dict[str, str]:
        """A fresh HOME and TMPDIR for this fire, PATH with the shim first."""
        self.fires += 1
        fire_dir = self.scratch / f"fire-{self.fires}"
        home, tmp = fire_dir / "home", fire_dir / "tmp"
        home.mkdir(parents=True)
        tmp.mkdir()
        path = os.pathsep.join([str(self.shim), str(FAKE_BIN), "/usr/local/bin", "/usr/bin",
                                "/bin"])
        env = {"PATH": path, "HOME": str(home), "TMPDIR": str(tmp), "LANG": "C.UTF-8",
               "LOGNAME": "loopctl-test", "SHELL": "/bin/sh", "NO_COLOR": "1",
               # Each fire an hour after the last, as a scheduler fires an
               # hourly loop: a fire serves its own slot (DESIGN §20).
               "LOOPCTL_CLOCK_OFFSET": str(self.fires * 3600)}
        env.update(self.extra_env)
        return env

    def fire_dir(self) -> Path:
        return self.scratch / f"fire-{self.fires}"

    # Overridden by each target.
    def fire(self) -> Fire:
        raise NotImplementedError

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run `loopctl ARGS` against the state the scheduler keeps."""
        raise NotImplementedError

    @property
    def state_dir(self) -> Path:
        raise NotImplementedError

    def records(self) -> list[dict[str, Any]]:
        folder = self.state_dir / "runs" / self.name
        if not folder.is_dir():
            return []
        return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))
                if not p.name.endswith(".decision.json")]

    def check_definition_untouched(self) -> None:
        """Hook: the definition must be as written before the first fire."""


def run(argv: list[str], env: dict[str, str], cwd: Path | str,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def file_identity(path: Path) -> tuple[bytes, int]:
    return path.read_bytes(), path.stat().st_ino


# -- crontab ---------------------------------------------------------------------------

CRON_TAIL = re.compile(r" # loopctl export \S+$")
# One shell word: quoted and plain pieces side by side (a `%` stands outside
# the quotes as `\%`, so `'a'\%'b'` is one word).
CRON_LOG = re.compile(r" >> (?:'[^']*'|[^\s'])+ 2>&1$")


def crontab_command(text: str) -> tuple[str, dict[str, str]]:
    """The shell command of the one job line, and the table's variables."""
    variables: dict[str, str] = {}
    jobs = []
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", line):
            key, _, value = line.partition("=")
            variables[key] = value
            continue
        jobs.append(line)
    assert len(jobs) == 1, text
    line = jobs[0]
    tail = CRON_TAIL.search(line)
    assert tail, f"no '# loopctl export NAME' tail: {line!r}"
    line = line[: tail.start()]
    log = CRON_LOG.search(line)
    assert log, f"no '>> LOG 2>&1' redirect: {line!r}"
    line = line[: log.start()]
    fields = line.split(None, 5)
    assert len(fields) == 6, line
    command = fields[5]
    assert re.search(r"(?<!\\)%", command) is None, f"unescaped % in a cron command: {command}"
    return command.replace("\\%", "%"), variables


@dataclass
class CrontabSimulator(Simulator):
    table: str = ""
    home: Path = Path()

    def __post_init__(self) -> None:
        super().__post_init__()
        self.command, self.variables = crontab_command(self.table)

    def fire(self) -> Fire:
        env = self.base_env()
        env.pop("TZ", None)
        # cron runs the line with /bin/sh in the user's home directory.
        return Fire(run(["sh", "-c", self.command], env, env["HOME"]))

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = self.base_env()
        env["LOOPCTL_HOME"] = str(self.home)
        return run([sys.executable, "-m", "loopctl", *args], env, env["HOME"])

    @property
    def state_dir(self) -> Path:
        return self.home / "state"


# -- systemd ---------------------------------------------------------------------------


def systemd_unescape(word: str, dollar: bool) -> str:
    word = word.replace("%%", "%")
    return word.replace("$$", "$") if dollar else word


def parse_service(text: str) -> dict[str, Any]:
    """ExecStart argv, Environment= pairs and WorkingDirectory=, unescaped
    as systemd reads them."""
    settings: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    (exec_start,) = settings["ExecStart"]
    argv = [systemd_unescape(w, dollar=True) for w in shlex.split(exec_start)]
    environment: dict[str, str] = {}
    for value in settings.get("Environment", []):
        for word in shlex.split(value):
            key, _, val = systemd_unescape(word, dollar=False).partition("=")
            environment[key] = val
    (workdir,) = settings.get("WorkingDirectory", ["~"])
    return {"argv": argv, "environment": environment,
            "workdir": systemd_unescape(workdir, dollar=False)}


@dataclass
class SystemdSimulator(Simulator):
    service: str = ""
    home: Path = Path()

    def __post_init__(self) -> None:
        super().__post_init__()
        self.unit = parse_service(self.service)

    def fire(self) -> Fire:
        env = self.base_env()
        env.update(self.unit["environment"])
        return Fire(run(self.unit["argv"], env, self.unit["workdir"]))

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = self.base_env()
        env.update(self.unit["environment"])
        return run([sys.executable, "-m", "loopctl", *args], env, self.unit["workdir"])

    @property
    def state_dir(self) -> Path:
        return Path(self.unit["environment"].get("LOOPCTL_HOME", self.home)) / "state"


# -- Kubernetes ------------------------------------------------------------------------


@dataclass
class K8sSimulator(Simulator):
    """The pod: `/loopctl` becomes a directory of ours with the ConfigMap's
    keys mounted read-only by subPath and the claim's `state` directory kept
    across fires; `/work` (an emptyDir) is fresh every fire."""

    manifest: str = ""
    secrets: dict[str, str] = field(default_factory=dict)
    # The Job a fire is, as the CronJob controller names it (CRONJOB-MINUTES);
    # None: the Job of the schedule's latest time at or before the fire.
    job_name: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        docs = list(yaml.safe_load_all(self.manifest))
        kinds = [d["kind"] for d in docs]
        assert kinds == ["ConfigMap", "PersistentVolumeClaim", "CronJob"], kinds
        self.config_map, self.claim, self.cron_job = docs
        pod = self.cron_job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        (self.container,) = pod["containers"]
        self.volumes = {v["name"]: v for v in pod["volumes"]}
        self.root = self.scratch / "pod-loopctl"
        self._build_root()

    def _mapped(self, path: str) -> Path:
        """A container path on our disk."""
        assert any(path == root or path.startswith(root + "/")
                   for root in (K8S_ROOT, "/work", K8S_USER_HOME)), path
        if path.startswith(K8S_ROOT):
            return Path(str(self.root) + path[len(K8S_ROOT):])
        if path.startswith(K8S_USER_HOME):
            return Path(str(self.fire_dir() / "pod-home") + path[len(K8S_USER_HOME):])
        return Path(str(self.fire_dir() / "work") + path[len("/work"):])

    def remap(self, text: str) -> str:
        """The ConfigMap's loops.yaml with its container paths on our disk.
        Only the fields the export sets to a container path (`prompt_file`)
        are mapped: a text replace of every `/loopctl/` also rewrote the
        agent's command when the checkout lives in a folder named loopctl."""
        doc = yaml.safe_load(text)
        for raw in doc["loops"].values():
            value = raw.get("prompt_file")
            if isinstance(value, str) and value.startswith(K8S_ROOT + "/"):
                raw["prompt_file"] = str(self._mapped(value))
        return yaml.safe_dump(doc, sort_keys=False)

    def _build_root(self) -> None:
        self.root.mkdir()
        data = self.config_map["data"]
        for mount in self.container["volumeMounts"]:
            volume = self.volumes[mount["name"]]
            if "configMap" in volume:
                assert volume["configMap"]["name"] == self.config_map["metadata"]["name"]
                assert mount.get("readOnly") is True, mount
                target = self._mapped(mount["mountPath"])
                # The definition names the prompt by its container path.
                text = data[mount["subPath"]]
                if mount["subPath"] == "loops.yaml":
                    text = self.remap(text)
                target.write_text(text)
                target.chmod(0o444)
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                assert claim == self.claim["metadata"]["name"]
                # The claim outlives every pod: this directory is kept.
                self.claim_mount = self._mapped(mount["mountPath"])
                self.claim_mount.mkdir()
            else:
                assert "emptyDir" in volume, volume
                assert mount["mountPath"] in ("/work", K8S_USER_HOME), mount
        self.root.chmod(0o555)
        self.definition = {p: file_identity(p) for p in self.root.iterdir() if p.is_file()}

    def check_definition_untouched(self) -> None:
        now = {p: file_identity(p) for p in self.root.iterdir() if p.is_file()}
        assert now == self.definition, "a fire wrote the read-only definition"
        assert stat.S_IMODE(self.root.stat().st_mode) == 0o555

    def env(self) -> tuple[dict[str, str], Path]:
        env = self.base_env()
        (self.fire_dir() / "work").mkdir()
        (self.fire_dir() / "pod-home").mkdir()  # each pod's emptyDir starts empty
        for item in self.container["env"]:
            if "value" in item:
                value = item["value"]
                if any(value == root or value.startswith(root + "/")
                       for root in (K8S_ROOT, "/work", K8S_USER_HOME)):
                    value = str(self._mapped(value))
                env[item["name"]] = value
            elif "fieldRef" in item["valueFrom"]:
                # The downward API: only the Job's name, which every pod has.
                assert item["valueFrom"]["fieldRef"] == {"fieldPath": JOB_LABEL}, item
                env[item["name"]] = self.job_name or self.scheduled_job(env)
            else:
                ref = item["valueFrom"]["secretKeyRef"]
                assert ref["name"] == f"loopctl-{self.name}", ref
                # A missing key stops the pod (CreateContainerConfigError).
                assert ref["key"] in self.secrets, f"no secret key {ref['key']}"
                env[item["name"]] = self.secrets[ref["key"]]
        return env, self._mapped(self.container["workingDir"])

    def scheduled_job(self, env: dict[str, str]) -> str:
        """CRONJOB-MINUTES for the latest time of the CronJob's schedule at
        or before this fire's clock, read as robfig/cron reads it in the
        CronJob's timeZone (none: the controller's, this machine's)."""
        spec = self.cron_job["spec"]
        now = time.time() + float(env.get("LOOPCTL_CLOCK_OFFSET", "0"))
        zone = ZoneInfo(spec["timeZone"]) if spec.get("timeZone") else None
        found = None
        for back in (7200, 2 * 86400, 40 * 86400, 400 * 86400):
            after = datetime.fromtimestamp(now - back, zone).replace(tzinfo=None)
            for wall in wall_times(spec["schedule"], "robfig", after):
                at = wall.replace(tzinfo=zone).timestamp() if zone else wall.timestamp()
                if at > now:
                    break
                found = at
            if found is not None:
                return f"{self.cron_job['metadata']['name']}-{int(found) // 60}"
        raise AssertionError(f"no time of {spec['schedule']!r} in the last 400 days")

    def fire(self) -> Fire:
        env, cwd = self.env()
        argv = [expand(word, env) for word in self.container["command"]]
        assert argv[0] == "loopctl", argv
        argv[:1] = [sys.executable, "-m", "loopctl"]
        return Fire(run(argv, env, cwd))

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        env, cwd = self.env()
        return run([sys.executable, "-m", "loopctl", *args], env, cwd)

    @property
    def state_dir(self) -> Path:
        return self.claim_mount

    def cleanup(self) -> None:
        self.root.chmod(0o755)


def expand(word: str, env: dict[str, str]) -> str:
    """$(VAR) in a container's command, as the kubelet expands it from the
    container's env (an undefined one stays as written)."""
    assert "$$(" not in word, word
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: env.get(m.group(1), m.group(0)), word)


# -- GitHub Actions --------------------------------------------------------------------


@dataclass
class GithubSimulator(Simulator):
    """A runner per fire: fresh runner.temp and checkout; the cache restored
    before and saved after, from the paths the workflow's cache steps name."""

    workflow: str = ""
    secrets: dict[str, str] = field(default_factory=dict)
    schedule: str | None = None     # github.event.schedule (default: the first line)
    event: str = "schedule"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.flow = yaml.safe_load(self.workflow)
        triggers = self.flow[True] if True in self.flow else self.flow["on"]
        self.crons = [c["cron"] for c in triggers["schedule"]]
        self.job = self.flow["jobs"]["run"]
        steps = self.job["steps"]
        self.write_step = next(s for s in steps if s.get("name") == "Write the loop definition")
        self.guard_step = next((s for s in steps if s.get("id") == "zone"), None)
        self.run_step = next(s for s in steps if "loopctl run" in s.get("run", ""))
        self.restore = next(s for s in steps
                            if s.get("uses", "").startswith("actions/cache/restore@"))
        self.save = next(s for s in steps if s.get("uses", "").startswith("actions/cache/save@"))
        # Steps that set the environment of the later ones ($GITHUB_ENV).
        self.env_steps = [s for s in steps if "GITHUB_ENV" in s.get("run", "")]
        self.cache = self.scratch / "cache"     # the latest saved cache entry
        self.run_id = 1000

    def expression(self, expr: str, temp: Path) -> str:
        if expr == "runner.temp":
            return str(temp)
        if expr.startswith("secrets."):
            return self.secrets.get(expr[len("secrets."):], "")   # unset secrets are ""
        if expr == "github.event_name":
            return self.event
        if expr == "github.event.schedule":
            return self.schedule if self.schedule is not None else self.crons[0]
        if expr in ("github.run_id", "github.run_attempt"):
            return str(self.run_id) if expr == "github.run_id" else "1"
        raise AssertionError(f"unexpected expression in the workflow: ${{{{ {expr} }}}}")

    def substitute(self, text: str, temp: Path) -> str:
        return EXPRESSION.sub(lambda m: self.expression(m.group(1), temp), text)

    def step_env(self, step: dict[str, Any], env: dict[str, str], temp: Path) -> dict[str, str]:
        full = dict(env)
        full.update({k: self.substitute(str(v), temp) for k, v in step.get("env", {}).items()})
        return full

    def bash(self, step: dict[str, Any], env: dict[str, str], temp: Path,
             cwd: Path) -> subprocess.CompletedProcess[str]:
        script = self.substitute(step["run"], temp)
        # GitHub's `shell: bash` on Linux runners.
        return run(["bash", "--noprofile", "--norc", "-eo", "pipefail", "-c", script],
                   self.step_env(step, env, temp), cwd)

    def runner(self) -> tuple[dict[str, str], Path, Path]:
        env = self.base_env()
        self.run_id += 1
        temp = self.fire_dir() / "runner-temp"
        workspace = self.fire_dir() / "workspace"
        temp.mkdir()
        workspace.mkdir()
        output = temp / "github-output"
        output.touch()
        github_env = temp / "github-env"
        github_env.touch()
        env.update(GITHUB_OUTPUT=str(output), GITHUB_WORKSPACE=str(workspace), CI="true",
                   GITHUB_ACTIONS="true", RUNNER_TEMP=str(temp), GITHUB_ENV=str(github_env))
        env.update({k: self.substitute(str(v), temp)
                    for k, v in self.job.get("env", {}).items()})
        for step in self.env_steps:
            proc = self.bash(step, env, temp, workspace)
            assert proc.returncode == 0, proc.stderr
        lines = github_env.read_text().splitlines()
        env.update(line.split("=", 1) for line in lines if "=" in line)
        return env, temp, workspace

    def _restore(self, env: dict[str, str], temp: Path) -> Path:
        path = Path(self.substitute(self.restore["with"]["path"], temp))
        home = Path(env["LOOPCTL_HOME"])
        assert path == home / "state", "the cache does not hold the loop's state"
        assert self.substitute(self.save["with"]["path"], temp) == str(path)
        if self.cache.is_dir():
            shutil.copytree(self.cache, path)
        return path

    def _save(self, temp: Path) -> None:
        path = Path(self.substitute(self.save["with"]["path"], temp))
        if path.is_dir():
            if self.cache.exists():
                shutil.rmtree(self.cache)
            shutil.copytree(path, self.cache, symlinks=True)

    def write_definition(self, env: dict[str, str], temp: Path, workspace: Path) -> None:
        proc = self.bash(self.write_step, env, temp, workspace)
        assert proc.returncode == 0, proc.stderr
        self.definition_file = Path(env["LOOPCTL_HOME"]) / "loops.yaml"
        self.definition_id = file_identity(self.definition_file)

    def guard(self, env: dict[str, str], temp: Path,
              workspace: Path) -> subprocess.CompletedProcess[str]:
        assert self.guard_step is not None
        return self.bash(self.guard_step, env, temp, workspace)

    def outputs(self, temp: Path) -> dict[str, str]:
        lines = (temp / "github-output").read_text().splitlines()
        return dict(line.split("=", 1) for line in lines if "=" in line)

    def fire(self) -> Fire:
        env, temp, workspace = self.runner()
        self._restore(env, temp)
        try:
            self.write_definition(env, temp, workspace)
            guard = None
            condition = self.run_step.get("if")
            if self.guard_step is not None:
                guard = self.guard(env, temp, workspace)
                assert guard.returncode == 0, guard.stderr
                assert condition == "steps.zone.outputs.fire == 'true'", condition
                if self.outputs(temp).get("fire") != "true":
                    return Fire(None, guard)
            else:
                assert condition is None, condition
            proc = self.bash(self.run_step, env, temp, workspace)
            assert file_identity(self.definition_file) == self.definition_id, \
                "the run wrote the read-only definition"
            return Fire(proc, guard)
        finally:
            self._save(temp)   # `if: always()`

    def admin(self, *args: str) -> subprocess.CompletedProcess[str]:
        env, temp, workspace = self.runner()
        self._restore(env, temp)
        try:
            self.write_definition(env, temp, workspace)
            return run([sys.executable, "-m", "loopctl", *args], env, workspace)
        finally:
            self._save(temp)

    @property
    def state_dir(self) -> Path:
        return self.cache
