"""Which store a home uses, and what may be written to name it.

`store: postgresql://USER@HOST[:PORT]/DB` at the top of loops.yaml, or
`LOOPCTL_STORE` (which wins). loops.yaml is kept in git and copied between
machines, so a password there is refused: libpq reads it from its own
sources (`PGPASSWORD`, `~/.pgpass`, a service file). Pure text checks: no
psycopg is needed to refuse a bad DSN, and a plain one (`plain`) needs no
urllib either: its import (with `re`, `ipaddress`...) is a tenth of a store
home's idle `tick`.
"""

from __future__ import annotations

import os

from loopctl.domain.errors import UnreadableError
from loopctl.storage.pg.gate import ENV_STORE

ENV_MACHINE = "LOOPCTL_MACHINE"
SCHEMES = ("postgresql", "postgres")
WAY_OUT = ("give the password through PGPASSWORD, ~/.pgpass or a service file "
           "(PGSERVICEFILE), never in loops.yaml")
EXPECTED = "expected postgresql://USER@HOST[:PORT]/DB"
# The libpq parameters a loops.yaml DSN may carry: where the server is, who
# connects, and how the link is secured. loops.yaml travels (git, a pasted
# file, a pull request), so the others are refused there: `passfile` and
# `service`/`servicefile` would pick which local secret is sent, `options`
# sets server settings for every session (read-only transactions, a
# search_path), `requirepeer`/`gss*`/`krb*` change who proves what. The
# environment (LOOPCTL_STORE) may carry any: it is the machine owner's.
FILE_PARAMETERS = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "sslmode", "sslrootcert", "sslcert", "sslkey",
    "sslcrl", "sslnegotiation", "channel_binding", "connect_timeout", "application_name",
    "target_session_attrs", "load_balance_hosts", "keepalives", "keepalives_idle",
    "keepalives_interval", "keepalives_count", "tcp_user_timeout",
})


MAX_DSN = 4096  # characters: a real one is a few hundred at most


def check_dsn(text: object, where: str, in_file: bool) -> str:
    """`text` when it names a PostgreSQL database; else an UnreadableError
    (exit 3) saying what was wrong. `in_file`: it came from loops.yaml,
    where no password may be written."""
    if not isinstance(text, str) or not text.strip():
        raise UnreadableError(f"{where}: store must be a PostgreSQL URL; {EXPECTED}")
    dsn = text.strip()
    if len(dsn) <= MAX_DSN and plain(dsn):
        return dsn  # nothing below refuses it, in a file or not
    return _checked(dsn, where, in_file)


def _checked(dsn: str, where: str, in_file: bool) -> str:
    """check_dsn's checks, whole (urllib's parse)."""
    from urllib.parse import urlsplit

    if not dsn.isprintable():
        # A newline could start another line of the systemd environment file
        # an export writes it to, and no PostgreSQL URL holds one.
        raise UnreadableError(f"{where}: store {shown(dsn)!r} holds a control character; "
                              f"{EXPECTED}")
    scheme = dsn.partition("://")[0].lower() if "://" in dsn else ""
    if scheme not in SCHEMES:
        raise UnreadableError(f"{where}: store {shown(dsn)!r} is not a PostgreSQL URL; "
                              f"{EXPECTED}")
    if len(dsn) > MAX_DSN:  # it would be quoted whole in every "unreachable" line
        raise UnreadableError(f"{where}: store {shown(dsn)!r} is {len(dsn)} characters long, "
                              f"more than {MAX_DSN}; {EXPECTED}")
    try:
        parts = urlsplit(dsn)
        parts.port  # noqa: B018 -- raises on a bad port
    except ValueError as exc:
        raise UnreadableError(f"{where}: store {shown(dsn)!r}: {exc}; {EXPECTED}") from None
    if not parts.hostname and not parts.query:
        raise UnreadableError(f"{where}: store {shown(dsn)!r} names no host; {EXPECTED}")
    if in_file and has_password(dsn):
        raise UnreadableError(f"{where}: store holds a password; {WAY_OUT}")
    if in_file:
        _only_file_parameters(parts.query, where)
    return dsn


