"""The files `loopctl serve` keeps in the state folder (DESIGN §19).

`serve.token`: the home's access token (0600), made at the first start and
replaced by `serve --new-token`. `serve-deliveries.json`: the ids and body
digests of the last GitHub deliveries seen, so a repeated delivery fires
nothing, even after a restart; bounded, oldest dropped first.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from pathlib import Path

from loopctl.domain.errors import UnreadableError
from loopctl.storage.atomic import atomic_write
from loopctl.storage.paths import Paths, ensure_dir, read_bounded

TOKEN_FILE = "serve.token"
DELIVERIES_FILE = "serve-deliveries.json"
MAX_DELIVERIES = 4000  # keys: two per delivery
TOKEN_BYTES = 32


def token_path(paths: Paths) -> Path:
    return paths.state_dir / TOKEN_FILE


def load_token(paths: Paths, renew: bool = False) -> tuple[str, bool]:
    """The home's token, and whether it was made now. A file that is not a
    token (empty, damaged, a symlink) is refused, not silently replaced:
    `--new-token` replaces it."""
    path = token_path(paths)
    if not renew and os.path.lexists(path):
        data = read_bounded(path, 4096)
        text = data.decode("ascii", "replace").strip() if data is not None else ""
        if data is None or len(text) < 32 or not _urlsafe(text):
            raise UnreadableError(f"{path} is not a loopctl token; replace it with "
                                  "`loopctl serve --new-token`")
        return text, False
    ensure_dir(paths.state_dir)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    atomic_write(path, token.encode() + b"\n")
    return token, True


def _urlsafe(text: str) -> bool:
    return all(c.isalnum() or c in "-_" for c in text)


class Deliveries:
    """The GitHub deliveries seen, persisted, each under two keys: its
    `X-GitHub-Delivery` id and its body's SHA-256 (the signature does not
    cover the id, so a captured body re-sent under a fresh id is the same
    delivery). A delivery is settled `done`, or `partial` with the loops it
    fired before an error (its redelivery fires only the others); one in
    flight is a duplicate to a concurrent copy. Atomic across the server's
    threads; bounded, oldest dropped first."""

    def __init__(self, paths: Paths) -> None:
        self.path = paths.state_dir / DELIVERIES_FILE
        self.lock = threading.Lock()
        self.seen: dict[str, list[str] | None] = self._read()  # None: done
        self.flying: set[str] = set()

    def _read(self) -> dict[str, list[str] | None]:
        data = read_bounded(self.path, 4 << 20)
        try:
            rows = json.loads(data) if data else []
        except ValueError:
            return {}  # a damaged list costs at worst one repeated fire
        if not isinstance(rows, list):
            return {}
        seen: dict[str, list[str] | None] = {}
        for row in rows[-MAX_DELIVERIES:]:
            if isinstance(row, str):  # the format before body digests: done ids
                seen[row] = None
            elif isinstance(row, list) and len(row) == 2 and isinstance(row[0], str):
                fired = row[1]
                seen[row[0]] = [n for n in fired if isinstance(n, str)] \
                    if isinstance(fired, list) else None
        return seen

    def claim(self, keys: list[str]) -> list[str] | None:
        """None when a key was settled done or is in flight (a duplicate);
        else the loops an earlier attempt fired (to skip), and the keys are
        in flight until `settle`."""
        with self.lock:
            if any(key in self.flying or (key in self.seen and self.seen[key] is None)
                   for key in keys):
                return None
            self.flying.update(keys)
            return sorted({n for key in keys for n in self.seen.get(key) or []})

    def settle(self, keys: list[str], fired: list[str] | None) -> None:
        """Done (`fired` None) or partial with the loops fired so far."""
        with self.lock:
            self.flying.difference_update(keys)
            for key in keys:
                self.seen.pop(key, None)
                self.seen[key] = None if fired is None else sorted(fired)
            while len(self.seen) > MAX_DELIVERIES:
                del self.seen[next(iter(self.seen))]
            rows = [[key, fired] for key, fired in self.seen.items()]
            atomic_write(self.path, json.dumps(rows).encode(), durable=False)
