"""SHA-256 and HMAC-SHA-256 from CPython's own built-in SHA-2 module.

`hashlib` (and `hmac`, which imports it) loads OpenSSL: ~10M instructions,
a twentieth of a whole `loopctl run`, for the few short digests a run takes
(the state's seal, the definitions cache's key, account ids, a result's
fingerprint). HMAC is RFC 2104 over that module; tests/domain/test_digests.py
holds it to `hmac.new(key, data, hashlib.sha256)`. Where CPython was built
without its own SHA-2, hashlib is used.

Large inputs go to hashlib after all: the built-in module hashes ~4.5 ms a
MiB, OpenSSL with the CPU's SHA extensions ~0.6 ms, and loading it ~2.6 ms
once. At 10,000 loops `ls` and `status NAME` hash loops.yaml, the
definitions cache and state.json, ~5 MiB: ~24 ms the one way, ~6 the other.
Below `LARGE` (a run's seals: a home of a few hundred loops) nothing changes."""

from __future__ import annotations

from _operator import _compare_digest as compare_digest  # what hmac.compare_digest is

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    sha256: Callable[[bytes], Any]

try:
    from _sha256 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
except ImportError:  # Python 3.12 on: one module for the SHA-2 family
    try:
        from _sha2 import sha256  # type: ignore[import-not-found,no-redef,unused-ignore]
    except ImportError:
        from hashlib import sha256  # type: ignore[assignment,no-redef,unused-ignore]

BLOCK = 64
INNER = bytes(x ^ 0x36 for x in range(256))
OUTER = bytes(x ^ 0x5C for x in range(256))

__all__ = ["compare_digest", "hmac_sha256", "sha256", "sha256_hex"]


LARGE = 256 * 1024  # bytes: from here OpenSSL's speed repays loading it


def _hasher(data: bytes) -> Any:
    """The SHA-256 to hash `data` with (see the module's text)."""
    if len(data) < LARGE:
        return sha256
    from hashlib import sha256 as fast

    return fast


def sha256_hex(data: bytes) -> str:
    return str(_hasher(data)(data).hexdigest())


def hmac_sha256(key: bytes, data: bytes) -> str:
    """HMAC-SHA-256 of `data`, as hex."""
    if len(key) > BLOCK:
        key = sha256(key).digest()
    key = key.ljust(BLOCK, b"\0")
    inner = _hasher(data)(key.translate(INNER))
    inner.update(data)  # not `pad + data`: a copy of megabytes
    return str(sha256(key.translate(OUTER) + inner.digest()).hexdigest())
