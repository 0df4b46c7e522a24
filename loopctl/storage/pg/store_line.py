"""loops.yaml's top-level `store:` read from its bytes, for a store home's
idle `tick` (storage/pg/idle.py): parsing 1,000 loops of YAML (or even
importing what reads their cached parse) is most of that tick.

The scan answers only when the file is plainly laid out, and then as the
YAML reader (storage/definitions.parse_source) would: `store:` is among
the first HEAD_LINES lines, every line before it is blank, a comment, or
`key: word` at column 0 (so nothing can have opened a quoted or flow
scalar that the `store:` line would belong to); the value is one plain
token (`postgresql://` then URL characters, no quote, `#`, flow indicator
or space) ending the line or followed by a comment; the next line with
content starts at column 0 (a more indented one would continue the
scalar); and no other line starting at column 0 is anything but a comment
or a plain `key:` other than `store` (a second `store`, a quoted, tagged,
anchored, merged or explicit key: the YAML reader decides). Exotic line
breaks (NEL, U+2028/9, a lone CR), control characters and bytes that are
not UTF-8 send the file to the reader too.

Anything else: None, and the caller reads the definitions as ever. Where
the reader would refuse the file for another reason (a bad loop further
down), the answer is still the `store:` line's; the idle exit is then
impossible anyway: this machine's `defs_sig` in the store is that of a
loops.yaml it reconciled, and a file that does not parse never is.
tests/store/test_store_line.py holds the scan to the reader."""

from __future__ import annotations

BOM = b"\xef\xbb\xbf"
# Bytes the YAML reader takes as text on one line: printable ASCII, tab,
# LF, and any byte of a multi-byte UTF-8 character (checked apart).
_TEXT = bytes(range(0x20, 0x7F)) + b"\t\n" + bytes(range(0x80, 0x100))
# Characters PyYAML refuses (C1 controls) or reads as line breaks (NEL,
# U+2028, U+2029), and the non-characters it refuses.
_NOT_PLAIN = tuple(chr(c) for c in range(0x80, 0xA0)) + ("\u2028", "\u2029", "\ufffe",
                                                         "\uffff")
_KEY = frozenset(b"abcdefghijklmnopqrstuvwxyz_0123456789")
_WORD = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_URL = _WORD | frozenset(b"~%@:/?=&+")
_PREFIXES = (b"postgresql://", b"postgres://")
# How far down the `store:` line may be found (blank lines and comments
# included); below that, the definitions are read.
HEAD_LINES = 100


def top_store(data: bytes) -> str | None:
    """The value of loops.yaml's top-level `store:` as the YAML reader
    reads it, when these bytes show it plainly; None: read them whole."""
    text = _plain_text(data)
    if text is None:
        return None
    # The `store:` line and the one after it are among the first lines (the
    # last item is the rest of the file, unsplit: a thousand loops' lines
    # need not be).
    head = text.split(b"\n", HEAD_LINES)
    lines, whole = head[:HEAD_LINES], len(head) <= HEAD_LINES
    at = _store_line(lines)
    if at is None:
        return None
    value = _value(lines[at][len(b"store:"):])
    if value is None or not _ends_there(lines[at + 1:], whole) or not _one_store_key(text):
        return None
    return value.decode("ascii")


def _plain_text(data: bytes) -> bytes | None:
    """The file with LF line breaks, when every line break is one the scan knows."""
    if data.startswith(BOM):  # the reader skips it too
        data = data[len(BOM):]
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n")
    if data.translate(None, _TEXT):  # a lone CR, NUL, another control character
        return None
    if not data.isascii():
        try:
            decoded = data.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if any(odd in decoded for odd in _NOT_PLAIN):
            return None
    return data


def _store_line(lines: list[bytes]) -> int | None:
    """Index of the `store:` line, when only plain lines come before it."""
    for index, line in enumerate(lines):
        if line.startswith(b"store:"):
            return index
        if line.strip(b" ") and not line.startswith(b"#") and not _simple(line):
            return None
    return None


def _simple(line: bytes) -> bool:
    """`key: word` at column 0, maybe with a comment: one line that opens nothing."""
    key, colon, rest = line.partition(b":")
    if not colon or not key or not _KEY.issuperset(key) or not rest.startswith(b" "):
        return False
    word, _, after = rest.strip(b" ").partition(b" ")
    return bool(word) and _WORD.issuperset(word) and _comment_or_nothing(after)


def _value(rest: bytes) -> bytes | None:
    """The plain URL token after `store:`; None: any other value."""
    if not rest.startswith(b" "):
        return None
    token, _, after = rest.strip(b" ").partition(b" ")
    if not token.startswith(_PREFIXES) or not _URL.issuperset(token) or token.endswith(b":"):
        return None
    return token if _comment_or_nothing(after) else None


def _comment_or_nothing(after: bytes) -> bool:
    after = after.strip(b" ")
    return not after or after.startswith(b"#")


def _ends_there(after: list[bytes], whole: bool) -> bool:
    """The next line with content starts at column 0: no continuation.
    None among `after`: the end of the file when they are `whole`, else
    the rest of the file says (unknown: False)."""
    for line in after:
        if line.strip(b" "):  # a line of tabs: not blank to the scan
            return line[:1] not in (b" ", b"\t")
    return whole


def _one_store_key(text: bytes) -> bool:
    """Every line at column 0 but comments is a plain key, one of them `store`."""
    # Each indented line joined to the line above it (in C, not a loop over
    # 10,000 lines): what remains starts at column 0, or after a blank line.
    stores = 0
    for line in text.replace(b"\n ", b" ").split(b"\n"):
        if not line or line[:1] in b" #":
            continue  # blank, a comment, indented content after a blank line
        key, colon, rest = line.partition(b":")
        if not colon or not key or not _KEY.issuperset(key) or rest[:1] not in (b"", b" "):
            return False
        stores += key == b"store"
    return stores == 1
