"""Apprise notifications, `digest` and `doctor --notify` (DESIGN §13) with real
processes posting through real Apprise to a local HTTP receiver
(`json://127.0.0.1:PORT/path`) that runs in a thread of this test process."""

from __future__ import annotations

import base64
import json
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import CLI, agent_command, imported_modules, wait_for

# -- the receiver ----------------------------------------------------------------------


@dataclass(frozen=True)
class Post:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def title(self) -> str:
        return str(self.body.get("title"))

    @property
    def message(self) -> str:
        return str(self.body.get("message"))


class Receiver:
    """A local HTTP server recording every POST; `wait(n)` blocks until n arrived."""

    def __init__(self) -> None:
        self._posts: list[Post] = []
        self._cond = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # http.server's name
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size)
                try:
                    body = json.loads(raw)
                except ValueError:
                    body = {"unparsed": raw.decode("utf-8", "replace")}
                # Recorded before the answer: a sender that got its 200 is counted.
                receiver._add(Post(self.path, dict(self.headers.items()), body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _add(self, post: Post) -> None:
        with self._cond:
            self._posts.append(post)
            self._cond.notify_all()

    def url(self, path: str = "/") -> str:
        return f"json://127.0.0.1:{self.port}{path}"

    @property
    def posts(self) -> list[Post]:
        with self._cond:
            return list(self._posts)

    def wait(self, count: int, timeout: float = 20.0) -> list[Post]:
        """The posts once at least `count` arrived; fails the test at `timeout`."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self._posts) >= count, timeout):
                raise AssertionError(f"{count} post(s) expected, got {len(self._posts)}: "
                                     f"{[p.title for p in self._posts]}")
            return list(self._posts)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def dead_url() -> Iterator[str]:
    """An Apprise URL on a port nothing listens on: bound but never listening,
    and kept bound for the test so no other test's receiver can get it
    (a connection there is refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        yield f"json://127.0.0.1:{sock.getsockname()[1]}/"


# -- helpers ----------------------------------------------------------------------------


def log_path(cli: CLI, loop: str, run_id: str) -> Path:
    return cli.state_dir / "runs" / loop / f"{run_id}.log"


def notify_lines(cli: CLI, loop: str, run_id: str) -> list[str]:
    """The delivery process's result lines in a run's log (written after sending)."""
    path = log_path(cli, loop, run_id)
    if not path.exists():
        return []
    return [line for line in path.read_text(errors="replace").splitlines()
            if line.startswith("# loopctl: notify ")]


def delivered(cli: CLI, loop: str, count: int, run: int = -1) -> list[str]:
    """Wait until the delivery for run number `run` logged `count` results:
    every post it made has been answered by then."""
    def done() -> list[str] | None:
        records = cli.records(loop)
        if not records:
            return None
        found = notify_lines(cli, loop, records[run]["run_id"])
        return found if len(found) >= count else None
    return wait_for(done)


def add_top_level_notify(cli: CLI, urls: list[str]) -> None:
    loops = cli.home / "loops.yaml"
    listed = "".join(f"- {json.dumps(u)}\n" for u in urls)
    loops.write_text("notify:\n" + listed + loops.read_text())


def output(proc: Any) -> str:
    return f"{proc.stdout}\n{proc.stderr}"


# -- 1. storing targets -------------------------------------------------------------------


@pytest.mark.slow
def test_start_and_update_store_notify_urls_and_none_clears(cli: CLI, receiver: Receiver) -> None:
    first, second = receiver.url("/a"), receiver.url("/b")
    cli("start", "p", "--name", "n", "--every", "1h", "--notify", first, "--notify", second,
        "--command", agent_command(), check=0)
    doc = yaml.safe_load((cli.home / "loops.yaml").read_text())
    assert doc["loops"]["n"]["notify"] == [first, second]
    assert cli.json("status", "n")["notify"] == ["json://****", "json://****"]

    cli("update", "n", "--notify", first, check=0)
    assert yaml.safe_load((cli.home / "loops.yaml").read_text())["loops"]["n"]["notify"] == [
        first]

    cli("update", "n", "--notify", "none", check=0)
    doc = yaml.safe_load((cli.home / "loops.yaml").read_text())
    assert "notify" not in doc["loops"]["n"]
    assert cli.json("status", "n")["notify"] == []
    assert "notify" not in cli.json("show", "n")["definition"]


@pytest.mark.parametrize("bad,shown,secret", [
    ("notaurl://x", "notaurl://****", "notaurl://x"),
    ("json:/missing-slash", "****", "missing-slash"),
])
def test_a_url_apprise_cannot_parse_is_refused_and_nothing_is_written(
        cli: CLI, receiver: Receiver, bad: str, shown: str, secret: str) -> None:
    loops = cli.home / "loops.yaml"
    proc = cli("start", "p", "--name", "n", "--every", "1h", "--notify", receiver.url(),
               "--notify", bad, "--command", agent_command(), check=2)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert shown in proc.stderr and secret not in proc.stderr
    assert not loops.exists()

    cli("start", "p", "--name", "n", "--every", "1h", "--command", agent_command(), check=0)
    before = loops.read_bytes()
    proc = cli("update", "n", "--notify", bad, check=2)
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert shown in proc.stderr and secret not in proc.stderr
    assert loops.read_bytes() == before


# -- 2. attention events ------------------------------------------------------------------


def test_completion_is_sent_once_with_summary_evidence_run_and_log(
        cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "done", "--every", "1h", "--notify", receiver.url("/hook"),
        "--command", agent_command("--decide", "complete", "--summary", "all tests pass",
                                   "--evidence", "pytest: 12 passed"), check=0)
    cli("run", "done", check=0)
    delivered(cli, "done", 1)
    [post] = receiver.posts
    run_id = cli.records("done")[-1]["run_id"]
    assert post.path == "/hook"
    assert set(post.body) >= {"version", "title", "message", "attachments", "type"}
    assert post.title == "loopctl: done completed"
    assert "all tests pass" in post.message
    assert "Evidence (agent): pytest: 12 passed" in post.message
    assert f"Run: {run_id}" in post.message
    assert f"Log: {log_path(cli, 'done', run_id)}" in post.message


def test_failure_limit_pause_is_sent_with_its_reason(cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "flaky", "--every", "1h", "--max-failures", "1",
        "--notify", receiver.url(), "--command", agent_command("--exit", "1"), check=0)
    cli("run", "flaky")
    assert cli.json("status", "flaky")["reason"] == "failure_limit"
    delivered(cli, "flaky", 1)
    [post] = receiver.posts
    run_id = cli.records("flaky")[-1]["run_id"]
    assert post.title == "loopctl: flaky paused (failure_limit)"
    assert f"Run: {run_id}" in post.message and "Log: " in post.message


def test_expiry_from_a_tick_is_sent(cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "short", "--every", "1h", "--for", "30s", "--after", "1h",
        "--notify", receiver.url(), "--command", agent_command(), check=0)
    cli("tick", env={"LOOPCTL_CLOCK_OFFSET": "40"}, check=0)
    [post] = receiver.wait(1)
    assert post.title == "loopctl: short expired"


def test_an_ordinary_run_sends_nothing(cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "calm", "--every", "1h", "--max-runs", "2",
        "--notify", receiver.url(), "--command", agent_command("--decide", "continue"),
        check=0)
    cli("run", "calm", check=0)
    assert cli.json("status", "calm")["status"] == "active"
    first = cli.records("calm")[0]["run_id"]
    cli("run", "calm", check=0)  # the second of two runs: paused (iteration_limit)
    delivered(cli, "calm", 1)
    assert [p.title for p in receiver.posts] == ["loopctl: calm paused (iteration_limit)"]
    assert notify_lines(cli, "calm", first) == []


@pytest.mark.slow
def test_another_loops_run_does_not_resend_an_old_event(cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "first", "--every", "1h", "--notify", receiver.url("/first"),
        "--command", agent_command("--decide", "complete"), check=0)
    cli("start", "p", "--name", "second", "--every", "1h", "--notify", receiver.url("/second"),
        "--command", agent_command("--decide", "complete"), check=0)
    cli("run", "first", check=0)
    delivered(cli, "first", 1)
    cli("run", "second", check=0)
    delivered(cli, "second", 1)
    logged = [json.loads(line)["loop"]
              for line in (cli.state_dir / "events.jsonl").read_text().splitlines()]
    assert logged == ["first", "second"]
    assert sorted(p.path for p in receiver.posts) == ["/first", "/second"]


def test_loop_and_top_level_targets_each_get_the_event_once(
        cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "both", "--every", "1h",
        "--notify", receiver.url("/loop"), "--notify", receiver.url("/shared"),
        "--command", agent_command("--decide", "complete"), check=0)
    add_top_level_notify(cli, [receiver.url("/shared"), receiver.url("/top")])
    cli("run", "both", check=0)
    delivered(cli, "both", 3)
    posts = receiver.posts
    assert sorted(p.path for p in posts) == ["/loop", "/shared", "/top"]
    assert {p.title for p in posts} == {"loopctl: both completed"}


# -- 3. detached delivery ---------------------------------------------------------------


def notify_error(cli: CLI, loop: str) -> Any:
    return cli.state()["loops"][loop].get("notify_error")


@pytest.mark.slow
def test_a_dead_target_changes_nothing_but_is_reported(
        cli: CLI, receiver: Receiver, dead_url: str) -> None:
    live = receiver.url("/live")
    dead_port = dead_url.rsplit(":", 1)[1].strip("/")
    cli("start", "p", "--name", "blk", "--every", "1h", "--notify", dead_url, "--notify", live,
        "--command", agent_command("--decide", "block", "--summary", "need a key"), check=0)
    run = cli("run", "blk")
    assert run.returncode == 0, output(run)
    [record] = cli.records("blk")
    assert (record["outcome"], record["exit_code"]) == ("ok", 0)
    [post] = receiver.wait(1)
    assert post.path == "/live" and post.title == "loopctl: blk paused (blocked)"

    wait_for(lambda: notify_error(cli, "blk"))
    status = cli.json("status", "blk")
    assert (status["status"], status["reason"]) == ("paused", "blocked")
    assert "json://127.0.0.1/****" in status["notify_error"]["message"]
    assert f":{dead_port}" not in status["notify_error"]["message"]
    doctor = cli("doctor", "--json")
    findings = json.loads(doctor.stdout)["findings"]
    assert any(f["level"] == "warn" and f["check"] == "notify" and "blk" in f["message"]
               for f in findings), findings
    shown = [run, doctor, cli("status", "blk"), cli("status", "blk", "--json"), cli("doctor"),
             cli("logs", "blk"), cli("events", "--json")]
    for proc in shown:
        assert dead_url not in output(proc), proc.args
    assert dead_url not in (cli.state_dir / "events.jsonl").read_text()

    # Drop the dead target: the next event gets through and clears the error.
    cli("update", "blk", "--notify", live, check=0)
    cli("resume", "blk", check=0)
    cli("run", "blk", check=0)
    receiver.wait(2)
    wait_for(lambda: notify_error(cli, "blk") is None)
    assert cli.json("status", "blk")["notify_error"] is None


# -- 4. masking ---------------------------------------------------------------------------


@pytest.mark.slow
def test_tokens_never_leave_loops_yaml(cli: CLI, receiver: Receiver) -> None:
    url = f"json://user:SECRETTOKEN@127.0.0.1:{receiver.port}/hook/SECRETTOKEN2?x=SECRETTOKEN3"
    outputs = [cli("start", "p", "--name", "sec", "--every", "1h", "--notify", url,
                   "--command", agent_command("--decide", "complete", "--summary", "S"),
                   check=0)]
    outputs.append(cli("run", "sec", check=0))
    delivered(cli, "sec", 1)
    [post] = receiver.posts
    # The tokens really were used: as basic auth and in the path (Apprise
    # keeps query arguments for its own options).
    assert post.path == "/hook/SECRETTOKEN2"
    assert post.headers["Authorization"] == "Basic " + base64.b64encode(
        b"user:SECRETTOKEN").decode()

    show = cli("show", "sec", check=0)
    assert "json://****" in show.stdout
    show_json = cli("show", "sec", "--json", check=0)
    assert json.loads(show_json.stdout)["definition"]["notify"] == ["json://****"]
    outputs += [
        show, show_json, cli("status", "sec"), cli("status", "sec", "--json"),
        cli("ls"), cli("ls", "--json"), cli("update", "sec", "--max-runs", "9", check=0),
        cli("history", "sec", "--json"), cli("events", "--json"), cli("doctor"),
        cli("digest"), cli("digest", "--json"), cli("logs", "sec", check=0),
        cli("export", "sec", "--to", "k8s", "--image", "img:1", check=0),
        cli("export", "sec", "--to", "github", "--install", "loopctl @ git+https://x/y@v1",
            check=0),
    ]
    for proc in outputs:
        assert "SECRETTOKEN" not in output(proc), proc.args
    events = cli.state_dir / "events.jsonl"
    assert events.exists() and "SECRETTOKEN" not in events.read_text()
    # With no run in flight nothing under state/ holds it (only a claimed run may).
    for path in cli.state_dir.rglob("*"):
        if path.is_file():
            assert b"SECRETTOKEN" not in path.read_bytes(), path

    loops = cli.home / "loops.yaml"
    assert "SECRETTOKEN" in loops.read_text()
    assert stat.S_IMODE(loops.stat().st_mode) == 0o600


def test_a_single_url_written_as_a_string_is_masked_too(cli: CLI) -> None:
    """loops.yaml accepts `notify: URL` (one string) as well as a list."""
    cli("start", "p", "--name", "one", "--every", "1h", "--command", agent_command(), check=0)
    loops = cli.home / "loops.yaml"
    doc = yaml.safe_load(loops.read_text())
    doc["loops"]["one"]["notify"] = "json://user:SECRETTOKEN@127.0.0.1:9/p"
    loops.write_text(yaml.safe_dump(doc))
    cli("validate", check=0)
    for proc in (cli("show", "one"), cli("show", "one", "--json"), cli("status", "one", "--json"),
                 cli("ls", "--json")):
        assert proc.returncode == 0, output(proc)
        assert "SECRETTOKEN" not in output(proc), proc.args


# -- 5. notify test ---------------------------------------------------------------------


def test_notify_test_sends_to_a_url(cli: CLI, receiver: Receiver) -> None:
    proc = cli("notify", "test", receiver.url("/t"), check=0)
    assert proc.stdout.strip() == "notify json://127.0.0.1/****: sent"
    assert str(receiver.port) not in proc.stdout
    [post] = receiver.wait(1)
    assert post.path == "/t" and post.title == "loopctl: test notification"


def test_notify_test_for_a_loop_reports_a_dead_target_and_still_sends(
        cli: CLI, receiver: Receiver, dead_url: str) -> None:
    cli("start", "p", "--name", "t", "--every", "1h", "--notify", dead_url,
        "--notify", receiver.url("/loop"), "--command", agent_command(), check=0)
    add_top_level_notify(cli, [receiver.url("/top")])
    proc = cli("notify", "test", "--loop", "t", check=1)
    assert sorted(p.path for p in receiver.posts) == ["/loop", "/top"]
    assert {p.title for p in receiver.posts} == {"loopctl: test notification"}
    assert "FAILED" in proc.stdout and proc.stdout.count(": sent") == 2
    assert dead_url not in output(proc)


def test_notify_test_names_the_target_its_owner_wrote(cli: CLI, receiver: Receiver) -> None:
    yaml = cli.home / "loops.yaml"
    yaml.parent.mkdir(parents=True, exist_ok=True)
    yaml.write_text("version: 1\nloops: {}\nnotify_targets:\n"
                    f"  team: {receiver.url('/team')}\n  ops: [{receiver.url('/ops')}]\n")
    proc = cli("notify", "test", "team", check=0)
    assert proc.stdout.strip() == "notify team (json://127.0.0.1/****): sent", proc.stdout
    cli("start", "p", "--name", "t", "--every", "1h", "--notify", "ops",
        "--notify", receiver.url("/unnamed"), "--command", agent_command(), check=0)
    results = cli.json("notify", "test", "--loop", "t")["results"]
    assert [r.get("name") for r in results] == ["ops", None], results
    assert str(receiver.port) not in cli("notify", "test", "--loop", "t", check=0).stdout


def test_a_top_level_url_written_as_a_string_is_used(cli: CLI, receiver: Receiver) -> None:
    """The top-level `notify:` passes validation as one string: it must not be ignored."""
    cli("start", "p", "--name", "plain", "--every", "1h", "--command", agent_command(), check=0)
    loops = cli.home / "loops.yaml"
    loops.write_text(f"notify: {receiver.url('/top')}\n" + loops.read_text())
    cli("validate", check=0)
    proc = cli("notify", "test", "--loop", "plain")
    assert proc.returncode == 0, output(proc)
    assert [p.path for p in receiver.posts] == ["/top"]


def test_notify_test_without_targets_is_a_usage_error(cli: CLI) -> None:
    cli("notify", "test", check=2)
    cli("start", "p", "--name", "quiet", "--every", "1h", "--command", agent_command(), check=0)
    cli("notify", "test", check=2)
    cli("notify", "test", "--loop", "quiet", check=2)


# -- 6. digest ----------------------------------------------------------------------------

LONG_SUMMARY = " ".join(["wordy"] * 50)  # 299 characters


@pytest.fixture
def digest_home(cli: CLI) -> CLI:
    """limit: paused (failure_limit); failing: failed; overdue: every 1m, ran
    once; held: paused by the user; done: completed."""
    cli("start", "p", "--name", "limit", "--every", "1h", "--max-failures", "1",
        "--command", agent_command("--exit", "1"), check=0)
    cli("start", "p", "--name", "failing", "--every", "1h",
        "--command", agent_command("--decide", "fail", "--summary", LONG_SUMMARY), check=0)
    cli("start", "p", "--name", "overdue", "--every", "1m",
        "--command", agent_command("--decide", "continue", "--summary", "step"), check=0)
    cli("start", "p", "--name", "held", "--every", "1m", "--command", agent_command(), check=0)
    cli("start", "p", "--name", "done", "--every", "1h",
        "--command", agent_command("--decide", "complete", "--summary", "shipped"), check=0)
    for name in ("limit", "failing", "overdue", "done"):
        cli("run", name)
    cli("pause", "held", check=0)
    return cli


LATE = {"LOOPCTL_CLOCK_OFFSET": "600"}


def test_digest_json_lists_who_needs_you(digest_home: CLI) -> None:
    cli = digest_home
    report = cli.json("digest", "--since", "24h", env=LATE)
    assert set(report) >= {"version", "since", "until", "needs_you", "loops"}
    assert report["version"] == 1
    needs = {item["loop"]: item for item in report["needs_you"]}
    assert set(needs) == {"limit", "failing", "overdue"}, report["needs_you"]
    assert needs["limit"]["status"] == "paused" and "failure_limit" in needs["limit"]["why"]
    assert needs["failing"]["status"] == "failed"
    assert needs["overdue"]["status"] == "active" and "overdue" in needs["overdue"]["why"]
    loops = {loop["name"]: loop for loop in report["loops"]}
    assert set(loops) == {"limit", "failing", "overdue", "held", "done"}
    for loop in loops.values():
        assert set(loop) >= {"name", "status", "reason", "runs", "cost_usd", "decisions",
                             "events"}
    assert loops["limit"]["runs"] == {"failed": 1}
    assert loops["limit"]["reason"] == "failure_limit"
    assert loops["held"]["runs"] == {} and loops["held"]["reason"] == "user"
    [decision] = loops["done"]["decisions"]
    assert decision["decision"] == "complete" and decision["summary"] == "shipped"
    assert decision["run_id"] == cli.records("done")[0]["run_id"]
    # On time, nothing is overdue.
    now = cli.json("digest")
    assert "overdue" not in {item["loop"] for item in now["needs_you"]}
    # Each loop's one status change is one event (later runs of other loops add none).
    assert [e["status"] for e in loops["done"]["events"]] == ["completed"]
    assert [e["status"] for e in loops["failing"]["events"]] == ["failed"]
    assert [e["reason"] for e in loops["limit"]["events"]] == ["failure_limit"]


def test_digest_text_puts_needs_you_first_within_80_columns(digest_home: CLI) -> None:
    text = digest_home("digest", env=LATE, check=0).stdout
    lines = text.splitlines()
    assert lines[0].startswith("loopctl digest:")
    body = [line for line in lines[1:] if line.strip()]
    assert body[0] == "Needs you"
    first_loop_section = next(i for i, line in enumerate(body[1:], 1)
                              if not line.startswith(" "))
    needs = " ".join(body[1:first_loop_section])
    for name in ("limit", "failing", "overdue"):
        assert f"{name}:" in needs
    assert "held:" not in needs and "done:" not in needs
    assert "wordy" in text
    too_long = [line for line in lines if len(line) > 80]
    assert not too_long


def test_digest_since_excludes_older_runs(digest_home: CLI) -> None:
    report = digest_home.json("digest", "--since", "1s", env={"LOOPCTL_CLOCK_OFFSET": "3600"})
    for loop in report["loops"]:
        assert (loop["runs"], loop["decisions"], loop["events"]) == ({}, [], []), loop


def test_digest_notify_posts_the_text(cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "one", "--every", "1h",
        "--command", agent_command("--decide", "continue", "--summary", "did a thing"), check=0)
    cli("run", "one", check=0)
    proc = cli("digest", "--notify", receiver.url("/d"), check=0)
    [post] = receiver.wait(1)
    assert post.title == "loopctl digest"
    text, _, tail = proc.stdout.rstrip("\n").rpartition("\n")
    assert tail == "notify json://127.0.0.1/****: sent"
    assert post.message.strip() == text.strip()
    assert "did a thing" in post.message


# -- 7. doctor --notify (dead-man's switch) -------------------------------------------------


def test_doctor_notify_is_silent_when_healthy(cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "fresh", "--every", "1h", "--command", agent_command(), check=0)
    # Paused: an active loop with no driver to fire it is itself unhealthy (issue 29).
    cli("pause", "fresh", check=0)
    cli("doctor", "--notify", receiver.url("/doctor"), check=0)
    cli("notify", "test", receiver.url("/test"), check=0)
    first = receiver.wait(1)[0]
    assert first.path == "/test" and first.title == "loopctl: test notification"
    assert len(receiver.posts) == 1


def test_doctor_notify_tells_about_an_overdue_loop(cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "late", "--every", "1m", "--command", agent_command(), check=0)
    proc = cli("doctor", "--notify", receiver.url(), env=LATE, check=1)
    assert "notify json://127.0.0.1/****: sent" in proc.stdout
    [post] = receiver.posts
    assert "overdue" in post.message and "late" in post.message
    assert "problem" in post.title


def test_doctor_notify_tells_about_an_invalid_entry(cli: CLI, receiver: Receiver) -> None:
    cli.home.mkdir(parents=True, exist_ok=True)
    loops = cli.home / "loops.yaml"
    loops.write_text("version: 1\nloops:\n  broken:\n    prompt: p\n    every: often\n")
    loops.chmod(0o600)
    cli("doctor", "--notify", receiver.url(), "--json", check=1)
    [post] = receiver.posts
    assert "broken" in post.message and "invalid" in post.message


# -- 8. import discipline -------------------------------------------------------------------


def test_a_tick_that_sends_never_imports_apprise_or_rich(
        cli: CLI, receiver: Receiver, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tick's notify branch runs (an expiry is due, the event reaches
    both targets) and Apprise is loaded only by the delivery process."""
    cli("start", "p", "--name", "quiet", "--every", "1h", "--for", "30s", "--after", "1h",
        "--notify", receiver.url(), "--command", agent_command(), check=0)
    add_top_level_notify(cli, [receiver.url("/top")])
    monkeypatch.setenv("LOOPCTL_CLOCK_OFFSET", "40")  # the loop expired 10 s ago
    modules = imported_modules("tick")
    assert {"loopctl.engine.firing", "loopctl.engine.events",
            "loopctl.integrations.notify"} <= set(modules)  # the full pass, not the fast path
    heavy = [m for m in modules if m.split(".")[0] in ("apprise", "rich")]
    assert not heavy, heavy
    posts = receiver.wait(2)
    assert sorted((p.path, p.title) for p in posts) == [("/", "loopctl: quiet expired"),
                                                        ("/top", "loopctl: quiet expired")]


def test_ls_never_imports_apprise_or_rich(cli: CLI, receiver: Receiver) -> None:
    cli("start", "p", "--name", "quiet", "--every", "1h", "--after", "1h",
        "--notify", receiver.url(), "--command", agent_command(), check=0)
    add_top_level_notify(cli, [receiver.url("/top")])
    modules = imported_modules("ls")
    assert "loopctl.cli.render" in modules  # the table was drawn
    heavy = [m for m in modules if m.split(".")[0] in ("apprise", "rich")]
    assert not heavy, heavy
