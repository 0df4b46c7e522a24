"""`export`: hand a loop to crontab, systemd, Kubernetes or GitHub Actions."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from loopctl.cli.options import JsonOpt, NameArg, fail, store
from loopctl.domain.errors import LoopctlError
from loopctl.domain.model import LoopDef
from loopctl.storage.store import Store


def export_cmd(
    name: NameArg,
    to: Annotated[str, typer.Option("--to", help="crontab, systemd, k8s or github.")],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write the files into this directory (default: print them).")] = None,
    image: Annotated[Optional[str], typer.Option(help="k8s: container image with Python, loopctl and the agent CLI (required).")] = None,
    install: Annotated[Optional[str], typer.Option(help="github: pinned pip requirement for loopctl (default: how this copy was installed).")] = None,
    agent_install: Annotated[Optional[str], typer.Option(help="github: the agent CLI to install, an exact npm NAME@VERSION or pip NAME==VERSION (default: the version loopctl is tested with, where the preset has one).")] = None,
    state_size: Annotated[str, typer.Option(help="k8s: size of the state volume claim.")] = "1Gi",
    secrets_file: Annotated[Optional[Path], typer.Option(help="k8s: also write the secret's KEY=VALUE env file here (0600).")] = None,
    allow_drift: Annotated[bool, typer.Option("--allow-drift", help="Accept wall-clock slots for an --every that cron cannot say evenly (7m as */6, 2d as every other day of the month, under 5m on GitHub).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Hand a loop to crontab, systemd, Kubernetes or GitHub Actions."""
    from loopctl.integrations import export as exporter
    from loopctl.storage.paths import home_env

    s = store()
    loop = _exportable(s, name)
    team_dsn = _team_dsn(s)
    _check_quantity(state_size)
    if secrets_file is not None and to != "k8s":
        fail("--secrets-file is for --to k8s (crontab and systemd read the local store; "
             "on GitHub use `gh secret set`)")
    if agent_install is not None and to != "github":
        fail("--agent-install is for --to github (locally, and in a --image, the agent is "
             "installed already)")
    target = exporter.Target(
        to, home=str(s.paths.config_dir) if os.environ.get("LOOPCTL_HOME") else None,
        home_env=home_env(),
        state_dir=str(s.paths.state_dir), image=image, state_size=state_size,
        install=install, agent_install=agent_install, prompt_text=_prompt_text(loop),
        out_dir=str(output) if output is not None else None,
        secrets_file=str(secrets_file) if secrets_file is not None else None,
        allow_drift=allow_drift, environ=dict(os.environ), team_store=team_dsn is not None,
        store_env_file=_store_env_file(s, to))
    result = exporter.export(loop, target)
    if target.store_env_file is not None:
        _write_store_env(Path(target.store_env_file))
    if secrets_file is not None:
        _write_secrets_file(loop, secrets_file, result, team_dsn)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if output is not None:
        _write_files(output, result.files, quiet=as_json)
    if as_json:
        print(exporter.as_json(result))
        return
    if output is None:
        for filename, text in result.files.items():
            if len(result.files) > 1:
                print(f"# --- {filename}")
            print(text, end="")
    for step in result.next_steps:
        print(f"next: {step}", file=sys.stderr)


def _exportable(s: Store, name: str) -> LoopDef:
    defs = s.read_defs()
    if not defs.has(name):
        raise LoopctlError(f"no such loop: {name!r} (see `loopctl ls`)", 4)
    loop = defs.loops.get(name)
    if loop is None:
        fail(f"loop {name!r} is invalid ({defs.invalid.get(name)}); fix it first")
    return loop


def _team_dsn(s: Store) -> str | None:
    """The home's team store (DESIGN §21), checked as text only: an export
    never connects (the target does, when it fires), so neither psycopg nor
    the server is needed here."""
    from loopctl.storage.pg.dsn import chosen

    return chosen(s.read_defs().top.get("store"), str(s.paths.loops_file))


def _store_env_file(s: Store, to: str) -> str | None:
    """systemd with LOOPCTL_STORE in this shell: the home's 0600 file the
    unit reads it from (a user manager has none of this shell's env)."""
    if to != "systemd" or not os.environ.get("LOOPCTL_STORE", "").strip():
        return None
    return str(s.paths.config_dir / "store.env")


def _write_store_env(path: Path) -> None:
    from loopctl.integrations.export.common import store_env_text
    from loopctl.storage.atomic import atomic_write

    atomic_write(path, store_env_text(os.environ["LOOPCTL_STORE"].strip()).encode())
    print(f"wrote {path} (LOOPCTL_STORE for the unit, mode 0600)", file=sys.stderr)


def _prompt_text(loop: LoopDef) -> str | None:
    """A --prompt-file's text, carried into the exported files."""
    if not loop.prompt_file:
        return None
    try:
        # Bytes, then text: read_text() would turn CRLF into LF.
        return Path(loop.cwd, loop.prompt_file).expanduser().read_bytes().decode()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"cannot read prompt file {loop.prompt_file}: "
             f"{getattr(exc, 'strerror', None) or 'not UTF-8 text'}")


def _write_files(output: Path, files: dict[str, str], quiet: bool) -> None:
    from loopctl.storage.atomic import atomic_write
    from loopctl.storage.paths import ensure_dir

    ensure_dir(output)
    for filename, text in files.items():
        atomic_write(output / filename, text.encode())
        if not quiet:
            print(f"wrote {output / filename}")


def _check_quantity(size: str) -> None:
    import re

    if not re.fullmatch(r"[1-9][0-9]{0,5}(Ki|Mi|Gi|Ti)", size):
        fail(f"bad --state-size {size!r}: expected a size like 512Mi or 1Gi")


def _write_secrets_file(loop: Any, path: Path, result: Any, team_dsn: str | None) -> None:
    """Values for `kubectl create secret ... --from-env-file`; written 0600
    and never into an exported file. With a team store, its DSN is one."""
    from loopctl.integrations import export as exporter
    from loopctl.storage.atomic import atomic_write

    environ = dict(os.environ)
    if team_dsn is not None:
        environ["LOOPCTL_STORE"] = team_dsn
    text, missing = exporter.secrets_env_file(loop, environ, team_dsn is not None)
    atomic_write(path.expanduser().absolute(), text.encode())
    if missing:
        result.warnings.append(f"{path} lacks {', '.join(missing)}: set them in this "
                               "environment (or with --env KEY=VALUE) and export again")
