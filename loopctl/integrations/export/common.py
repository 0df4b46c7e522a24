"""What every export target shares: the request (`Target`), the result
(`Export`), the loop as it travels, and the command each target runs."""

from __future__ import annotations

import shlex
import sys

from loopctl.domain.data_class import factory, record
from loopctl.domain.errors import UsageError
from loopctl.domain.loop_raw import to_raw
from loopctl.domain.model import LoopDef

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
    prompt_text: str | None = None
    out_dir: str | None = None     # where `-o DIR` writes the files: the next steps say so
    secrets_file: str | None = None  # k8s: where `--secrets-file` writes the env file
    allow_drift: bool = False      # an --every cron cannot say evenly: accept wall-clock slots

    def at(self, filename: str) -> str:
        """A written file as the next steps must name it (quoted for a shell)."""
        return shlex.quote(f"{self.out_dir.rstrip('/')}/{filename}" if self.out_dir
                           else filename)


@record
class Export:
    files: dict[str, str]
    warnings: list[str] = factory(list)
    next_steps: list[str] = factory(list)


def secret_names(loop: LoopDef) -> list[str]:
    """The env names a run needs from the target's secret store: the loop's
    own `env` keys and the preset's API key."""
    from loopctl.agents.presets import PRESETS

    names = set(loop.env)
    if not loop.command:
        # The fallback agent (DESIGN §18) needs its key where the loop runs too.
        for preset in (loop.agent or "shell", loop.fallback_agent):
            key = PRESETS[preset].api_key_env if preset else None
            if key:
                names.add(key)
    return sorted(names)


def traveling_definition(loop: LoopDef, prompt_path: str | None) -> str:
    """The loop alone, as it runs elsewhere: env names without values, `cwd:
    .` (wherever the job runs), no local hook, a fresh start there."""
    from loopctl.storage.yamlio import dump_yaml_doc

    raw = to_raw(loop)
    raw["cwd"] = "."
    raw.pop("created_at", None)
    raw.pop("on_attention", None)
    raw.pop("notify", None)  # Apprise URLs hold tokens: they never travel
    raw.pop("env", None)
    if loop.env:
        raw["env"] = dict.fromkeys(sorted(loop.env))
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
