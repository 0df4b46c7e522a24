"""C functions of a shared library through ctypes' C half (`_ctypes`), for
the idle `tick` of a store home, whose one query goes through libpq itself
(storage/pg/libpq.py).

`import ctypes` runs its Python half: dozens of types and helpers, and
`struct`, ~1 ms of that tick's ~15 ms of CPU (bench/README.md), for a
query that needs three C types and ten functions. These are made as ctypes
makes them: `int`, `char *` (bytes, NULL as None) and `void *` (an int,
NULL as None) are ctypes.c_int, c_char_p and c_void_p's C types; a library
is opened as ctypes.CDLL(name) opens it (RTLD_LOCAL, and RTLD_NOW, which
`_ctypes` adds); a function is looked up in it as CDLL's are (cdecl).
tests/store/test_cfuncs.py holds each to ctypes. A Python whose `_ctypes`
lacks any of it: NoCtypes, and the caller does without.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`: a cost of every cron tick

if TYPE_CHECKING:
    from typing import Any


class NoCtypes(Exception):
    """This Python's `_ctypes` is not the one these pieces are made from."""


class CTypes:
    """The C types and the library loader (`Int`, `Text`, `Pointer`,
    `pointer_to`, `open`)."""

    def __init__(self) -> None:
        try:
            import _ctypes

            class Int(_ctypes._SimpleCData):  # ctypes.c_int
                _type_ = "i"

            class Text(_ctypes._SimpleCData):  # ctypes.c_char_p
                _type_ = "z"

            class Pointer(_ctypes._SimpleCData):  # ctypes.c_void_p
                _type_ = "P"

            class Function(_ctypes.CFuncPtr):  # a function of a ctypes.CDLL
                _flags_ = _ctypes.FUNCFLAG_CDECL

            self._dlopen, self._mode = _ctypes.dlopen, _ctypes.RTLD_LOCAL
            self.pointer_to = _ctypes.POINTER
        except (ImportError, AttributeError, TypeError) as exc:
            raise NoCtypes(f"no ctypes to call C with: {exc}") from None
        self.Int, self.Text, self.Pointer, self._Function = Int, Text, Pointer, Function

    def open(self, name: str) -> Library:
        """The library `name` (a path, or a name the loader searches), as
        ctypes.CDLL(name); OSError when it cannot be loaded."""
        return Library(self, self._dlopen(name, self._mode))


class Library:
    """An open library: its C functions, typed."""

    def __init__(self, types: CTypes, handle: int) -> None:
        self._types = types
        self._handle = handle  # the name ctypes' C half looks the handle up by

    def function(self, name: str, restype: Any, *argtypes: Any) -> Any:
        """The C function `name` returning `restype` (None: void)."""
        found = self._types._Function((name, self))  # type: ignore[arg-type]
        found.restype, found.argtypes = restype, list(argtypes)
        return found
