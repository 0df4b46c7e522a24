"""One query through libpq itself (with ctypes' C half: fast/cfuncs.py), for
the idle `tick` of a store home (storage/pg/idle.py): psycopg's import
alone is ~85 ms, four times a home of files' whole idle tick, while
loading libpq is ~2-3 ms. Only the first row, as text; the connection is
closed before returning. No libpq to load: NoLibpq, and the caller uses
psycopg.

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

TYPE_CHECKING = False  # not `typing`: a cost of every cron tick

if TYPE_CHECKING:
    from typing import Any

# The system's libpq (Debian's libpq5, Homebrew's), by name; psycopg-binary's
# own copy is found by its path (its file name carries a hash: candidates).
NAMES = ("libpq.so.5", "libpq.5.dylib")
CONNECTION_OK = 0
PGRES_TUPLES_OK = 2


class NoLibpq(Exception):
    """No libpq to load here."""


class QueryFailed(Exception):
    """The server could not be reached, or the query failed: the full path says why."""


def load() -> Any:
    from loopctl.fast.cfuncs import CTypes, NoCtypes

    try:
        types = CTypes()
    except NoCtypes as exc:
        raise NoLibpq(str(exc)) from None
    for name in candidates():
        try:
            library = types.open(name)
        except OSError:
            continue
        return _Libpq(types, library)
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


class _Libpq:
    """The libpq functions the query calls, typed."""

    def __init__(self, types: Any, library: Any) -> None:
        pointer, text, number = types.Pointer, types.Text, types.Int
        texts = types.pointer_to(text)
        function = library.function
        self.texts = text
        self.PQconnectdbParams = function("PQconnectdbParams", pointer, texts, texts, number)
        self.PQstatus = function("PQstatus", number, pointer)
        self.PQexecParams = function("PQexecParams", pointer, pointer, text, number, pointer,
                                     texts, pointer, pointer, number)
        self.PQresultStatus = function("PQresultStatus", number, pointer)
        self.PQntuples = function("PQntuples", number, pointer)
        self.PQnfields = function("PQnfields", number, pointer)
        self.PQgetisnull = function("PQgetisnull", number, pointer, number, number)
        self.PQgetvalue = function("PQgetvalue", text, pointer, number, number)
        self.PQclear = function("PQclear", None, pointer)
        self.PQfinish = function("PQfinish", None, pointer)


def first_row(dsn: str, timeout: int, sql: str, params: tuple[str, ...]) -> list[str | None]:
    """The first row of `sql` (`$1`... placeholders) as text, NULL as None;
    QueryFailed when there is none or anything failed."""
    lib = load()
    keys = (lib.texts * 4)(b"dbname", b"connect_timeout", b"application_name", None)
    values = (lib.texts * 4)(dsn.encode(), str(timeout).encode(), b"loopctl", None)
    conn = lib.PQconnectdbParams(keys, values, 1)  # 1: `dbname` is the whole DSN
    try:
        if not conn or lib.PQstatus(conn) != CONNECTION_OK:
            raise QueryFailed("the store did not answer")
        sent = (lib.texts * max(1, len(params)))(*[p.encode() for p in params])
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
