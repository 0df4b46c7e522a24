"""The pages (DESIGN §19): every string from a user, a hand-edited
loops.yaml or an agent is text, never markup; the charts are inline SVG
made by the server; the page asks nothing of another origin."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from conftest import CLI, agent_command, wait_for
from serve.support import Served, serving

HOSTILE = '<script>alert(1)</script> "quoted" <img src=x onerror=alert(2)>'


class Elements(HTMLParser):
    """Every start tag with its attributes, as a browser would parse them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def elements(page: bytes) -> list[tuple[str, dict[str, str | None]]]:
    parser = Elements()
    parser.feed(page.decode())
    return parser.tags


def page(served: Served, path: str) -> bytes:
    status, _, body = served.request("GET", path)
    assert status == 200, (path, status, body[:300])
    return body


def assert_inert(body: bytes) -> None:
    tags = elements(body)
    scripts = [attrs for tag, attrs in tags if tag == "script"]
    assert scripts in ([], [{"src": "/static/app.js", "defer": None}]), scripts
    assert not [t for t, _ in tags if t == "img"], "no element came from the text"
    assert not any(k.startswith("on") for _, attrs in tags for k in attrs), "no handler"
    for _, attrs in tags:
        for key in ("src", "href", "action"):
            value = attrs.get(key)
            assert value is None or value.startswith("/"), f"{key}={value}: another origin"


def test_hostile_text_is_shown_as_text_everywhere(cli: CLI, tmp_path: Path) -> None:
    cli("start", HOSTILE, "--name", "demo", "--every", "1h", "--command",
        agent_command("--print", HOSTILE, "--exit", "1"), check=0)
    cli("run", "demo")
    cli("pause", "demo", check=0)
    loops = cli.home / "loops.yaml"
    # A hand-edited entry whose name no command would accept: shown as invalid.
    loops.write_text(loops.read_text() + '  "<b onclick=x>\\"evil</b>":\n    prompt: 1\n')
    with serving(tmp_path) as served:
        overview = page(served, "/")
        loop = page(served, "/loops/demo")
        doctor = page(served, "/doctor")
    for body in (overview, loop, doctor):
        assert_inert(body)
    assert b"&lt;script&gt;alert(1)&lt;/script&gt; &quot;quoted&quot;" in loop, "the prompt"
    assert loop.count(b"&lt;img src=x onerror=alert(2)&gt;") >= 3, \
        "prompt, last reason and the history's reason"
    assert b"&lt;img src=x onerror=alert(2)&gt;" in overview, "the reason on the overview"
    assert b"&lt;b onclick=x&gt;&quot;evil&lt;/b&gt;" in overview, "the hand-edited name"
    assert b"invalid" in overview


def test_a_loop_page_has_its_four_charts_and_its_history(cli: CLI, tmp_path: Path) -> None:
    cli("start", "p", "--name", "demo", "--every", "1h", "--command",
        agent_command("--print", "done"), "--check", "echo metric: 3",
        "--check-metric", r"metric: (\d+)", check=0)
    for _ in range(3):
        cli("run", "demo")
    with serving(tmp_path) as served:
        body = page(served, "/loops/demo")
        overview = page(served, "/")
        status, headers, css = served.request("GET", "/static/app.css")
    charts = re.findall(rb'<svg class="chart"[^>]*aria-label="([^"]+)"', body)
    assert charts == [b"Outcome per run", b"Duration per run",
                      b"Cost per day (UTC)", b"Check metric per run"]
    bars = body.split(b'aria-label="Outcome per run"', 1)[1].split(b"</svg>", 1)[0]
    assert len(re.findall(rb'<rect [^>]*><title>', bars)) == 3, "one bar per run"
    metric = body.split(b'aria-label="Check metric per run"', 1)[1].split(b"</svg>", 1)[0]
    assert metric.count(b"<circle ") == 3 and b": 3</title>" in metric
    assert body.count(b'<td class="o-ok">ok</td>') == 3
    assert b'<a href="/loops/demo">demo</a>' in overview
    assert status == 200 and headers["content-type"].startswith("text/css") and css
    own = body.replace(b'xmlns="http://www.w3.org/2000/svg"', b"")
    assert b"http://" not in own and b"https://" not in own, "nothing from another origin"


