"""Starting and stopping the server: `loopctl serve` in the foreground, or
inside `loopctl daemon --serve ADDR` on a thread beside the driver."""

from __future__ import annotations

import signal
import ssl
import sys
import threading
from typing import Any

from loopctl.domain.errors import LoopctlError, UsageError
from loopctl.fast.data_class import factory, record
from loopctl.serve.auth import LOOPBACK, Auth, allowed_hosts
from loopctl.serve.server import Server
from loopctl.storage.store import Store

DEFAULT_BIND = "127.0.0.1:8177"


@record
class Options:
    bind: str = DEFAULT_BIND
    allowed_hosts: list[str] = factory(list)
    new_token: bool = False
    tls_cert: str | None = None
    tls_key: str | None = None
    github_secret_file: str | None = None
    quiet: bool = False
    bind_option: str = "--bind"  # as typed: `daemon --serve` names its own


def parse_bind(text: str, option: str = "--bind") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not (port.isascii() and port.isdigit()) or int(port) > 65535:
        raise UsageError(f"bad {option} {text[:100]!r}: expected HOST:PORT, like "
                         f"{DEFAULT_BIND} (port 0: any free port)")
    return host, int(port)


def _tls(options: Options) -> ssl.SSLContext | None:
    if (options.tls_cert is None) != (options.tls_key is None):
        raise UsageError("give --tls-cert and --tls-key together")
    if options.tls_cert is None or options.tls_key is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(options.tls_cert, options.tls_key)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"bad --tls-cert/--tls-key: {exc}; expected a PEM certificate and "
                         "its key") from None
    return context


def start(options: Options, in_daemon: bool = False) -> tuple[Server, str]:
    """Bind and return the server (not yet serving) and its URL with the token."""
    from loopctl.serve.app import App
    from loopctl.serve.hooks import read_secret
    from loopctl.storage.serve_files import load_token

    host, port = parse_bind(options.bind, options.bind_option)
    tls = _tls(options)
    secret = read_secret(options.github_secret_file) if options.github_secret_file else None
    store = Store()
    token, made = load_token(store.paths, renew=options.new_token)
    try:
        server = Server((host, port), None, tls)
    except OSError as exc:
        raise LoopctlError(f"cannot listen on {options.bind}: {exc.strerror}", 1) from None
    port = server.server_address[1]
    auth = Auth(token, port, allowed_hosts(host, port, options.allowed_hosts), tls is not None)
    server.app = App(auth, secret, quiet=options.quiet, in_daemon=in_daemon)
    shown = f"[{host}]" if ":" in host else host
    url = f"{'https' if tls else 'http'}://{shown}:{port}/?token={token}"
    if made or options.new_token:
        server.app.log(f"new token in {store.paths.state_dir / 'serve.token'}")
    if host not in LOOPBACK and tls is None:
        print(f"warning: serving {host} without TLS: the token and every page cross the "
              "network in clear; give --tls-cert and --tls-key, or bind 127.0.0.1 behind a "
              "TLS proxy", file=sys.stderr, flush=True)
    return server, url


def announce(url: str) -> None:
    """The URL, on stdout, first line: open it (or read it, in a test)."""
    print(f"loopctl serve: open {url}", flush=True)


def serve(options: Options) -> int:
    from loopctl.collector import long_lived

    server, url = start(options)
    long_lived()  # off for start-up (loopctl.entry); each connection leaves cycles
    announce(url)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                              daemon=True)
    worker.start()
    while not stop.wait(1.0):
        pass
    server.app.stopping = True
    server.shutdown()
    server.server_close()
    server.app.log("stopped")
    return 0


def serve_beside(options: Options) -> Server:
    """For `daemon --serve`: serving on a thread; the caller shuts it down."""
    from loopctl.collector import long_lived

    server, url = start(options, in_daemon=True)
    long_lived()  # as the daemon's own start will: serving begins before it
    # The driver's thread gets the interpreter lock back sooner from a render.
    sys.setswitchinterval(0.001)
    announce(url)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5},
                     daemon=True).start()
    return server


def stop_beside(server: Server) -> None:
    server.app.stopping = True
    server.shutdown()
    server.server_close()
