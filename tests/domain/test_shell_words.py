"""domain.checks.shell_quote/shell_join: `shlex.quote` and `shlex.join`
without importing `shlex` (which compiles a pattern at import) on the run
path, where each run's log header and shim quote a few words."""

from __future__ import annotations

import random
import shlex

from run_path_support import loaded_after_the_run_path

from loopctl.domain.checks import shell_join, shell_quote


def test_they_quote_as_shlex_does() -> None:
    rng = random.Random(40)
    letters = "".join(map(chr, range(200))) + "é\u2028ß"
    words = ["", "'", "a b", "--x=1", "$HOME", "é", *(
        "".join(rng.choice(letters) for _ in range(rng.randint(0, 6))) for _ in range(20000))]
    for word in words:
        assert shell_quote(word) == shlex.quote(word), repr(word)
    assert shell_join(words) == shlex.join(words)


def test_the_run_path_does_not_import_shlex() -> None:
    then = ("from loopctl.engine.run_context import one_line\n"
            "assert one_line(['true', 'a b']) == \"true 'a b'\"\n")
    assert loaded_after_the_run_path(then, ["shlex"]) == ["False"]
