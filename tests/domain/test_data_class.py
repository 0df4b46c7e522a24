"""loopctl.fast.data_class: the `@dataclass` subset loopctl uses, without importing
`dataclasses` (and with it `inspect`) on the path of every run."""

from __future__ import annotations

import dataclasses
from collections import defaultdict, namedtuple
from typing import Any, ClassVar

import pytest

from conftest import CLI, imported_modules
from loopctl.domain.model import LoopDef, parse_loop
from loopctl.fast.data_class import (
    FrozenInstanceError,
    asdict,
    factory,
    fields,
    is_record,
    record,
    replace,
)
from loopctl.storage.lease import Lease

MAKES: list[int] = []


def counted_list() -> list[int]:
    MAKES.append(1)
    return []


@record
class Item:
    """An item of a box."""

    label: str
    size: int = 1
    tags: list[str] = factory(list)
    seen: list[int] = factory(counted_list)

    def double(self) -> int:
        return self.size * 2


@record(frozen=True)
class Point:
    x: int
    y: int = 0
    meta: dict[str, Any] = factory(dict)


@record(frozen=True)
class Pair:
    x: int
    y: int = 0


@record
class Box:
    items: list[Item] = factory(list)
    by_name: dict[str, Item] = factory(dict)
    corner: tuple[Pair, ...] = ()
    extra: Any = None


@record
class Counter:
    count: int = 0


Coord = namedtuple("Coord", "a b")


# -- __init__ ------------------------------------------------------------------------


def test_defaults_and_factories_are_per_instance() -> None:
    MAKES.clear()
    one, two = Item("a"), Item("b")
    assert (one.size, one.tags, one.seen) == (1, [], [])
    assert one.tags is not two.tags and one.seen is not two.seen
    assert len(MAKES) == 2  # the factory runs once per instance
    one.tags.append("x")
    assert two.tags == [] and Item("c").tags == []
    given: list[str] = ["mine"]
    assert Item("d", tags=given).tags is given  # a value given is used, not copied
    assert len(MAKES) == 4  # `seen` was not given each time, `tags` was once
    assert "tags" not in Item.__dict__  # the factory marker left the class
    assert Item.size == 1  # plain defaults stay class attributes, as in dataclasses


def test_positional_and_keyword_arguments_follow_field_order() -> None:
    assert Item("a", 3, ["t"]) == Item(label="a", size=3, tags=["t"])
    item = Item("a", 3, ["t"], [7])
    assert (item.label, item.size, item.tags, item.seen) == ("a", 3, ["t"], [7])
    assert Item(size=5, label="k").size == 5
    assert Point(1, 2) == Point(y=2, x=1)


@pytest.mark.parametrize("call", [
    lambda: Item(),  # type: ignore[call-arg]  # the required field missing
    lambda: Item("a", 1, [], [], "extra"),  # type: ignore[call-arg]  # too many positional
    lambda: Item("a", colour="red"),  # type: ignore[call-arg]  # an unknown keyword
    lambda: Item("a", label="b"),  # type: ignore[misc]  # given twice
])
def test_bad_calls_raise_type_error(call: Any) -> None:
    with pytest.raises(TypeError):
        call()


def fresh_records() -> tuple[Any, Any]:
    """Classes no test has made yet: their `__init__` is still the stub."""
    @record
    class Loose:
        label: str
        size: int = 1
        tags: list[str] = factory(list)
        seen: list[int] = factory(counted_list)

    @record(frozen=True)
    class Fixed:
        x: int
        y: int = 0
        meta: dict[str, Any] = factory(dict)

    return Loose, Fixed


