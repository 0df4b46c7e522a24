"""A regular expression compiled when first used: compiling the patterns of
the modules a `loopctl run` imports was a share of every run's start, and
most of them (untrusted text, URLs, sizes) are never matched in one."""

from __future__ import annotations

import re

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import Any


class LazyPattern:
    __slots__ = ("_args", "_compiled")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[str] | None = None

    def compiled(self) -> re.Pattern[str]:
        if self._compiled is None:
            self._compiled = re.compile(*self._args)
        return self._compiled

    @property
    def pattern(self) -> str:
        return self._args[0]

    def match(self, text: str, pos: int = 0) -> re.Match[str] | None:
        return self.compiled().match(text, pos)

    def fullmatch(self, text: str) -> re.Match[str] | None:
        return self.compiled().fullmatch(text)

    def search(self, text: str, pos: int = 0) -> re.Match[str] | None:
        return self.compiled().search(text, pos)

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        return self.compiled().finditer(text)

    def findall(self, text: str) -> list[Any]:
        return self.compiled().findall(text)

    def sub(self, repl: str | Callable[[re.Match[str]], str], text: str,
            count: int = 0) -> str:
        return self.compiled().sub(repl, text, count=count)


def lazy(pattern: str, flags: int = 0) -> LazyPattern:
    return LazyPattern(pattern, flags)
