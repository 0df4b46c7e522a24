"""Durations: `45s`, `10m`, `1h30m`, `2d`, `1w` <-> whole seconds (DESIGN §3)."""

from __future__ import annotations

import pytest

from loopctl.domain.durations import MAX_SECONDS, format_duration, parse_duration
from loopctl.domain.errors import EXIT_USAGE, UsageError

MINUTE, HOUR, DAY, WEEK = 60, 3600, 86400, 7 * 86400
TEN_YEARS = 10 * 365 * DAY


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("10m", 10 * MINUTE),
        ("1h30m", HOUR + 30 * MINUTE),
        ("2d", 2 * DAY),
        ("1w", WEEK),
        ("1w2d3h4m5s", WEEK + 2 * DAY + 3 * HOUR + 4 * MINUTE + 5),
        ("1s", 1),
        ("90m", 90 * MINUTE),  # units need not be normalised
        (" 10m ", 10 * MINUTE),  # surrounding blanks are ignored
        ("10M", 10 * MINUTE),  # case-insensitive
        ("3650d", TEN_YEARS),  # exactly the maximum is allowed
    ],
)
def test_parses_unit_text(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(("value", "seconds"), [(1, 1), (90, 90), (3600, 3600), ("300", 300)])
def test_bare_integers_are_seconds(value: object, seconds: int) -> None:
    assert parse_duration(value) == seconds


def test_maximum_is_ten_years() -> None:
    assert MAX_SECONDS == TEN_YEARS
    assert parse_duration(TEN_YEARS) == TEN_YEARS


@pytest.mark.parametrize(
    "value",
    [
        0, "0", "0s", "0m0s",  # zero
        -5, "-5m", "-1",  # negatives
        "10x", "m", "h30m", "1h 30m", "ten minutes",  # not a duration
        "1.5h", "1,5h", ".5h", "1e3s",  # fractions and floats
        "1h1h", "30m30m",  # a unit twice
        "30m1h", "1s1m", "1d1w",  # wrong order
        "", "   ",  # empty
        "3651d", TEN_YEARS + 1, "522w", "99999999999999999999s",  # overflow
        True, False,  # YAML booleans are not durations
        None, 1.5, 600.0, [], {}, b"10m",  # other types
    ],
)
def test_rejects_bad_input_with_usage_error(value: object) -> None:
    with pytest.raises(UsageError) as info:
        parse_duration(value)
    assert info.value.code == EXIT_USAGE == 2


def test_bare_numeric_string_is_seconds_not_an_error() -> None:
    assert parse_duration("10") == 10


def test_error_names_what_was_parsed_and_what_was_expected() -> None:
    with pytest.raises(UsageError) as info:
        parse_duration("10x", "'every'")
    message = info.value.message
    assert "'every'" in message and "10x" in message and "1h30m" in message
    assert "\n" not in message


def test_wrong_order_message_says_largest_first() -> None:
    with pytest.raises(UsageError, match="largest first"):
        parse_duration("30m1h")


def test_overflow_message_mentions_the_maximum() -> None:
    with pytest.raises(UsageError, match="10-year"):
        parse_duration("3651d")




@pytest.mark.parametrize("text", [
    pytest.param("²", id="superscript"),
    pytest.param("1" * 5000, id="5000-digits"),
    pytest.param("٣", id="arabic-indic"),
])
def test_odd_digit_strings_raise_usage_error_not_value_error(text: str) -> None:
    # `str.isdigit` accepts superscripts and digit strings longer than int()
    # will convert; the user must still get a one-line usage error (exit 2).
    with pytest.raises(UsageError):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (5400, "1h30m"),
        (45, "45s"),
        (600, "10m"),
        (3600, "1h"),
        (2 * DAY, "2d"),
        (WEEK, "1w"),
        (2 * WEEK, "2w"),
        (10 * DAY, "10d"),  # not `1w3d`
        (DAY + 1, "1d1s"),
        (90, "1m30s"),
        (0, "0s"),
        (5399.6, "1h30m"),  # sub-second rounds
        (-5400, "-1h30m"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize(
    "seconds",
    [1, 59, 60, 61, 3599, 3600, 5400, 86399, DAY, WEEK, WEEK + 1, 10 * DAY, 3 * WEEK,
     123456789, TEN_YEARS - 1, TEN_YEARS],
)
def test_format_then_parse_round_trips(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["45s", "10m", "1h30m", "2d", "1w", "10d", "1d1s", "2w"])
def test_canonical_text_round_trips(text: str) -> None:
    assert format_duration(parse_duration(text)) == text


def test_the_duration_reader_takes_what_its_patterns_took() -> None:
    """Read a character at a time (no regex compiled on a run's path), it
    must accept and split exactly as `(?:[0-9]+[wdhms])+` and `[0-9]{1,12}`."""
    import random
    import re

    from loopctl.domain.durations import _is_number, _parts

    part, whole, number = (re.compile(p) for p in
                           (r"([0-9]+)([wdhms])", r"(?:[0-9]+[wdhms])+", r"[0-9]{1,12}"))
    rng = random.Random(40)
    texts = ["", "1", "0s", "1h30m", "m", "1hm", "10d ", "²s", "1٣s", "1234567890123",
             *("".join(rng.choice("0123456789wdhmsx ²\n-") for _ in range(rng.randint(0, 9)))
               for _ in range(20000))]
    for text in texts:
        assert _is_number(text) == bool(number.fullmatch(text)), text
        assert _parts(text) == (part.findall(text) if whole.fullmatch(text) else None), text