def test_a_loop_page_shows_the_log_of_the_run_in_flight_and_the_notes(
        cli: CLI, tmp_path: Path) -> None:
    go = tmp_path / "go"
    cli("start", "p", "--name", "busy", "--every", "1h", "--after", "1h", "--notes",
        "--command", agent_command("--print", "working on <it> & more", "--wait-for", str(go)),
        check=0)
    (cli.state_dir / "notes").mkdir(parents=True, exist_ok=True)
    (cli.state_dir / "notes" / "busy.md").write_text("remember </pre><script>x</script>\n")
    with serving(tmp_path) as served:
        assert served.json("POST", "/api/loops/busy/run")[0] == 202
        run_id = cli.state()["loops"]["busy"]["run"]["run_id"]
        log = cli.state_dir / "runs" / "busy" / f"{run_id}.log"
        wait_for(lambda: b"working on" in log.read_bytes())
        body = page(served, "/loops/busy")
        go.touch()
    assert_inert(body)
    assert f"Run in flight: {run_id}".encode() in body
    assert b"working on &lt;it&gt; &amp; more" in body
    assert b"remember &lt;/pre&gt;&lt;script&gt;x&lt;/script&gt;" in body
    wait_for(lambda: cli.records("busy"), timeout=30)


def test_a_run_is_one_html_file_that_reads_the_same_saved(cli: CLI, tmp_path: Path) -> None:
    import base64
    import hashlib

    cli("start", "p", "--name", "demo", "--every", "1h", "--command",
        agent_command("--print", "<i>said</i> & done", "--exit", "2"), check=0)
    cli("run", "demo")
    [record] = cli.records("demo")
    run_id = record["run_id"]
    folder = cli.state_dir / "runs" / "demo"
    planted = "20991231T000000Z-9999"
    (folder / f"{planted}.json").write_text((folder / f"{run_id}.json").read_text())
    (folder / f"{planted}.log").write_text("planted\n")
    with serving(tmp_path) as served:
        listing = page(served, "/loops/demo")
        status, headers, body = served.request("GET", f"/loops/demo/runs/{run_id}?download=1")
        for bad in (planted, "..%2F..%2Fstate", "nope"):
            assert served.request("GET", f"/loops/demo/runs/{bad}")[0] == 404, bad
    assert f'href="/loops/demo/runs/{run_id}"'.encode() in listing
    assert status == 200
    assert headers["content-disposition"] == f'attachment; filename="demo-{run_id}.html"'
    assert_inert(body)
    assert b"&lt;i&gt;said&lt;/i&gt; &amp; done" in body and b"failed" in body
    style = body.split(b"<style>", 1)[1].split(b"</style>", 1)[0]
    digest = base64.b64encode(hashlib.sha256(style).digest()).decode()
    assert headers["content-security-policy"].startswith(
        f"default-src 'none'; style-src 'sha256-{digest}'"), "only its own style may apply"
    assert b"<link" not in body and b"<script" not in body, "nothing to fetch once saved"


def test_a_run_page_seeks_to_the_tail_of_a_huge_log(cli: CLI, tmp_path: Path) -> None:
    """A page shows the last MiB of a log: it seeks there (a 2 GiB log was
    read whole up to 1 GiB, and past that showed nothing at all)."""
    cli("start", "p", "--name", "demo", "--every", "1h", "--command",
        agent_command("--print", "first"), check=0)
    cli("run", "demo")
    [record] = cli.records("demo")
    log = cli.state_dir / "runs" / "demo" / f"{record['run_id']}.log"
    with log.open("r+b") as f:  # sparse: 2 GiB on disk costs nothing
        f.truncate(2 << 30)
        f.seek(0, 2)
        f.write(b"\nTHE-LAST-LINE\n")
    with serving(tmp_path) as served:
        body = page(served, f"/loops/demo/runs/{record['run_id']}")
    assert b"THE-LAST-LINE" in body and b"(the last MiB)" in body
    assert len(body) < 4 << 20


def test_read_tail_follows_no_link_and_blocks_on_no_fifo(tmp_path: Path) -> None:
    import os

    from loopctl.storage.paths import read_tail

    short = tmp_path / "short.log"
    short.write_bytes(b"abcdef")
    assert read_tail(short, 4) == (b"cdef", True)
    assert read_tail(short, 64) == (b"abcdef", False)
    (tmp_path / "link.log").symlink_to(short)
    os.mkfifo(tmp_path / "fifo.log")
    for planted in ("link.log", "fifo.log", "missing.log"):
        assert read_tail(tmp_path / planted, 64) is None, planted
