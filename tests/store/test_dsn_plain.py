"""The idle tick's shortcuts in storage/pg/dsn.py: a plain DSN is taken
without urllib's parse (`plain` must only ever say yes to what the whole
check takes, in loops.yaml or in LOOPCTL_STORE, unchanged), and the
machine's default name without importing `socket`."""

from __future__ import annotations

import random
import socket
import sys

import pytest

from loopctl.domain.errors import UnreadableError
from loopctl.storage.pg import dsn as dsn_mod

PLAIN = ["postgresql://loops@db.example:5432/loops", "postgres://h/db", "postgresql://h",
         "postgresql://u@127.0.0.1/x_y-z.1", "postgresql://h:0/db", "postgresql://h:65535"]
NOT_PLAIN = [
    "postgresql://u:pw@h/db",  # a password
    "postgresql://h/db?password=x", "postgresql://h/db?passfile=/x",  # parameters
    "postgresql://h:65536/db", "postgresql://h:123456/db", "postgresql://h:/db",
    "postgresql://h:5x/db", "postgresql://h:\u0665/db",  # not a port
    "POSTGRESQL://h/db", "mysql://h/db", "postgresql:/h/db", "postgresql://",
    "postgresql:///db", "postgresql://@h/db", "postgresql://[::1]/db",
    "postgresql://h/", "postgresql://h/a/b", "postgresql://h\u00e9/db",
    "postgresql://h/db\n", "postgresql://h/db x", "postgresql://u@@h/db",
]


def both_checks(text: str) -> tuple[str, str]:
    """What the whole check (urllib's) makes of `text`, in a file and not."""
    return (dsn_mod._checked(text, "loops.yaml", in_file=True),
            dsn_mod._checked(text, "LOOPCTL_STORE", in_file=False))


@pytest.mark.parametrize("text", PLAIN)
def test_a_plain_dsn_is_taken_as_the_whole_check_takes_it(text: str) -> None:
    assert dsn_mod.plain(text)
    assert both_checks(text) == (text, text)
    assert dsn_mod.check_dsn(f"  {text} ", "loops.yaml", in_file=True) == text


@pytest.mark.parametrize("text", NOT_PLAIN)
def test_anything_else_takes_the_whole_check(text: str) -> None:
    assert not dsn_mod.plain(text)


def test_a_password_in_loops_yaml_is_still_refused() -> None:
    with pytest.raises(UnreadableError, match="holds a password"):
        dsn_mod.check_dsn("postgresql://u:pw@h/db", "loops.yaml", in_file=True)


ALPHABET = "ab19._-:@/?=&%[]# \u00e9\u0665\n"


def test_random_dsns_plain_only_where_the_whole_check_takes_them_unchanged() -> None:
    rng = random.Random(54)
    plain = 0
    for _ in range(20000):
        tail = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 14)))
        text = rng.choice(("postgresql://", "postgres://", "postgresql:/", "")) + tail
        if not dsn_mod.plain(text):
            continue
        plain += 1
        assert both_checks(text) == (text, text), text
    assert plain > 200


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the shortcut is Linux's")
def test_the_default_machine_name_is_the_host_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPCTL_MACHINE", raising=False)
    assert dsn_mod.machine() == socket.gethostname()
