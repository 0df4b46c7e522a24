"""The idle tick's scan of loops.yaml's `store:` line (storage/pg/store_line.py)
against the YAML reader every command uses (storage/definitions.parse_source,
PyYAML's C loader): whenever the reader takes a file, the scan gives its
`store` or nothing (None: the idle tick reads the definitions whole). A
table of hostile layouts, then random edits of a real file."""

from __future__ import annotations

import random

import pytest

from loopctl.domain.errors import LoopctlError
from loopctl.storage.definitions import parse_source
from loopctl.storage.pg.store_line import top_store

GOOD = "postgresql://loops@db.example:5432/loops"
EVIL = "postgresql://loops@evil.example/loops"
LOOPS = """loops:
  a:
    prompt: {prompt}
    agent: shell
    every: 1h
"""
REFUSED = object()


def reader(data: bytes) -> object:
    """loops.yaml's `store` as every command reads it; REFUSED: no reading."""
    try:
        doc, _ = parse_source(data, "loops.yaml")
    except LoopctlError:
        return REFUSED
    return doc.get("store")


def home(head: str, prompt: str = "hello") -> bytes:
    return (head + LOOPS.format(prompt=prompt)).encode()


# (bytes, what the scan must say): the store, or None (read the file whole).
TABLE = [
    ("plain", home(f"version: 1\nstore: {GOOD}\n"), GOOD),
    ("postgres scheme", home("version: 1\nstore: postgres://h/db\n"), "postgres://h/db"),
    ("comment after", home(f"version: 1\nstore: {GOOD}   # the team's\n"), GOOD),
    ("comments before", home(f"# loops\n\nversion: 1 # v\n#x: y\nstore: {GOOD}\n"), GOOD),
    ("trailing spaces", home(f"version: 1\nstore: {GOOD}   \n"), GOOD),
    ("parameters", home("version: 1\nstore: postgresql://h/db?sslmode=require&port=5"
                        "433\n"), "postgresql://h/db?sslmode=require&port=5433"),
    ("percent", home("version: 1\nstore: postgresql://u%40x@h/db\n"),
     "postgresql://u%40x@h/db"),
    ("CRLF", home(f"version: 1\nstore: {GOOD}\n").replace(b"\n", b"\r\n"), GOOD),
    ("BOM", b"\xef\xbb\xbf" + home(f"version: 1\nstore: {GOOD}\n"), GOOD),
    ("unicode prompt", home(f"version: 1\nstore: {GOOD}\n", "caf\u00e9 \U0001f600"), GOOD),
    ("the last line", f"version: 1\nstore: {GOOD}".encode(), GOOD),
    ("far down", home("#\n" * 150 + f"version: 1\nstore: {GOOD}\n"), None),
    ("continued far down", home(f"version: 1\nstore: {GOOD}\n" + "\n" * 150 + "  x\n"),
     None),
    ("double quotes", home(f'version: 1\nstore: "{GOOD}"\n'), None),
    ("single quotes", home(f"version: 1\nstore: '{GOOD}'\n"), None),
    ("anchor", home(f"version: 1\nstore: &a {GOOD}\n"), None),
    ("tag", home(f"version: 1\nstore: !!str {GOOD}\n"), None),
    ("upper case scheme", home("version: 1\nstore: POSTGRESQL://h/db\n"), None),
    ("no space", home(f"version: 1\nstore:{GOOD}\n"), None),
    ("space before colon", home(f"version: 1\nstore : {GOOD}\n"), None),
    ("tab", home(f"version: 1\nstore:\t{GOOD}\n"), None),
    ("ends with a colon", home("version: 1\nstore: postgresql://h/db:\n"), None),
    ("hash in the value", home(f"version: 1\nstore: {GOOD}#x\n"), None),
    ("continued", home(f"version: 1\nstore: {GOOD}\n  ?sslmode=disable\n"), None),
    ("continued after a blank", home(f"version: 1\nstore: {GOOD}\n\n  x\n"), None),
    ("continued after spaces", home(f"version: 1\nstore: {GOOD}\n   \n  x\n"), None),
    ("tab line after", home(f"version: 1\nstore: {GOOD}\n\t\n"), None),
    ("only inside a loop", home("version: 1\n", f"x\n    store: {GOOD}"), None),
    ("after the loops", home("version: 1\n") + f"store: {GOOD}\n".encode(), None),
    ("twice", home(f"version: 1\nstore: {GOOD}\nstore: {EVIL}\n"), None),
    ("second in a quoted prompt", home(f"version: 1\nstore: {GOOD}\n",
                                       f'"x\nstore: {EVIL}\n  y"'), None),
    ("escaped key later", home(f"version: 1\nstore: {GOOD}\n") +
     f'"st\\x6fre": {EVIL}\n'.encode(), None),
    ("single-quoted key later", home(f"version: 1\nstore: {GOOD}\n") +
     f"'store': {EVIL}\n".encode(), None),
    ("merge key", home(f"version: 1\nstore: {GOOD}\n") +
     f"<<: {{store: {EVIL}}}\n".encode(), None),
    ("explicit key", home(f"version: 1\nstore: {GOOD}\n") + f"? store\n: {EVIL}\n".encode(),
     None),
    ("tagged key", home(f"version: 1\nstore: {GOOD}\n") + f"!!str store: {EVIL}\n".encode(),
     None),
    ("empty key", home(f"version: 1\nstore: {GOOD}\n") + f": {EVIL}\n".encode(), None),
    ("flow value before", home(f'version: 1\nnotify: ["a",\nstore: {EVIL}]\nstore: {GOOD}\n'),
     None),
    ("quoted value before", home(f'version: 1\non_attention: "a\nstore: {EVIL}"\n'
                                 f"store: {GOOD}\n"), None),
    ("hidden in a quoted value", home(f'version: 1\non_attention: "a\nstore: {EVIL}\n'
                                      'b: c"\n'), None),
    ("document marker", home(f"---\nversion: 1\nstore: {GOOD}\n"), None),
    ("directive", home(f"%YAML 1.1\n---\nversion: 1\nstore: {GOOD}\n"), None),
    ("second document", home(f"version: 1\nstore: {GOOD}\n") + b"---\nversion: 1\n", None),
    ("NEL", home(f"version: 1\nstore: {GOOD}\n", f"x\u0085store: {EVIL}"), None),
    ("line separator", home(f"version: 1\nstore: {GOOD}\n", f"x\u2028store: {EVIL}"), None),
    ("lone CR", home(f"version: 1\nstore: {GOOD}\n", f"x\rstore: {EVIL}"), None),
    ("NUL", home(f"version: 1\nstore: {GOOD}\n", "x\x00y"), None),
    ("C1 control", home(f"version: 1\nstore: {GOOD}\n", "x\u0090y"), None),
    ("not UTF-8", home(f"version: 1\nstore: {GOOD}\n", "x") + b"# \xff\n", None),
    ("BOM before a later key", home(f"version: 1\nstore: {GOOD}\n") +
     f"\ufeffstore: {EVIL}\n".encode(), None),
    ("tab indent", home(f"version: 1\nstore: {GOOD}\n") + b"\tx: 1\n", None),
    ("a sequence at column 0", home(f"version: 1\nstore: {GOOD}\n") + b"- x\n", None),
]


