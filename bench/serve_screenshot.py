"""The README's screenshot of `loopctl serve`'s overview (`python
bench/serve.py --screenshot man/serve-overview.png`): a few loops, some
runs, served, loaded in headless chromium through the token URL."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from _common import Workspace, env_for, loop_entry, loopctl, write_loops

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

LOOPS = [
    ("nightly-tests", ["sh", "-c", "echo 3 tests failed in test_api.py; exit 1"], "1h", 2),
    ("dependency-bumps", ["sh", "-c", "echo bumped 2 packages"], "6h", 3),
    ("docs-drift", ["sh", "-c", "echo docs match the code"], "1d", 1),
    ("flaky-hunt", ["sh", "-c", "echo nothing flaky today"], "30m", 4),
    ("triage", ["sh", "-c", "echo labelled 4 issues"], None, 1),
]


def screenshot(path: Path) -> None:
    from serve.cdp import Browser

    with Workspace("screenshot") as ws:
        home = ws.home()
        write_loops(home, [loop_entry(name, command, every=every or "1h", after="1h",
                                      budget_usd=5.0) for name, command, every, _ in LOOPS])
        env = env_for(home)
        for name, _, _, runs in LOOPS:
            for _ in range(runs):
                subprocess.run(loopctl("run", name), env=env, capture_output=True, check=False)
        subprocess.run(loopctl("pause", "docs-drift"), env=env, capture_output=True, check=True)
        server = subprocess.Popen(loopctl("serve", "--bind", "127.0.0.1:0", "--quiet"), env=env,
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            url = server.stdout.readline().split("open ", 1)[1].strip()
            browser = Browser(shutil.which("chromium") or "chromium", ws.root / "chromium")
            try:
                browser.load(url)
                browser.call("Emulation.setDeviceMetricsOverride", width=1180, height=420,
                             deviceScaleFactor=1, mobile=False)
                browser.screenshot(path)
            finally:
                browser.close()
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(f"wrote {path}")
