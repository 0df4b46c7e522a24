"""The dashboard, round 2 (DESIGN §19), as a person sees it in a real
Chromium at 1400 and 400 px: the overview opens with what needs them and
what it cost today; each loop has a strip with a cell per run (red for a
failure and for a failed check), named on hover and linked to its run; a
paused loop says why in words; at 400 px cards, no horizontal overflow and
no word cut in two; every chart label inside its SVG; the fleet timeline
has a bar per run; an answer typed on the page reaches the next run; a run
started elsewhere appears without a reload. Screenshots are kept in the
test's tmp dir."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import CLI, TESTS, agent_command, tool, wait_for
from serve.cdp import Browser
from serve.support import serving

pytestmark = pytest.mark.slow
QUESTION = 'Which database: <script>alert(1)</script> "pg" or sqlite?'
ANSWER = 'use "pg" <b>please</b>'
NO_OVERFLOW = "document.documentElement.scrollWidth <= window.innerWidth"
# Every word of every status and reason in one piece: a word cut across two
# lines has two client rects.
WORDS_WHOLE = """(() => { const bad = [];
  for (const el of document.querySelectorAll('.status, .reason')) {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const re = /\\S+/g; let m;
      while ((m = re.exec(node.data))) {
        const range = document.createRange();
        range.setStart(node, m.index); range.setEnd(node, m.index + m[0].length);
        if (range.getClientRects().length > 1) bad.push(m[0]);
      } } }
  return bad; })()"""
# Every text of every chart inside its SVG's box.
LABELS_INSIDE = """(() => { const bad = [];
  for (const svg of document.querySelectorAll('svg.chart')) {
    const box = svg.getBoundingClientRect();
    for (const t of svg.querySelectorAll('text')) {
      const r = t.getBoundingClientRect();
      if (r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.top < box.top - 0.5
          || r.bottom > box.bottom + 0.5) bad.push(t.textContent);
    } }
  return bad; })()"""


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    started = Browser(tool("chromium"), tmp_path_factory.mktemp("chromium"))
    try:
        yield started
    finally:
        started.close()


def settle(browser: Browser, expression: str, timeout: float = 20.0) -> object:
    return wait_for(lambda: browser.js(expression), timeout=timeout)


def fleet(cli: CLI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Five loops a person would have: red, red by its check, paused for no
    progress, blocked with a question, and a claude loop that costs."""
    monkeypatch.setenv("PATH", f"{TESTS / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cli("start", "p", "--name", "nightly-tests", "--every", "1h", "--command",
        agent_command("--print", "<b>3 tests failed</b>", "--exit", "1"),
        "--max-failures", "9", check=0)
    cli("start", "p", "--name", "lint-fixer", "--every", "1h", "--command", agent_command(),
        "--check", "false", check=0)
    cli("start", "p", "--name", "stuck", "--every", "1h", "--no-progress", "2", "--agent",
        "claude", "--env", "FAKE_COST=0", "--env", "FAKE_RESULT=same again", "--sandbox", "off",
        check=0)
    calls = tmp_path / "asks.jsonl"
    cli("start", "p", "--name", "asks", "--every", "1h", "--command",
        agent_command("--record", str(calls), "--decide", "block", "--summary", QUESTION),
        check=0)
    cli("start", "the work", "--name", "docs", "--every", "6h", "--agent", "claude",
        "--env", "FAKE_COST=0.138", "--sandbox", "off", check=0)
    for name, times in (("nightly-tests", 3), ("lint-fixer", 2), ("stuck", 2), ("asks", 1),
                        ("docs", 2)):
        for _ in range(times):
            cli("run", name)
    return calls


