"""The files `loopctl serve` keeps in the state folder (DESIGN §19).

`serve.token`: the home's access token (0600), made at the first start and
replaced by `serve --new-token`. `serve-deliveries.json`: the ids of the
last GitHub deliveries seen, so a repeated delivery fires nothing, even
after a restart; bounded, oldest dropped first.
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
MAX_DELIVERIES = 2000
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
    """The GitHub delivery ids seen, persisted; `first` is atomic across the
    server's threads."""

    def __init__(self, paths: Paths) -> None:
        self.path = paths.state_dir / DELIVERIES_FILE
        self.lock = threading.Lock()
        self.seen: dict[str, None] = dict.fromkeys(self._read())

    def _read(self) -> list[str]:
        data = read_bounded(self.path, 1 << 20)
        try:
            ids = json.loads(data) if data else []
        except ValueError:
            return []  # a damaged list costs at worst one repeated fire
        return [i for i in ids if isinstance(i, str)][-MAX_DELIVERIES:] \
            if isinstance(ids, list) else []

    def first(self, delivery: str) -> bool:
        """True the first time `delivery` is seen (and remember it)."""
        with self.lock:
            if delivery in self.seen:
                return False
            self.seen[delivery] = None
            while len(self.seen) > MAX_DELIVERIES:
                del self.seen[next(iter(self.seen))]
            atomic_write(self.path, json.dumps(list(self.seen)).encode(), durable=False)
            return True

    def forget(self, delivery: str) -> None:
        """A delivery that fired nothing because of an error may come again."""
        with self.lock:
            self.seen.pop(delivery, None)
            atomic_write(self.path, json.dumps(list(self.seen)).encode(), durable=False)
