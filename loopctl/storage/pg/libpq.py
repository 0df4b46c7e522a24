"""One query through libpq itself (ctypes), for the idle `tick` of a store
home (storage/pg/idle.py): psycopg's import alone is ~85 ms, four times a
home of files' whole idle tick, while loading libpq is ~2-3 ms. Only the
first row, as text; the connection is closed before returning. No libpq
to load: NoLibpq, and the caller uses psycopg.

Which libpq: the one psycopg itself uses, so the idle query connects as
the full path does (the same defaults, sslmode and gssencmode `prefer`,
and the same TLS and GSSAPI libraries): psycopg-binary's own copy when
psycopg would take it (no psycopg-c installed, PSYCOPG_IMPL unset or
`binary`), else the system's by name. The copy psycopg-binary carries also
loads faster (~2.4 ms against ~3.3 for Debian's, whose LDAP library pulls
in GnuTLS too). The connection parameters are the user's alone: none is
added but the timeout and application_name (see bench/README.md for what
gssencmode and sslmode cost on a local server: a fraction of a millisecond,
not worth a default that could differ from libpq's own outcome)."""

from __future__ import annotations

import ctypes

TYPE_CHECKING = False  # not `typing`: a cost of every cron tick

if TYPE_CHECKING:
    from typing import Any

# The system's libpq (Debian's libpq5, Homebrew's); psycopg-binary's own
# copy is not loaded by name (its file name carries a hash).
NAMES = ("libpq.so.5", "libpq.5.dylib")
CONNECTION_OK = 0
PGRES_TUPLES_OK = 2


class NoLibpq(Exception):
    """No libpq to load here."""


class QueryFailed(Exception):
    """The server could not be reached, or the query failed: the full path says why."""


def load() -> Any:
    for name in candidates():
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        return _typed(lib)
    raise NoLibpq("no libpq to load")


def candidates() -> list[str]:
    """The libpq psycopg would use first (psycopg/pq/__init__.py: its C
    build, on the system's libpq, else psycopg-binary with its own copy),
    then the system's."""
    import os

    impl = os.environ.get("PSYCOPG_IMPL", "").lower()
    bundled = None if impl not in ("", "binary") else psycopg_binary_libpq()
    return [bundled, *NAMES] if bundled else list(NAMES)


def psycopg_binary_libpq() -> str | None:
    """The path of psycopg-binary's libpq where `import psycopg_binary` would
    find the package (None: not installed, or psycopg-c is, which psycopg
    prefers). Searched along sys.path without importing either: an import
    is the cost this module exists to avoid."""
    import os
    import sys

    entries = [entry or os.curdir for entry in sys.path]
    if any(os.path.isdir(os.path.join(entry, "psycopg_c")) for entry in entries):
        return None
    for entry in entries:
        if not os.path.isdir(os.path.join(entry, "psycopg_binary")):
            continue
        for libs in (os.path.join(entry, "psycopg_binary.libs"),  # auditwheel (Linux)
                     os.path.join(entry, "psycopg_binary", ".dylibs")):  # delocate (macOS)
            try:
                names = sorted(os.listdir(libs))
            except OSError:
                continue
            for name in names:
                if name.startswith(("libpq-", "libpq.")) and (".so" in name or
                                                               name.endswith(".dylib")):
                    return os.path.join(libs, name)
        return None  # the package psycopg imports carries no libpq of its own here
    return None


def _typed(lib: Any) -> Any:
    pointer, text, number = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    lib.PQconnectdbParams.restype = pointer
    lib.PQconnectdbParams.argtypes = [ctypes.POINTER(text), ctypes.POINTER(text), number]
    lib.PQstatus.argtypes, lib.PQstatus.restype = [pointer], number
    lib.PQexecParams.restype = pointer
    lib.PQexecParams.argtypes = [pointer, text, number, pointer, ctypes.POINTER(text),
                                 pointer, pointer, number]
    lib.PQresultStatus.argtypes, lib.PQresultStatus.restype = [pointer], number
    for name in ("PQntuples", "PQnfields"):
        getattr(lib, name).argtypes, getattr(lib, name).restype = [pointer], number
    lib.PQgetisnull.argtypes, lib.PQgetisnull.restype = [pointer, number, number], number
    lib.PQgetvalue.argtypes, lib.PQgetvalue.restype = [pointer, number, number], text
    lib.PQclear.argtypes = [pointer]
    lib.PQfinish.argtypes = [pointer]
    return lib


def first_row(dsn: str, timeout: int, sql: str, params: tuple[str, ...]) -> list[str | None]:
    """The first row of `sql` (`$1`... placeholders) as text, NULL as None;
    QueryFailed when there is none or anything failed."""
    lib = load()
    keys = (ctypes.c_char_p * 4)(b"dbname", b"connect_timeout", b"application_name", None)
    values = (ctypes.c_char_p * 4)(dsn.encode(), str(timeout).encode(), b"loopctl", None)
    conn = lib.PQconnectdbParams(keys, values, 1)  # 1: `dbname` is the whole DSN
    try:
        if not conn or lib.PQstatus(conn) != CONNECTION_OK:
            raise QueryFailed("the store did not answer")
        sent = (ctypes.c_char_p * max(1, len(params)))(*[p.encode() for p in params])
        result = lib.PQexecParams(conn, sql.encode(), len(params), None, sent, None, None, 0)
        try:
            if lib.PQresultStatus(result) != PGRES_TUPLES_OK or lib.PQntuples(result) < 1:
                raise QueryFailed("the query failed")
            return [None if lib.PQgetisnull(result, 0, i)
                    else lib.PQgetvalue(result, 0, i).decode()
                    for i in range(lib.PQnfields(result))]
        finally:
            lib.PQclear(result)
    finally:
        lib.PQfinish(conn)
