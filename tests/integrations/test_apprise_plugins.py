"""Apprise loads only the plugins the URLs need (loopctl/integrations/
apprise_plugins.py), and says so loudly when a new Apprise stops loading the
way that module leans on. Each scenario runs in a fresh Python process:
Apprise's plugin manager is one per process."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from integrations.test_notify import Receiver, receiver  # noqa: F401 - a fixture

# Prints what a process that ran SCRIPT's body holds afterwards.
_REPORT = """
import json, sys
from apprise import NotificationManager
print(json.dumps({
    "modules": sorted({m.split(".")[2] for m in sys.modules if m.startswith("apprise.plugins.")
                       and m != "apprise.plugins.base"}),
    "schemes": sorted(NotificationManager().schemas()),
    "result": result,
}))
"""


def _in_fresh_process(body: str) -> tuple[dict[str, Any], str]:
    """What a new Python that ran `body` (which sets `result`) holds, and its stderr."""
    ran = subprocess.run([sys.executable, "-c", body + _REPORT], capture_output=True,
                         text=True, timeout=120, check=True)
    return json.loads(ran.stdout.splitlines()[-1]), ran.stderr


def test_a_delivery_and_a_check_load_only_the_plugins_of_their_urls(
        receiver: Receiver) -> None:  # noqa: F811
    url = receiver.url("/hook")
    held, err = _in_fresh_process(f"""
from loopctl.integrations import notify
checked = notify.check_urls(["ntfy://topic", "none", "mailto://u:p@example.com"])
result = [checked, notify.send([{url!r}], "title", "body")]
""")
    checked, sent = held["result"]
    assert checked == ["ntfy://topic", "mailto://u:p@example.com"]
    assert [r["ok"] for r in sent] == [True]
    assert receiver.wait(1)[0].title == "title"
    assert held["modules"] == ["custom_json", "email", "ntfy"], held["modules"]
    # Exactly the three plugins' schemes: json(s), ntfy(s), mailto(s).
    assert held["schemes"] == ["json", "jsons", "mailto", "mailtos", "ntfy", "ntfys"]
    assert err == ""


def test_a_scheme_the_scan_cannot_place_loads_every_plugin() -> None:
    # kodi's class computes its protocol: found only by a full load, after a
    # partial one; then every scheme is known (slack's plugin was not loaded).
    held, err = _in_fresh_process("""
from loopctl.integrations import notify
result = [notify.check_urls(["json://127.0.0.1:9/x"]), notify.check_urls(["kodi://host"]),
          notify.check_urls(["slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"])]
""")
    assert held["result"] == [["json://127.0.0.1:9/x"], ["kodi://host"],
                              ["slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"]]
    assert len(held["modules"]) > 100 and "kodi" in held["schemes"]
    assert err == ""


def test_every_scheme_is_placed_where_a_full_load_puts_it() -> None:
    # The canary for a new Apprise: the source scan must agree with Apprise's
    # own loading on every scheme it places, and place nearly all of them.
    held, _ = _in_fresh_process("""
from apprise import NotificationManager
from loopctl.integrations.apprise_plugins import declared, plugin_sources
manager = NotificationManager()
placed = {}
for module, paths in plugin_sources():
    for path in paths:
        for scheme in declared(open(path, "rb").read()):
            placed.setdefault(scheme, set()).add(module)
full = {s: manager[s].__module__.split(".")[2] for s in manager.schemas()}
result = {"wrong": {s: sorted(m) for s, m in placed.items() if s in full and m != {full[s]}},
          "unplaced": sorted(set(full) - set(placed)), "count": len(full)}
""")
    result = held["result"]
    assert result["wrong"] == {}
    assert result["count"] > 100
    # 7 with Apprise 2.3 (dbus, kde, kodi, kodis, qt, xbmc, xbmcs): each still
    # works, through a full load, but many more means the scan went stale.
    assert len(result["unplaced"]) <= 12, result["unplaced"]
