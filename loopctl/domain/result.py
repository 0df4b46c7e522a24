"""What a command returns: a record whose fields, in order, are its `--json`
keys. The CLI renders the fields as text or prints `to_json()`; the server
and the tests read the fields by name. Here, in the pure layer, so that a
domain function (the digest) returns one too.

One declaration of each shape: a field added to a result is in its JSON, and
tests/commands/test_results.py holds every result's keys to the documented
ones (the `--json` outputs are a contract, DESIGN §8).
"""

from __future__ import annotations

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run
if TYPE_CHECKING:
    from typing import Any, ClassVar, TypeAlias, TypeVar

    _Sent = TypeVar("_Sent", bound="Notifying")

    # A mapping nested in a result's JSON, written as the JSON shows it (the
    # LOOP object's `runs`, `hook_error`...): only serializers return one.
    JsonPart: TypeAlias = dict[str, Any]

JSON_VERSION = 1


class Result:
    """Base of the command results (each a frozen `@record`): `to_json()` is
    `{"version": 1, **fields}` (`VERSIONED = False`: the fields alone)."""

    VERSIONED: ClassVar[bool] = True

    def to_json(self) -> dict[str, Any]:
        # A frozen record's __dict__ holds exactly its fields, in order.
        fields = dict(self.__dict__)
        return {"version": JSON_VERSION, **fields} if self.VERSIONED else fields


class Notifying(Result):
    """A result that may have been sent to notification targets (`doctor
    --notify`, `digest --notify`): its last field, `notified`, holds each
    target's delivery and is left out of the JSON when nothing was sent."""

    notified: list[dict[str, Any]] | None

    def to_json(self) -> dict[str, Any]:
        shape = Result.to_json(self)
        if self.notified is None:
            del shape["notified"]
        return shape

    def sent(self: _Sent, notified: list[dict[str, Any]]) -> _Sent:
        """This result with the deliveries made (a copy: results are frozen)."""
        from loopctl.fast.data_class import replace

        return replace(self, notified=notified)