@pytest.mark.parametrize("compiled", [False, True])
def test_an_init_interpreted_or_compiled_binds_the_same_way(
        compiled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from loopctl.fast import data_class as plain

    if compiled:
        monkeypatch.setattr(plain, "_INTERPRETED_CALLS", 0)
    loose, fixed = fresh_records()
    MAKES.clear()
    item = loose("a", 3, tags=["t"])
    assert list(vars(item).items()) == [("label", "a"), ("size", 3), ("tags", ["t"]),
                                        ("seen", [])]
    assert len(MAKES) == 1 and loose("b").tags is not loose("c").tags
    point = fixed(1, meta={"k": 1})
    assert list(vars(point).items()) == [("x", 1), ("y", 0), ("meta", {"k": 1})]
    with pytest.raises(FrozenInstanceError):
        point.x = 2
    MAKES.clear()
    for bad in ((), ("a", 1, [], [], "extra")):
        with pytest.raises(TypeError):
            loose(*bad)
    for keywords in ({"colour": "red"}, {"label": "b"}):
        with pytest.raises(TypeError):
            loose("a", **keywords)
    assert MAKES == []  # a bad call fails before any factory runs
    assert (loose.__dict__["__init__"].__code__.co_name == "stub") is not compiled


def test_only_a_record_made_often_has_its_init_compiled() -> None:
    """Compiling an `__init__` costs ~0.3-3M instructions: a run makes most
    of its ~20 kinds of records a few times, and pays for none."""
    from loopctl.fast import data_class as plain

    loose, _ = fresh_records()
    stub = loose.__dict__["__init__"]
    made = [loose(str(n), n) for n in range(plain._INTERPRETED_CALLS)]
    assert loose.__dict__["__init__"] is stub
    later = loose("1", 1)
    assert loose.__dict__["__init__"] is not stub  # compiled, in the stub's place
    assert loose.__init__.__qualname__.endswith("Loose.__init__")
    assert later == made[1] and list(vars(later)) == list(vars(made[1]))


def test_the_methods_source_is_written_only_when_one_is_compiled(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from loopctl.fast import data_class as plain

    written: list[tuple[str, ...]] = []
    real = plain._sources
    monkeypatch.setattr(plain, "_sources", lambda names, *rest: (written.append(names),
                                                                 real(names, *rest))[1])
    loose, fixed = fresh_records()
    made = [loose("a"), loose("a"), fixed(1)]
    assert written == []  # made by the interpreted `__init__`: no source needed
    assert made[0] == made[1]  # `==` is compiled: the class's source is written, once
    assert made[0] != loose("b") and written == [("label", "size", "tags", "seen")]
    assert made[2] == fixed(1) and written[-1] == ("x", "y", "meta")


def test_a_required_field_after_a_default_is_refused() -> None:
    with pytest.raises(TypeError, match="non-default argument 'b'"):
        @record
        class Bad:
            a: int = 0
            b: int  # type: ignore[misc]


@pytest.mark.parametrize("default", [[], {}, set()])
def test_a_mutable_default_is_refused(default: Any) -> None:
    with pytest.raises(ValueError, match="mutable default"):
        record(type("Bad", (), {"__annotations__": {"a": "list[int]"}, "a": default}))


def test_classvars_are_not_fields_and_bases_come_first() -> None:
    @record
    class Base:
        a: int
        b: int = 2
        kind: ClassVar[str] = "base"
        made: list[int] = factory(list)

    @record
    class Child(Base):
        c: int = 3

    assert fields(Base) == ("a", "b", "made")
    assert fields(Child) == ("a", "b", "made", "c")
    child = Child(1)
    assert (child.a, child.b, child.made, child.c) == (1, 2, [], 3)
    assert child.made is not Child(1).made  # the inherited factory still works
    assert Child.kind == "base"


def test_class_docstring_methods_and_own_dunders_are_kept() -> None:
    @record
    class Own:
        """Mine."""

        a: int

        def __repr__(self) -> str:
            return "own"

    assert Item.__doc__ == "An item of a box."
    assert Item("a", 4).double() == 8
    assert repr(Own(1)) == "own"
    assert Item.__init__.__qualname__ == "Item.__init__"
    assert Item.__match_args__ == ("label", "size", "tags", "seen")


def test_a_record_without_fields_and_a_class_keeping_its_own_dunders() -> None:
    @record(frozen=True)
    class Empty:
        pass

    assert Empty() == Empty() and repr(Empty()).endswith(".Empty()") and fields(Empty) == ()
    assert hash(Empty()) == hash(())
    with pytest.raises(TypeError):
        Empty(1)  # type: ignore[call-arg]

    @record
    class Keyed:
        a: int
        __match_args__ = ("a",)

        def __hash__(self) -> int:
            return 7

    assert hash(Keyed(1)) == 7 and Keyed.__match_args__ == ("a",)


def test_a_plain_subclass_of_a_frozen_record_may_add_attributes() -> None:
    class Labelled(Pair):
        pass

    point = Labelled(1)
    point.label = "kept"  # type: ignore[attr-defined]
    assert point.label == "kept"  # type: ignore[attr-defined]
    del point.label  # type: ignore[attr-defined]
    with pytest.raises(FrozenInstanceError):
        point.x = 2  # type: ignore[misc]
    with pytest.raises(FrozenInstanceError):
        del point.y


# -- __repr__, __eq__, __hash__ ------------------------------------------------------


def test_repr_names_every_field_in_order() -> None:
    assert repr(Item("a", tags=["t"])) == "Item(label='a', size=1, tags=['t'], seen=[])"
    assert repr(Pair(1)) == "Pair(x=1, y=0)"


def test_eq_compares_fields_of_the_same_class_only() -> None:
    assert Item("a") == Item("a")
    assert Item("a") != Item("b")
    assert Item("a") != Item("a", tags=["x"])
    assert Pair(1, 2) != Point(1, 2)  # same values, another class
    assert Pair(1, 2).__eq__((1, 2)) is NotImplemented
    nan = float("nan")
    assert Pair(nan) == Pair(nan)  # type: ignore[arg-type]  # compared as tuples, identity first, as dataclasses do


def test_mutable_records_are_unhashable_frozen_ones_hash_their_fields() -> None:
    with pytest.raises(TypeError, match="unhashable"):
        hash(Item("a"))
    with pytest.raises(TypeError, match="unhashable"):
        hash(Counter())  # hashable fields, but mutable: as dataclasses do
    assert Counter.__hash__ is None
    assert hash(Pair(1, 2)) == hash(Pair(1, 2)) == hash((1, 2))
    assert len({Pair(1, 2), Pair(1, 2), Pair(2, 1)}) == 2
    with pytest.raises(TypeError):
        hash(Point(1))  # a dict field: unhashable, as with dataclasses


# -- frozen ----------------------------------------------------------------------------


def test_frozen_records_refuse_assignment_and_deletion() -> None:
    point = Point(1)
    with pytest.raises(FrozenInstanceError, match="cannot assign to field 'x'"):
        point.x = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        point.other = 1  # type: ignore[attr-defined]
    with pytest.raises(FrozenInstanceError, match="cannot delete field 'y'"):
        del point.y
    assert (point.x, point.y) == (1, 0)
    assert issubclass(FrozenInstanceError, AttributeError)
    point.meta["k"] = 1  # the record is frozen, not what it holds
    assert point.meta == {"k": 1}


def test_mutable_records_can_be_assigned() -> None:
    item = Item("a")
    item.size = 9
    item.label = "b"
    assert item == Item("b", 9)


def test_loopdef_is_frozen_and_the_cache_can_still_fill_one() -> None:
    from loopctl.storage import defs_cache

    loop = parse_loop("x", {"prompt": "p", "every": "1h", "env": {"A": "1"}})
    with pytest.raises(AttributeError):
        loop.name = "y"  # type: ignore[misc]
    built = defs_cache.build({"name": "x", "prompt": "p", "every": 3600, "agent": "shell",
                              "env": {"A": "1"}})
    assert built == loop
    assert LoopDef(name="a").env is not LoopDef(name="a").env


# -- asdict, replace, fields -------------------------------------------------------------


def test_asdict_recurses_into_records_lists_tuples_and_dicts() -> None:
    inner = Item("a", tags=["t"])
    box = Box(items=[inner], by_name={"a": inner}, corner=(Pair(1, 2),),
              extra=Coord(Pair(3), {4}))
    data = asdict(box)
    assert data == {
        "items": [{"label": "a", "size": 1, "tags": ["t"], "seen": []}],
        "by_name": {"a": {"label": "a", "size": 1, "tags": ["t"], "seen": []}},
        "corner": ({"x": 1, "y": 2},),
        "extra": Coord({"x": 3, "y": 0}, {4}),
    }
    assert type(data["corner"]) is tuple and type(data["extra"]) is Coord
    counts = defaultdict(list, {"a": [Pair(1)]})
    copied = asdict(Box(extra=counts))["extra"]
    assert type(copied) is defaultdict and copied.default_factory is list
    assert copied == {"a": [{"x": 1, "y": 0}]}
    data["items"][0]["tags"].append("u")
    data["extra"].b.add(5)
    assert inner.tags == ["t"] and box.extra.b == {4}  # copies, not the originals


@dataclasses.dataclass
class DPair:
    x: int
    y: int = 0


@dataclasses.dataclass
class DBag:
    items: list[Any]
    table: dict[Any, Any]
    extra: Any = None


@record
class Bag:
    items: list[Any]
    table: dict[Any, Any]
    extra: Any = None


def test_asdict_and_repr_match_their_dataclasses_namesakes() -> None:
    def build(pair: Any, bag: Any) -> Any:
        return bag([pair(1), (pair(2), "x"), [pair(3)]], {"k": [pair(4)], (1, 2): pair(5)},
                   Coord(pair(6), {1.5, None}))

    mine, theirs = build(Pair, Bag), build(DPair, DBag)
    assert asdict(mine) == dataclasses.asdict(theirs)
    assert repr(mine) == repr(theirs).replace("DPair", "Pair").replace("DBag", "Bag")
    assert fields(Bag) == tuple(f.name for f in dataclasses.fields(DBag))


def test_asdict_and_replace_refuse_what_is_not_a_record_instance() -> None:
    for bad in (Item, {"a": 1}, Coord(1, 2)):
        with pytest.raises(TypeError):
            asdict(bad)
        with pytest.raises(TypeError):
            replace(bad, a=1)


def test_replace_changes_some_fields_and_keeps_the_rest() -> None:
    point = Point(1, 2, {"k": 1})
    moved = replace(point, y=5)
    assert moved == Point(1, 5, {"k": 1}) and point == Point(1, 2, {"k": 1})
    assert moved.meta is point.meta  # kept as is, as dataclasses.replace does
    item = Item("a", tags=["t"])
    assert replace(item) == item and replace(item) is not item
    with pytest.raises(TypeError):
        replace(point, z=1)
    loop = parse_loop("x", {"prompt": "p", "every": "1h"})
    renamed = replace(loop, name="y")
    assert renamed.name == "y" and renamed.to_dict() == {**loop.to_dict(), "name": "y"}


def test_fields_lists_names_in_order_for_classes_and_instances() -> None:
    assert fields(Item) == ("label", "size", "tags", "seen")
    assert fields(Item("a")) == fields(Item)
    assert fields(Lease) == ("pid", "create_time", "host", "owner", "heartbeat",
                             "acquired_at", "role")
    assert fields(LoopDef)[:3] == ("name", "prompt", "prompt_file")
    assert set(fields(LoopDef)) == set(vars(LoopDef(name="x")))
    assert is_record(Item) and is_record(Item("a")) and not is_record(Coord(1, 2))
    with pytest.raises(TypeError):
        fields(Coord)


def test_loopdef_to_dict_is_what_it_was_with_dataclasses() -> None:
    loop = parse_loop("x", {"prompt": "p", "every": "1h", "env": {"A": "1"},
                            "agent_args": ["-v"]})
    data = loop.to_dict()
    assert list(data)[:2] == ["name", "prompt"] and list(data)[-1] == "for"
    assert data["for"] == loop.for_s and "for_s" not in data
    assert data["agent_args"] == ("-v",) and data["env"] == {"A": "1"}
    assert data["env"] is not loop.env


# -- the run path --------------------------------------------------------------------------


# The commands that skip Typer (cli/flags.py); Typer itself imports both.
@pytest.mark.parametrize("command", [("run", "a"), ("tick", "--wait"), ("tick", "--json")])
def test_the_run_path_never_imports_dataclasses_or_inspect(
        cli: CLI, command: tuple[str, ...]) -> None:
    cli("start", "x", "--name", "a", "--every", "1h", "--after", "1h", "--command", "true",
        check=0)
    modules = imported_modules(*command)
    if "coverage" in modules:
        pytest.skip("coverage itself imports inspect")
    assert {"loopctl.domain.model", "loopctl.fast.data_class"} <= set(modules)  # the path ran
    assert not {"dataclasses", "inspect"} & set(modules)
