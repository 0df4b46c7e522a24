"""What every export target shares: the request (`Target`), the result
(`Export`), the loop as it travels, and the command each target runs."""

from __future__ import annotations

import shlex
import sys

from loopctl.domain.errors import UsageError
from loopctl.domain.model import LoopDef
from loopctl.fast.data_class import factory, record

TARGETS = ("crontab", "systemd", "k8s", "github")


@record
class Target:
    """Where the export goes and what it needs from the user."""

    name: str
    home: str | None = None        # LOOPCTL_HOME for local targets
    home_env: dict[str, str] = factory(dict)  # local targets: paths.home_env()
    state_dir: str = ""
    image: str | None = None       # k8s
    state_size: str = "1Gi"        # k8s
    install: str | None = None     # github: a pinned pip requirement
    agent_install: str | None = None  # github: the agent CLI's pin (agents/pins.py)
    prompt_text: str | None = None
    out_dir: str | None = None     # where `-o DIR` writes the files: the next steps say so
    secrets_file: str | None = None  # k8s: where `--secrets-file` writes the env file
    allow_drift: bool = False      # an --every cron cannot say evenly: accept wall-clock slots
    environ: dict[str, str] = factory(dict)  # crontab, systemd: the exporting shell's env
    team_store: bool = False       # the home has a team store: the target joins it (§21)
    store_env_file: str | None = None  # systemd: the 0600 file that gives it LOOPCTL_STORE

    def at(self, filename: str) -> str:
        """A written file as the next steps must name it (quoted for a shell)."""
        return shlex.quote(f"{self.out_dir.rstrip('/')}/{filename}" if self.out_dir
                           else filename)


@record
class Export:
    files: dict[str, str]
    warnings: list[str] = factory(list)
    next_steps: list[str] = factory(list)


STORE_SECRET = "LOOPCTL_STORE"
MACHINE_ENV = "LOOPCTL_MACHINE"


def secret_names(loop: LoopDef, team_store: bool = False) -> list[str]:
    """The env names a run needs from the target's secret store: the loop's
    own `env` keys, the preset's API key, and with a team store its DSN (a
    password may be in it: it never enters an exported file)."""
    from loopctl.agents.presets import PRESETS

    names = set(loop.env) | ({STORE_SECRET} if team_store else set())
    if not loop.command:
        # The fallback agent (DESIGN §18) needs its key where the loop runs too.
        for preset in (loop.agent or "shell", loop.fallback_agent):
            key = PRESETS[preset].api_key_env if preset else None
            if key:
                names.add(key)
    return sorted(names)


def store_env_text(dsn: str) -> str:
    """The `EnvironmentFile=` a systemd unit reads LOOPCTL_STORE from (a
    password may be in it: the file is 0600, the unit names only its path).
    Double quotes: systemd's parser takes `\\` escapes there and expands
    nothing."""
    quoted = "".join("\\" + c if c in '\\"$`' else c for c in dsn)
    return f'{STORE_SECRET}="{quoted}"\n'


def driver_env(loop: LoopDef, target: Target) -> list[tuple[str, str]]:
    """Local targets (crontab, systemd): the loop's name-only env entries
    (`--env KEY`: read from the driver's environment at fire time) with
    their values from the exporting shell, since cron and a user manager have
    none of it. A name this shell lacks is not carried, with a warning the
    caller adds (`unset_driver_env`)."""
    pairs = [(key, target.environ[key]) for key, value in sorted(loop.env.items())
             if value is None and key in target.environ]
    for key, value in pairs:
        try:
            size = len(value.encode())
        except UnicodeEncodeError:
            raise UsageError(f"cannot carry --env {key}: its value here is not UTF-8 "
                             "text") from None
        if size > MAX_ENV_VALUE:
            raise UsageError(f"cannot carry --env {key}: its value here is {size} bytes "
                             f"(at most {MAX_ENV_VALUE} go into a unit or a crontab line)")
    return pairs


MAX_ENV_VALUE = 16 * 1024


def unset_driver_env(loop: LoopDef, target: Target, where: str) -> list[str]:
    """The warning for name-only env entries this shell cannot give."""
    missing = sorted(k for k, v in loop.env.items() if v is None and k not in target.environ)
    if not missing:
        return []
    names = ", ".join(missing)
    return [f"{loop.name} takes {names} from the driver's environment (--env NAME), but "
            f"this shell lacks {'it' if len(missing) == 1 else 'them'}: {where} does not set "
            f"{names}, so its runs go without; set {names} here and export again, or give "
            "the value in loops.yaml (env: {NAME: value})"]


def traveling_definition(loop: LoopDef, prompt_path: str | None) -> str:
    """The loop alone, as it runs elsewhere: env names without values, `cwd:
    .` (wherever the job runs), no local hook, a fresh start there."""
    from loopctl.domain.loop_raw import to_raw
    from loopctl.domain.team import drop_local
    from loopctl.storage.yamlio import dump_yaml_doc

    # The team store's digest is of this same form (domain/team.py): what is
    # dropped here must be dropped there, or an export's claims are refused.
    raw = to_raw(loop)
    drop_local(raw, loop)
    raw.pop("prompt_file", None)
    raw["cwd"] = "."
    if prompt_path is not None:
        raw["prompt_file"] = prompt_path
    return dump_yaml_doc({"version": 1, "loops": {loop.name: raw}})


def run_bound(loop: LoopDef) -> int:
    """Seconds one run may take on the target: the agent's timeout, plus the
    gate's and the check's (DESIGN §16, §17: both run there too, before and
    after the agent, each bounded by its own timeout)."""
    return loop.timeout + (loop.gate_timeout if loop.gate else 0) \
        + (loop.check_timeout if loop.check else 0)


def scheduled(loop: LoopDef) -> list[str]:
    return ["run", loop.name, "--scheduled"]


def local_python() -> str:
    if any(c in sys.executable for c in "\r\n\0"):
        raise UsageError("the Python path contains a line break; no scheduler can run it")
    return sys.executable
