"""Opening the team store: psycopg imported here only, on first use, and
every failure to reach the server turned into one line (exit 3: a home
whose store cannot be read fails closed, DESIGN §8)."""

from __future__ import annotations

import os

from loopctl.domain.errors import UnreadableError
from loopctl.storage.pg.dsn import redact

TYPE_CHECKING = False  # not `typing`: the idle tick imports this module

if TYPE_CHECKING:
    from typing import Any

INSTALL = "pip install 'loopctl[postgres]'"
ENV_TIMEOUT = "LOOPCTL_STORE_TIMEOUT"
DEFAULT_TIMEOUT = 5


class StoreUnreachable(UnreadableError):
    """The server did not answer, refused us, or the driver is missing."""


def driver() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreUnreachable(f"a store is set but psycopg is not installed: {INSTALL}") \
            from None
    return psycopg


def connect_timeout() -> int:
    """Seconds to wait for the server (libpq's connect_timeout, at least 2)."""
    text = os.environ.get(ENV_TIMEOUT, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise UnreadableError(f"{ENV_TIMEOUT}={text!r}: expected whole seconds, like 5")
    return max(2, int(text))


def connect(dsn: str, **options: Any) -> Any:
    """An autocommit connection (each change in an explicit transaction);
    `options`: more libpq parameters (keepalives)."""
    psycopg = driver()
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout(),
                               application_name="loopctl", **options)
    except psycopg.Error as exc:
        raise StoreUnreachable(f"store {redact(dsn)} is unreachable: {first_line(exc)}") \
            from None


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__
