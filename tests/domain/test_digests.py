"""loopctl's SHA-256 and HMAC (fast/digests.py, built on CPython's own
SHA-2 to keep OpenSSL out of every run) give what hashlib and hmac give:
the state's seals and the account ids of existing homes stay valid."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from loopctl.fast.digests import LARGE, compare_digest, hmac_sha256, sha256_hex


@pytest.mark.parametrize("key", [b"", b"k", b"\x00" * 3, b"x" * 63, b"x" * 64, b"y" * 65,
                                 bytes(range(256))])
@pytest.mark.parametrize("data", [b"", b"data", bytes(range(256)) * 9,
                                  bytes(range(256)) * (LARGE // 256 + 1)])
def test_hmac_is_rfc_2104_as_hmac_computes_it(key: bytes, data: bytes) -> None:
    assert hmac_sha256(key, data) == hmac.new(key, data, hashlib.sha256).hexdigest()


def test_sha256_and_compare() -> None:
    assert sha256_hex(b"loopctl") == hashlib.sha256(b"loopctl").hexdigest()
    large = b"l" * LARGE  # hashed by OpenSSL: the same digest
    assert sha256_hex(large) == hashlib.sha256(large).hexdigest()
    assert compare_digest("ab", "ab") and not compare_digest("ab", "ac")


def _outcome(compare: object, a: object, b: object) -> object:
    try:
        return compare(a, b)  # type: ignore[operator]
    except TypeError as exc:
        return TypeError, str(exc)


@pytest.mark.parametrize("a,b", [
    (b"", b""), (b"ab", b"ab"), (b"ab", b"ac"), (b"ab", b"abc"), (b"\x00", b""),
    ("ab", "ab"), ("ab", "ac"), ("", "x"), (bytearray(b"ab"), b"ab"), (memoryview(b"ab"), b"ab"),
    ("\u00e9", "\u00e9"),  # a non-ASCII str: refused by both
    ("ab", b"ab"), (b"ab", "ab"), (1, 1), (None, b""),  # mixed or not text: refused by both
])
def test_compare_digest_answers_and_refuses_as_hmac_does(a: object, b: object) -> None:
    """`_operator._compare_digest` is what `hmac.compare_digest` is; held to
    it by its answers and its errors, should either change."""
    assert _outcome(compare_digest, a, b) == _outcome(hmac.compare_digest, a, b)


def test_a_run_loads_no_openssl() -> None:
    """What the module is for: hashlib (OpenSSL) stays out of the modules a
    run's seals and ids need."""
    import subprocess
    import sys

    code = ("import sys; import loopctl.storage.home_key, loopctl.storage.defs_cache, "
            "loopctl.domain.valves, loopctl.domain.accounts, loopctl.engine.reaper, "
            "loopctl.engine.accounts; print('_hashlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
