"""fast/cfuncs.py (ctypes' C half, for the idle store tick's libpq query)
held to ctypes: the same C types, the same library handle, the same
results from the same C functions."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

import pytest

from loopctl.fast.cfuncs import CTypes
from loopctl.storage.pg import libpq

LIBC = ctypes.util.find_library("c") or "libc.so.6"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="C functions of a libc")


def test_the_c_types_are_ctypes_own() -> None:
    types = CTypes()
    for ours, theirs in ((types.Int, ctypes.c_int), (types.Text, ctypes.c_char_p),
                         (types.Pointer, ctypes.c_void_p)):
        assert ours._type_ == theirs._type_  # type: ignore[attr-defined]
        assert ctypes.sizeof(ours) == ctypes.sizeof(theirs)
    for value in (0, -1, 2**31 - 1, -(2**31)):
        assert types.Int(value).value == ctypes.c_int(value).value
    for text in (b"", b"postgresql://h/db", None):
        assert types.Text(text).value == ctypes.c_char_p(text).value
    for address in (None, 1, 2**40):
        assert types.Pointer(address).value == ctypes.c_void_p(address).value


def test_a_library_opens_as_ctypes_opens_it() -> None:
    assert CTypes().open(LIBC)._handle == ctypes.CDLL(LIBC)._handle
    with pytest.raises(OSError):
        ctypes.CDLL("libloopctl-none.so")
    with pytest.raises(OSError):
        CTypes().open("libloopctl-none.so")


def test_c_functions_answer_as_through_ctypes(monkeypatch: pytest.MonkeyPatch) -> None:
    types = CTypes()
    ours, theirs = types.open(LIBC), ctypes.CDLL(LIBC)
    ours_abs = ours.function("abs", types.Int, types.Int)
    theirs_abs = theirs.abs
    theirs_abs.restype, theirs_abs.argtypes = ctypes.c_int, [ctypes.c_int]
    assert [ours_abs(n) for n in (0, -7, 2**31 - 1)] == [theirs_abs(n) for n in (0, -7, 2**31 - 1)]
    monkeypatch.setenv("LOOPCTL_CFUNCS", "v\u00e9")
    ours_getenv = ours.function("getenv", types.Text, types.Text)
    theirs_getenv = theirs.getenv
    theirs_getenv.restype, theirs_getenv.argtypes = ctypes.c_char_p, [ctypes.c_char_p]
    for name in (b"LOOPCTL_CFUNCS", b"LOOPCTL_NONE"):
        assert ours_getenv(name) == theirs_getenv(name)
    assert ours_getenv(b"LOOPCTL_CFUNCS") == "v\u00e9".encode()


def test_libpq_through_both_is_the_same_library() -> None:
    """What the idle query loads (storage/pg/libpq.py) answers as ctypes does."""
    name = libpq.candidates()[0]
    types = CTypes()
    version = types.open(name).function("PQlibVersion", types.Int)
    theirs = ctypes.CDLL(name).PQlibVersion
    theirs.restype = ctypes.c_int
    assert version() == theirs() > 90000
