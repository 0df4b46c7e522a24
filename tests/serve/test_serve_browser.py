"""A person at a real browser (Debian's chromium, headless, through its
DevTools protocol): the printed URL logs in and leaves no token in the
address bar; the overview shows the loops, their status and why the last
run failed; a loop's page shows its charts; a mouse click on pause pauses
the loop; a change made elsewhere appears without a reload. One browser
for the module."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import CLI, agent_command, tool, wait_for
from serve.cdp import Browser
from serve.support import serving

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    started = Browser(tool("chromium"), tmp_path_factory.mktemp("chromium"))
    try:
        yield started
    finally:
        started.close()


def settle(browser: Browser, expression: str, timeout: float = 20.0) -> object:
    return wait_for(lambda: browser.js(expression), timeout=timeout)


def test_the_token_url_the_overview_a_loop_page_and_pause(cli: CLI, tmp_path: Path,
                                                          browser: Browser) -> None:
    cli("start", "p", "--name", "nightly-tests", "--every", "1h", "--command",
        agent_command("--print", "<b>3 tests failed</b>", "--exit", "1"), check=0)
    cli("run", "nightly-tests")
    cli("start", "p", "--name", "docs", "--every", "6h", "--after", "1h",
        "--command", agent_command(), check=0)
    with serving(tmp_path) as served:
        browser.load(served.url)
        assert browser.js("location.href") == served.base + "/", "the token is dropped"
        text = browser.js("document.body.innerText")
        assert "nightly-tests" in text and "docs" in text and "every 6h" in text
        assert "<b>3 tests failed</b>" in text, "the reason, shown as the text it is"
        assert browser.js("document.querySelectorAll('td b').length") == 0
        assert browser.js("document.cookie") == "", "the cookie is HttpOnly"
        browser.click('a[href="/loops/nightly-tests"]')
        settle(browser, "location.pathname === '/loops/nightly-tests' && "
                        "document.readyState === 'complete'")
        assert browser.js("document.querySelectorAll('svg.chart').length") == 4
        assert browser.js("document.querySelector('svg.chart rect').getAttribute('fill')") \
            == "#c62828", "the failed run is a red bar"
        assert "active" in browser.js("document.getElementById('status').innerText")
        browser.click("#do-pause")
        settle(browser, "document.getElementById('said') && "
                        "document.getElementById('said').innerText === 'paused'")
        assert "paused" in browser.js("document.getElementById('status').innerText")
        settle(browser, "window.loopctlLive && window.loopctlLive.readyState === 1")
        assert browser.js("document.getElementById('said').innerText") == "paused", \
            "the live stream leaves a page that shows the home as it is"
        browser.click("table.history a")
        settle(browser, "location.pathname.includes('/runs/') && "
                        "document.readyState === 'complete'")
        assert "<b>3 tests failed</b>" in browser.js("document.querySelector('pre.log')"
                                                     ".innerText")
        assert browser.js("getComputedStyle(document.querySelector('pre.log'))"
                          ".backgroundColor") == "rgb(38, 50, 56)", "its inline style applies"
    assert cli.state()["loops"]["nightly-tests"]["status"] == "paused"


def test_a_change_made_elsewhere_appears_without_a_reload(cli: CLI, tmp_path: Path,
                                                          browser: Browser) -> None:
    cli("start", "p", "--name", "watched", "--every", "1h", "--after", "1h",
        "--command", agent_command(), check=0)
    with serving(tmp_path) as served:
        browser.load(served.url.replace("/?token=", "/loops/watched?token="))
        settle(browser, "document.getElementById('status').innerText.includes('active')")
        browser.js("window.sameDocument = true")  # gone if the page were loaded again
        settle(browser, "window.loopctlLive && window.loopctlLive.readyState === 1")
        cli("pause", "watched", check=0)
        settle(browser, "document.getElementById('status').innerText.includes('paused')")
        assert browser.js("window.sameDocument") is True, "updated in place"


class Eavesdropper(BaseHTTPRequestHandler):
    """Another service on the same host name, another port: it keeps the
    cookies a browser sends it."""

    heard: list[str] = []

    def do_GET(self) -> None:  # the base class's name
        self.heard.append(self.headers.get("Cookie", ""))
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        self.wfile.write(b"<title>elsewhere</title>")

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_another_local_service_gets_a_session_that_opens_no_api(
        cli: CLI, tmp_path: Path, browser: Browser) -> None:
    cli("start", "p", "--name", "demo", "--every", "1h", "--after", "1h",
        "--command", agent_command(), check=0)
    other = ThreadingHTTPServer(("127.0.0.1", 0), Eavesdropper)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        with serving(tmp_path) as served:
            browser.load(served.url)
            browser.load(f"http://127.0.0.1:{other.server_address[1]}/")
            settle(browser, "document.title === 'elsewhere'")
            # The page and its favicon may each carry the cookie: the newest.
            pair = [p.strip() for c in Eavesdropper.heard for p in c.split(";")
                    if p.strip().startswith(f"loopctl_{served.port}=")][-1]
            value = pair.split("=", 1)[1]
            assert served.token not in Eavesdropper.heard[-1], "the token never left"
            stolen = {"Authorization": f"Bearer {value}", "Cookie": pair}
            assert served.request("GET", "/api/loops", headers=stolen, token=None)[0] == 401
            status, _, _ = served.request("POST", "/api/loops/demo/pause", b"",
                                          headers=stolen, token=None)
            assert status == 401
            assert served.request("GET", "/", headers={"Cookie": pair}, token=None)[0] == 200, \
                "the control: it is the browser's live session"
    finally:
        other.shutdown()
        other.server_close()
    assert cli.state()["loops"]["demo"]["status"] == "active"