@pytest.mark.parametrize("name, data, expected", TABLE, ids=[row[0] for row in TABLE])
def test_the_scan_reads_a_store_line_as_the_yaml_reader_does(name: str, data: bytes,
                                                            expected: str | None) -> None:
    found = top_store(data)
    assert found == expected
    if found is not None:
        assert reader(data) == found


def test_a_huge_file_is_left_to_the_definitions(tmp_path: object) -> None:
    """Over MAX_DEFS_BYTES the definitions refuse loops.yaml: the scan must
    not answer from its first 8 MiB."""
    from pathlib import Path

    from loopctl.storage.pg.gate import MAX_DEFS_BYTES
    from loopctl.storage.pg.idle import source

    path = Path(str(tmp_path)) / "loops.yaml"
    body = home(f"version: 1\nstore: {GOOD}\n", "x" * (MAX_DEFS_BYTES + 1000))
    path.write_bytes(body)
    assert source(str(path)) == (None, None)
    path.write_bytes(body[:5000])
    data, signature = source(str(path))
    assert data == body[:5000] and signature is not None and signature[1] == 5000


# Pieces a random edit inserts: what YAML reads as structure, and new lines
# that would set or hide a store.
PIECES = ["\n", "\n  ", " ", "\t", '"', "'", "#", ": ", "&a ", "*a", "!!str ", "{", "}", "[",
          "]", "|\n", ">\n", "\r", "\u2028", "\u0085", "---\n", "? ", "<<: ", "- ", "\ufeff",
          f"\nstore: {EVIL}\n", f'\n"st\\x6fre": {EVIL}\n', "\nstore: ", "\n  store: ", "x",
          "\nloops:\n", f" {EVIL}", "\n\n", ":", "%", "\\", "\x00", "\xe9"]
BASE = (f"# the team's loops\nversion: 1\nstore: {GOOD}  # shared\nsandbox: off\n"
        "loops:\n  a:\n    prompt: |\n      hello\n      store: not this\n    agent: shell\n"
        "    every: 1h\n  b:\n    prompt: \"two\n      lines\"\n    agent: shell\n"
        "    every: 2h\n")


def test_random_edits_never_make_the_scan_disagree_with_the_reader() -> None:
    """Each accepted answer is the reader's; enough are accepted, and enough
    read, that the check is not empty."""
    rng = random.Random(54)
    accepted = read = 0
    for _ in range(3000):
        text = BASE
        for _ in range(rng.randint(1, 3)):
            at = rng.randint(0, len(text))
            text = text[:at] + rng.choice(PIECES) + text[at:]
        data = text.encode("utf-8", "surrogatepass")
        found, expected = top_store(data), reader(data)
        if expected is REFUSED:
            continue
        read += 1
        assert found is None or found == expected, text
        accepted += found is not None
    assert read > 500 and accepted > 300, (read, accepted)
