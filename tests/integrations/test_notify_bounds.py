"""Issue 25, item 7: a notification delivery is killed at its timeout whatever
the endpoint does, a bounded number send at once (the rest wait or are
dropped with a note), error texts never show a piece of the URL, and the
digest and the dead-man's switch name their targets without a token in argv.
Real processes, real Apprise, local endpoints on 127.0.0.1."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from conftest import CLI, agent_command, wait_for
from integrations.test_notify import Receiver, receiver  # noqa: F401 - a fixture
from loopctl.integrations.notify import scrub, secrets_of

SHORT = {"LOOPCTL_NOTIFY_TIMEOUT": "5"}  # room for Apprise to start on a busy machine


class Trickle:
    """An endpoint that reads a request and answers one byte a second, for
    ever: a request timeout never fires, since bytes keep coming. It records
    when each connection opened and when its sender went away."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.lock = threading.Condition()
        self.opened: list[float] = []
        self.closed: list[float] = []
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.opened.append(time.monotonic())
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        answer = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
        try:
            request = b""
            while b"\r\n\r\n" not in request:  # the headers, then the body they announce
                request += conn.recv(65536)
            head, _, body = request.partition(b"\r\n\r\n")
            size = next((int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                         if ln.lower().startswith(b"content-length:")), 0)
            while len(body) < size:
                body += conn.recv(65536)
            for byte in answer:
                conn.sendall(bytes([byte]))
                # Readable now can only mean the sender went away (EOF or reset).
                if self.stop.wait(0) or select.select([conn], [], [], 1.0)[0]:
                    break
        except OSError:
            pass
        finally:
            conn.close()
            with self.lock:
                self.closed.append(time.monotonic())
                self.lock.notify_all()

    def url(self, scheme: str = "json") -> str:
        return f"{scheme}://127.0.0.1:{self.port}/hook"

    def most_at_once(self) -> int:
        with self.lock:
            spans = list(zip(sorted(self.opened), sorted(self.closed), strict=False))
        return max((sum(1 for o, c in spans if o <= t < c) for t, _ in spans), default=0)

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.fixture
def trickle() -> Iterator[Trickle]:
    server = Trickle()
    try:
        yield server
    finally:
        server.close()


def deliver(cli: CLI, url: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """One detached delivery process, started as the supervisor starts it."""
    event = {"version": 1, "loop": "x", "status": "completed", "summary": "s",
             "log": str(log)}
    cli.state_dir.mkdir(parents=True, exist_ok=True)
    # The run's log exists before any delivery: loopctl appends its lines to
    # a log it made, and never creates one where an agent could have.
    log.touch(mode=0o600, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-m", "loopctl.integrations.notify"],
                            stdin=subprocess.PIPE, cwd=cli.state_dir,
                            env=dict(os.environ, **env))
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"event": event, "targets": [url]}).encode())
    proc.stdin.close()
    return proc


def start_loop(cli: CLI, url: str) -> None:
    cli("start", "p", "--name", "x", "--every", "1h", "--notify", url,
        "--command", agent_command(), check=0)


@pytest.mark.slow  # several seconds: handed out early, never the tail
def test_a_trickling_endpoint_is_cut_off_at_the_timeout(cli: CLI, trickle: Trickle,
                                                       tmp_path: Path) -> None:
    start_loop(cli, trickle.url())
    log = tmp_path / "run.log"
    began = time.monotonic()
    proc = deliver(cli, trickle.url(), SHORT, log)
    proc.wait(timeout=30)
    took = time.monotonic() - began
    assert "timed out after 5s" in log.read_text(), log.read_text()
    with trickle.lock:  # the sender went away: its connection is closed
        assert len(trickle.opened) == 1, "Apprise never reached the endpoint"
        assert trickle.lock.wait_for(lambda: len(trickle.closed) == 1, 10)
    assert took < 5 + 20, took  # the endpoint trickles forever: bounded by the 5 s timeout
    assert "timed out after 5s" in log.read_text()
    assert "timed out after 5s" in cli.json("status", "x")["notify_error"]["message"]


@pytest.mark.slow
def test_deliveries_take_turns_and_the_excess_is_dropped_with_a_note(
        cli: CLI, trickle: Trickle, tmp_path: Path) -> None:
    """One slot, four waiting places: of six deliveries at once, one sends,
    four wait their turn (one at a time) and one is dropped at once."""
    start_loop(cli, trickle.url())
    env = dict(SHORT, LOOPCTL_NOTIFY_TIMEOUT="3", LOOPCTL_NOTIFY_SLOTS="1")
    logs = [tmp_path / f"{n}.log" for n in range(6)]
    procs = [deliver(cli, trickle.url(), env, log) for log in logs]
    for proc in procs:
        proc.wait(timeout=60)
    texts = [log.read_text() for log in logs]
    dropped = [t for t in texts if "dropped: 1 deliveries sending and 4 waiting" in t]
    timed_out = [t for t in texts if "timed out after 3s" in t]
    assert (len(dropped), len(timed_out)) == (1, 5), texts
    # (on a machine too busy for Apprise to connect within 3 s, fewer connect)
    assert 1 <= len(trickle.opened) <= 5
    assert trickle.most_at_once() == 1
    doctor = cli("doctor").stdout
    assert "last notification failed" in doctor


