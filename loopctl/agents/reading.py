"""What a run's output says (the readers' answer), and the plain reading of
a `shell` or `--command` loop's output: its end. Apart from the readers so
that such a run loads none of them."""

from __future__ import annotations

from loopctl.fast.data_class import factory, record

RESULT_CHARS = 4000


@record
class Reading:
    result_text: str | None = None
    session_id: str | None = None
    cost_usd: float | None = None
    is_error: bool = False
    error: str | None = None
    rate_limited: bool = False
    reset_at: float | None = None
    # Not logged in, a bad or expired key (DESIGN §18): the account needs a human.
    auth_error: bool = False
    # The limit or the refused login was found in free text (a plain-text
    # agent's output, where the model writes too), not in the CLI's own
    # fields: it may hold this loop, never its account (DESIGN §18).
    from_text: bool = False
    tokens: int | None = None  # tokens the CLI reported the run used
    notes: list[str] = factory(list)


def text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def tail_text(tail: bytes) -> str | None:
    lines = [ln for ln in text(tail).splitlines() if not ln.startswith("# loopctl:")]
    found = "\n".join(lines).strip()
    return found[-RESULT_CHARS:] if found else None


def plain(tail: bytes) -> Reading:
    """A shell or `--command` loop: the result is the end of its output."""
    return Reading(result_text=tail_text(tail))