def test_the_overview_answers_what_needs_me_at_1400_and_400_px(
        cli: CLI, tmp_path: Path, browser: Browser, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet(cli, tmp_path, monkeypatch)
    with serving(tmp_path) as served:
        browser.width(1400)
        browser.load(served.url)
        browser.screenshot(tmp_path / "overview-1400.png")
        count = "document.querySelector('#count-{}').innerText"
        assert browser.js(count.format("needs_you")) == "2 need you"  # stuck, asks
        assert browser.js(count.format("failing")) == "2 failing"  # nightly-tests, lint-fixer
        assert browser.js("document.getElementById('spent-today').innerText") == "$0.28"
        cells = "document.querySelectorAll('tr[data-loop=\"{}\"] .cell{}').length"
        assert browser.js(cells.format("nightly-tests", "")) == 3
        assert browser.js(cells.format("nightly-tests", ".red")) == 3
        assert browser.js(cells.format("lint-fixer", ".red")) == 2, "a failed check is red"
        assert browser.js(cells.format("docs", ".red")) == 0
        assert browser.js(cells.format("docs", "")) == 2
        hover = browser.js("document.querySelector('tr[data-loop=\"nightly-tests\"] .cell')"
                           ".title")
        run_id = cli.records("nightly-tests")[0]["run_id"]
        assert hover == f"{run_id}: failed: <b>3 tests failed</b>"
        text = browser.js("document.body.innerText")
        assert "no_progress: 2 identical results in a row" in text
        assert browser.js(NO_OVERFLOW)
        browser.width(400)
        browser.load(served.base + "/")
        browser.screenshot(tmp_path / "overview-400.png")
        assert browser.js(NO_OVERFLOW), "no horizontal scroll at 400 px"
        assert browser.js("getComputedStyle(document.querySelector('table.loops tr.loop'))"
                          ".display") == "block", "one card per loop"
        assert browser.js(WORDS_WHOLE) == []
        assert browser.js("document.querySelectorAll('.reason script, .reason b').length") == 0
        browser.click('tr[data-loop="nightly-tests"] .cell')
        settle(browser, "location.pathname.includes('/runs/" + run_id + "')")


def test_charts_and_the_timeline_keep_their_labels_inside(
        cli: CLI, tmp_path: Path, browser: Browser, monkeypatch: pytest.MonkeyPatch) -> None:
    fleet(cli, tmp_path, monkeypatch)
    with serving(tmp_path) as served:
        for width in (1400, 400):
            browser.width(width)
            browser.load(served.url.replace("/?token=", "/loops/docs?token="))
            browser.screenshot(tmp_path / f"docs-{width}.png")
            assert browser.js(LABELS_INSIDE) == []
            assert browser.js(NO_OVERFLOW)
            ticks = browser.js("[...document.querySelectorAll('svg.chart text.tick')]"
                               ".map(t => t.textContent)")
            assert "$0.28" in ticks or "$0.50" in ticks, ticks
            assert browser.js("document.querySelectorAll('svg.chart text.legend').length") >= 3
            browser.load(served.base + "/timeline")
            browser.screenshot(tmp_path / f"timeline-{width}.png")
            assert browser.js(LABELS_INSIDE) == []
            assert browser.js("document.querySelectorAll('svg.chart rect.run').length") == 10
            assert browser.js("document.querySelectorAll('svg.chart rect.run[fill=\"#c62828\"]')"
                              ".length") == 5
            assert browser.js(NO_OVERFLOW)


def test_an_answer_typed_on_the_page_reaches_the_next_run(
        cli: CLI, tmp_path: Path, browser: Browser, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fleet(cli, tmp_path, monkeypatch)
    with serving(tmp_path) as served:
        browser.width(400)
        browser.load(served.url.replace("/?token=", "/loops/asks?token="))
        assert browser.js("document.getElementById('asked').innerText") == QUESTION
        assert browser.js(NO_OVERFLOW)
        browser.click("#answer")
        browser.call("Input.insertText", text=ANSWER)
        browser.screenshot(tmp_path / "answer-400.png")
        browser.click("#do-answer")
        settle(browser, "document.getElementById('said') && "
                        "document.getElementById('said').innerText.includes('your answer')")
        assert not browser.js("document.getElementById('question')")
    cli("run", "asks")
    second = [json.loads(line) for line in calls.read_text().splitlines()][1]
    assert Path(second["env"]["LOOPCTL_ANSWER_FILE"]).read_text() == ANSWER


def test_a_run_started_elsewhere_appears_in_the_strip_without_a_reload(
        cli: CLI, tmp_path: Path, browser: Browser) -> None:
    cli("start", "p", "--name", "watched", "--every", "1h", "--after", "1h",
        "--command", agent_command(), check=0)
    cli("run", "watched")
    with serving(tmp_path) as served:
        browser.width(1400)
        browser.load(served.url)
        browser.js("window.sameDocument = true")
        settle(browser, "window.loopctlLive && window.loopctlLive.readyState === 1")
        cli("run", "watched")
        settle(browser, "document.querySelectorAll('tr[data-loop=\"watched\"] .cell').length"
                        " === 2")
        assert browser.js("window.sameDocument") is True, "updated in place"
