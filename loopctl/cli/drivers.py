"""What fires runs: `run`, `tick`, `daemon`, and `decide` from inside a run."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from loopctl.cli.flags import RUN_OPTIONS, TICK_OPTIONS
from loopctl.cli.options import NameArg, fail, store
from loopctl.cli.serving import AllowedHost, SecretFile, TlsCert, TlsKey


def run(name: NameArg,
        scheduled: Annotated[bool, typer.Option(*RUN_OPTIONS["scheduled"], help="For external schedulers: fire only if `tick` would (active, within limits, nothing in flight); else say why and exit 0.")] = False,
        force: Annotated[bool, typer.Option(*RUN_OPTIONS["force"], help="Run even a paused or finished loop.")] = False,
        slot: Annotated[Optional[str], typer.Option("--slot", metavar="INSTANT", help="With --scheduled: the schedule's instant this fire serves, e.g. 2026-12-05T09:00:00Z (default: the latest at or before now), or a Kubernetes Job's k8s-job:CRONJOB:JOBNAME (what the k8s export passes); a slot already served is not run again; one in the future or from before the loop was started is refused.")] = None) -> None:
    """Run a loop now, in the foreground; exit code is the run's."""
    from loopctl.cli import direct

    if scheduled and force:
        fail("give --scheduled or --force, not both")
    if slot is not None and not scheduled:
        fail("--slot needs --scheduled")
    raise typer.Exit(direct.run(name, "scheduled" if scheduled else "force" if force
                                else "manual", slot))


def tick(
    wait: Annotated[bool, typer.Option(*TICK_OPTIONS["wait"], help="Wait for the runs, and start and wait for due loops queued behind max_concurrent; exit 1 if one failed, 124 if one timed out, 75 if a due loop was left queued.")] = False,
    as_json: Annotated[bool, typer.Option(*TICK_OPTIONS["as_json"], help="Print JSON (stable shape).")] = False,
    quiet: Annotated[bool, typer.Option(*TICK_OPTIONS["quiet"], help="Print nothing but errors.")] = False,
) -> None:
    """Fire every due loop once and exit (for cron and CI)."""
    from loopctl.cli import direct

    raise typer.Exit(direct.tick(wait, as_json, quiet))


def daemon(
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not log to stderr.")] = False,
    serve: Annotated[Optional[str], typer.Option("--serve", metavar="HOST:PORT", help="Also run `loopctl serve` on this address, in this process.")] = None,
    allowed_host: AllowedHost = None, tls_cert: TlsCert = None, tls_key: TlsKey = None,
    github_secret_file: SecretFile = None,
    print_unit: Annotated[bool, typer.Option("--print-unit", help="Print a systemd user unit that runs this daemon (with these options) for this home, and exit.")] = False,
) -> None:
    """Hold the lease and fire loops as they come due, until SIGTERM/SIGINT."""
    from loopctl.engine.daemon import Daemon

    if serve is None and (allowed_host or tls_cert or tls_key or github_secret_file):
        fail("--allowed-host, --tls-cert, --tls-key and --github-secret-file need --serve")
    if print_unit:
        _print_unit(quiet, serve, allowed_host, tls_cert, tls_key, github_secret_file)
        return
    if serve is None:
        raise typer.Exit(Daemon(store(), quiet=quiet).run())
    from loopctl.cli.serving import options
    from loopctl.serve.main import serve_beside, stop_beside

    server = serve_beside(options(serve, allowed_host, tls_cert, tls_key, github_secret_file,
                                  quiet, bind_option="--serve"))
    try:
        code = Daemon(store(), quiet=quiet).run()
    finally:
        stop_beside(server)
    raise typer.Exit(code)


def decide(
    decision: Annotated[str, typer.Argument(help="continue, complete, fail or block.")],
    summary: Annotated[Optional[str], typer.Option(help="What happened in this run.")] = None,
    evidence: Annotated[Optional[str], typer.Option(help="How you know.")] = None,
    next_: Annotated[Optional[str], typer.Option("--next", metavar="DURATION", help="With continue on auto pace: delay before the next run.")] = None,
) -> None:
    """Report this run's decision (only inside a run started by loopctl)."""
    from loopctl.cli import direct

    raise typer.Exit(direct.decide(decision, summary, evidence, next_))


def _print_unit(quiet: bool, serve: str | None, allowed_host: list[str] | None,
                tls_cert: str | None, tls_key: str | None, secret_file: str | None) -> None:
    """The unit for `daemon` with these options: file options as absolute
    paths (the unit runs elsewhere than this shell's folder)."""
    import os

    from loopctl.domain.errors import LoopctlError
    from loopctl.integrations.daemon_unit import daemon_unit
    from loopctl.storage.paths import home_env

    args = ["--quiet"] if quiet else []
    if serve is not None:
        from loopctl.serve.main import parse_bind

        parse_bind(serve, "--serve")  # a unit that fails at start helps nobody
        args += ["--serve", serve]
    for host in allowed_host or []:
        args += ["--allowed-host", host]
    for flag, path in (("--tls-cert", tls_cert), ("--tls-key", tls_key),
                       ("--github-secret-file", secret_file)):
        if path is not None:
            args += [flag, os.path.abspath(os.path.expanduser(str(path)))]
    try:
        loops = list(store().read_defs().loops.values())
    except LoopctlError:
        loops = []  # a PATH for the usual places; `doctor` says what is missing
    print(daemon_unit(loops, home_env(), args), end="")