def plain(dsn: str) -> bool:
    """`postgresql://[USER@]HOST[:PORT][/DB]`, each part letters, digits,
    `.`, `_` or `-`: a URL with a host, no password and no parameter, which
    every check of `_checked` passes (tests/store/test_dsn_plain.py holds
    the two to it)."""
    scheme, sep, rest = dsn.partition("://")
    if not sep or scheme not in SCHEMES:
        return False
    netloc, slash, database = rest.partition("/")
    user, at, host_port = netloc.rpartition("@")
    host, colon, port = host_port.partition(":")
    return (_word(host) and (not at or _word(user)) and (not slash or _word(database))
            and (not colon or (0 < len(port) <= 5 and port.isascii() and port.isdigit()
                               and int(port) <= 65535)))


def _word(text: str) -> bool:
    return bool(text) and text.isascii() and text.replace(".", "a").replace("_", "a") \
        .replace("-", "a").isalnum()


def _only_file_parameters(query: str, where: str) -> None:
    """Refuse a libpq parameter loops.yaml may not set (FILE_PARAMETERS)."""
    from urllib.parse import parse_qsl

    for key, _ in parse_qsl(query, keep_blank_values=True):
        if key.lower() not in FILE_PARAMETERS:
            raise UnreadableError(
                f"{where}: store parameter {key[:40]!r} is not allowed in loops.yaml; "
                "expected only where and how to connect (host, port, dbname, user, sslmode, "
                "ssl*, connect_timeout, ...): set others in LOOPCTL_STORE or a service file")


def has_password(dsn: str) -> bool:
    from urllib.parse import parse_qsl, urlsplit

    parts = urlsplit(dsn)
    if parts.password is not None:
        return True
    return any(key.lower() == "password" for key, _ in parse_qsl(parts.query,
                                                                   keep_blank_values=True))


def shown(dsn: str) -> str:
    """The DSN in an error line: redacted, and cut (a 10 MiB value is not a
    line anyone reads)."""
    text = redact(dsn)
    return text if len(text) <= 100 else text[:100] + "..."


def redact(dsn: str) -> str:
    """The DSN as it may be shown: any password replaced by `***`."""
    from urllib.parse import parse_qsl, urlsplit

    try:
        parts = urlsplit(dsn)
        if not has_password(dsn):
            return dsn
    except ValueError:
        return dsn.rpartition("@")[2]
    netloc = parts.netloc
    if parts.password is not None:
        user, _, host = netloc.rpartition("@")
        netloc = f"{user.partition(':')[0]}:***@{host}"
    query = "&".join(f"{k}={'***' if k.lower() == 'password' else v}"
                     for k, v in parse_qsl(parts.query, keep_blank_values=True))
    return parts._replace(netloc=netloc, query=query).geturl()


def chosen(top_store: object, where: str) -> str | None:
    """The DSN this home uses: LOOPCTL_STORE when set (a password may be
    there: the environment is a secret store), else loops.yaml's `store:`
    (checked when the file was read), else None: the files of DESIGN §2."""
    env = os.environ.get(ENV_STORE)
    if env is not None and env.strip():
        return check_dsn(env, ENV_STORE, in_file=False)
    if top_store is None:
        return None
    return check_dsn(top_store, where, in_file=True)


def machine() -> str:
    """This machine's name in the store: LOOPCTL_MACHINE, else the host name.
    It is shown in every view and recorded with each run: printable text."""
    name = os.environ.get(ENV_MACHINE, "").strip() or host_name()
    if len(name) > 100 or not name.isprintable():
        raise UnreadableError(f"{ENV_MACHINE}: {name[:100]!r} is not a machine name; "
                              "expected at most 100 printable characters, like runner-1")
    return name


def host_name() -> str:
    """socket.gethostname() without the import of `socket` (~2 ms of an idle
    tick): on Linux, glibc's and musl's gethostname() return uname's node
    name (tests/store/test_dsn_plain.py holds the two equal)."""
    import sys

    if sys.platform.startswith("linux"):
        return os.uname().nodename
    import socket

    return socket.gethostname()