def test_error_texts_never_show_a_piece_of_the_url(cli: CLI) -> None:
    """An endpoint that refuses the ntfy topic quotes it back; requests'
    socket errors quote the URL path. Neither reaches status, --json,
    doctor or the run log."""
    topic, secret_path, password = "t0psecrettopic", "S3CRETPATH", "hunter2pw"

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = f'{{"error": "forbidden topic {topic}"}}'.encode()
            self.send_response(403)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as dead:
        dead.bind(("127.0.0.1", 0))
        urls = [f"ntfy://127.0.0.1:{server.server_address[1]}/{topic}",
                f"json://me:{password}@127.0.0.1:{dead.getsockname()[1]}/hook/{secret_path}"]
        try:
            cli("start", "p", "--name", "x", "--every", "1h", "--notify", urls[0],
                "--notify", urls[1], "--command",
                agent_command("--decide", "complete"), check=0)
            cli("run", "x", check=0)
            run_id = cli.records("x")[0]["run_id"]
            log = cli.state_dir / "runs" / "x" / f"{run_id}.log"
            wait_for(lambda: log.read_text().count("# loopctl: notify ") >= 2)
            wait_for(lambda: cli.json("status", "x")["notify_error"])
        finally:
            server.shutdown()
            server.server_close()
    shown = [log.read_text(), cli("status", "x").stdout, json.dumps(cli.json("status", "x")),
             cli("doctor").stdout, json.dumps(cli.json("doctor"))]
    assert "error=403" in shown[0]  # the reason is kept, the secret is not
    for text in shown:
        for secret in (topic, secret_path, password):
            assert secret not in text, (secret, text)


@pytest.mark.parametrize(("url", "text", "secret"), [
    ("ntfy://mytopic42", "Failed to send ntfy notification to topic 'mytopic42'", "mytopic42"),
    ("slack://T000/B000/XXXSECRET", "url: /services/T000/B000/XXXSECRET (Caused by", "XXXSECRET"),
    ("tgram://123456:AAbotTOKEN/987", "https://api.telegram.org/bot123456:AAbotTOKEN/x", "AAbot"),
    ("json://u:p%40ss@h/x", "auth p@ss refused", "p@ss"),
    ("mailto://me:apppass@gmail.com", "login apppass failed\nforged line", "apppass"),
])
def test_scrub_removes_every_piece_of_the_url(url: str, text: str, secret: str) -> None:
    shown = scrub(text, [url])
    assert secret not in shown and "\n" not in shown
    assert secrets_of(url)


# -- named targets ---------------------------------------------------------------------


def named_home(cli: CLI, targets: str) -> None:
    cli.home.mkdir(parents=True, exist_ok=True)
    (cli.home / "loops.yaml").write_text(
        f"version: 1\nnotify_targets:\n{targets}loops:\n  x:\n    prompt: p\n"
        f"    every: 1h\n    command: [echo, hi]\n")


@pytest.mark.slow  # several seconds: handed out early, never the tail
def test_digest_and_doctor_send_to_a_named_target(cli: CLI, receiver: Receiver) -> None:  # noqa: F811
    named_home(cli, f"  ops: {receiver.url('/ops')}\n  both: [{receiver.url('/b1')}]\n")
    cli("digest", "--notify", "ops", check=0)
    assert receiver.wait(1)[0].path == "/ops"
    cli("notify", "test", "ops", check=0)
    assert receiver.wait(2)[1].path == "/ops"
    # unhealthy: an invalid entry, told through a name
    text = (cli.home / "loops.yaml").read_text() + "  bad:\n    every: sometimes\n"
    (cli.home / "loops.yaml").write_text(text)
    assert cli("doctor", "--notify", "both").returncode == 1
    assert receiver.wait(3)[2].path == "/b1"
    # the URLs never land in loopctl's derived files
    cli("tick", check=0)
    for path in cli.state_dir.glob("*.json"):
        assert str(receiver.port) not in path.read_text(), path


def test_an_unknown_target_name_is_a_usage_error(cli: CLI, receiver: Receiver) -> None:  # noqa: F811
    named_home(cli, f"  ops: {receiver.url()}\n")
    proc = cli("digest", "--notify", "opz")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "unknown notification target 'opz'" in proc.stderr and "(ops)" in proc.stderr
    assert receiver.posts == []


@pytest.mark.parametrize("targets", ["  - json://a/\n", "  Bad Name: json://a/\n",
                                     "  ops: not-a-url\n", "  ops: 12\n"])
def test_a_bad_notify_targets_table_fails_closed(cli: CLI, targets: str) -> None:
    named_home(cli, targets)
    proc = cli("validate")
    assert proc.returncode == 3, (proc.stdout, proc.stderr)
    assert "notify_targets" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("raw", ["\u00b2", "0", "65", "-1", "junk", ""])
def test_a_bad_slot_count_falls_back_to_the_default(monkeypatch: pytest.MonkeyPatch,
                                                   raw: str) -> None:
    from loopctl.integrations import notify

    monkeypatch.setenv("LOOPCTL_NOTIFY_SLOTS", raw)
    assert notify.slots() == notify.SLOTS
    monkeypatch.setenv("LOOPCTL_NOTIFY_SLOTS", "3")
    assert notify.slots() == 3
