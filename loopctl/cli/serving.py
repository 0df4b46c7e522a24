"""`loopctl serve`: the home over HTTP (DESIGN §19). The server lives in
`loopctl.serve`, imported only here and by `daemon --serve`."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

Bind = Annotated[str, typer.Option("--bind", metavar="HOST:PORT", help="Address to listen on (port 0: any free port).")]  # noqa: E501
AllowedHost = Annotated[Optional[list[str]], typer.Option("--allowed-host", metavar="HOST", help="Another Host name requests may use, e.g. behind a proxy (repeatable; DNS rebinding is refused).")]  # noqa: E501
TlsCert = Annotated[Optional[str], typer.Option("--tls-cert", metavar="FILE", help="PEM certificate: serve HTTPS (with --tls-key).")]  # noqa: E501
TlsKey = Annotated[Optional[str], typer.Option("--tls-key", metavar="FILE", help="PEM private key of --tls-cert.")]  # noqa: E501
SecretFile = Annotated[Optional[str], typer.Option("--github-secret-file", metavar="FILE", help="File holding the GitHub webhook's secret: enables POST /hooks/github.")]  # noqa: E501


def serve(
    bind: Bind = "127.0.0.1:8177",
    allowed_host: AllowedHost = None,
    new_token: Annotated[bool, typer.Option("--new-token", help="Replace the home's access token (open pages and scrapers must use the new one).")] = False,  # noqa: E501
    tls_cert: TlsCert = None, tls_key: TlsKey = None,
    github_secret_file: SecretFile = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Do not log requests to stderr.")] = False,  # noqa: E501
) -> None:
    """Serve the dashboard, the API, webhooks and metrics of this home."""
    from loopctl.serve.main import serve as run

    raise typer.Exit(run(options(bind, allowed_host, tls_cert, tls_key, github_secret_file,
                                 quiet, new_token)))


def options(bind: str, allowed_host: list[str] | None, tls_cert: str | None,
            tls_key: str | None, secret_file: str | None, quiet: bool,
            new_token: bool = False, bind_option: str = "--bind") -> Any:
    from loopctl.serve.main import Options

    return Options(bind=bind, allowed_hosts=list(allowed_host or []), new_token=new_token,
                   tls_cert=tls_cert, tls_key=tls_key, github_secret_file=secret_file,
                   quiet=quiet, bind_option=bind_option)
