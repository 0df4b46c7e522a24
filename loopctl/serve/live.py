"""`GET /api/events`: server-sent events telling an open page that the home
changed (loops.yaml or state.json written), so it can fetch itself again.
Each event names the home's version (`home_signature`): one at once on
connecting (the page may be stale already), then one per change, and a
comment every HEARTBEAT_S so proxies keep it open."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

from loopctl.serve.server import Response
from loopctl.storage.paths import file_signature
from loopctl.storage.store import Store

POLL_S = 1.0
HEARTBEAT_S = 15.0
MAX_STREAMS = 16
_streams = threading.BoundedSemaphore(MAX_STREAMS)


def home_signature(paths: Any) -> str:
    """Which version of the home a page shows: it changes with every write
    of loops.yaml or state.json. A page carries the one it was made from,
    and asks for itself again only when the stream names another."""
    return json.dumps([file_signature(paths.loops_file), file_signature(paths.state_file)],
                      separators=(",", ":"))


def stream(app: Any) -> Response:
    if not _streams.acquire(blocking=False):
        from loopctl.serve.server import error

        return error(503, f"at most {MAX_STREAMS} live pages at once; reload later")
    paths = Store().paths

    def run(write: Callable[[bytes], None]) -> None:
        try:
            seen, beat = None, time.monotonic()
            while not app.stopping:
                now = home_signature(paths)
                if now != seen:
                    write(f"event: change\ndata: {now}\n\n".encode())
                    seen, beat = now, time.monotonic()
                elif time.monotonic() - beat >= HEARTBEAT_S:
                    write(b": still here\n\n")
                    beat = time.monotonic()
                time.sleep(POLL_S)
        finally:
            _streams.release()

    return Response(200, ctype="text/event-stream", stream=run,
                    headers=[("X-Accel-Buffering", "no")])
