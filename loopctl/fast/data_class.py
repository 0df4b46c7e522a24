"""Plain data classes without `dataclasses`.

`import dataclasses` imports `inspect` (and with it ast, dis, tokenize,
linecache...), ~13 ms of the CPU of every `loopctl run`. `@record` gives a
class what loopctl used of `@dataclass`: an `__init__` taking the annotated
fields in order (positionally or by keyword) with their class-level defaults
or `factory(...)` defaults made per instance, `__repr__`, `__eq__` (unhashable
unless frozen, as dataclasses do), `__match_args__`, and for `frozen=True` a
`__setattr__`/`__delattr__` that raise `FrozenInstanceError` (an
AttributeError). `asdict`, `replace` and `fields` work as their dataclasses
namesakes do, except that `fields` gives the field names.

Annotations are only read for their names (every module uses
`from __future__ import annotations`); `ClassVar[...]` ones are not fields.
Instances keep a plain `__dict__`: code may fill one in bypassing `__init__`
(loopctl.storage.defs_cache does, for speed).

Type checkers see `record` as `dataclasses.dataclass`, so they check the
classes as data classes; at run time `dataclasses` is never imported.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from dataclasses import dataclass as record
    from typing import Any, TypeVar

    T = TypeVar("T")

_FIELDS = "__record_fields__"  # the field names, in order
_SPEC = "__record_spec__"  # name: default, _Factory, or _MISSING
_MISSING: Any = object()
_ATOMIC = frozenset({type(None), bool, int, float, complex, str, bytes, type, range,
                     type(Ellipsis), type(NotImplemented)})


class FrozenInstanceError(AttributeError):
    """Assigning to (or deleting) a field of a frozen record."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


def factory(make: Callable[[], Any]) -> Any:
    """A field default made fresh for each instance: `x: list[int] = factory(list)`."""
    return _Factory(make)


def _record(cls: type | None = None, /, *, frozen: bool = False) -> Any:
    """`@record` or `@record(frozen=True)`."""
    def wrap(klass: type) -> type:
        return _process(klass, frozen)

    return wrap if cls is None else wrap(cls)


if not TYPE_CHECKING:
    record = _record


def _own_annotations(cls: type) -> dict[str, Any]:
    found = cls.__dict__.get("__annotations__")
    if found is None:  # Python 3.14 makes them on first access
        found = getattr(cls, "__annotations__", None) or {}
    return dict(found)


def _is_classvar(kind: object) -> bool:
    return isinstance(kind, str) and kind.replace("typing.", "").startswith("ClassVar")


def _spec(cls: type) -> dict[str, Any]:
    """Each field's default (a value, a _Factory or _MISSING), bases first."""
    spec: dict[str, Any] = {}
    for base in cls.__mro__[-1:0:-1]:
        spec.update(base.__dict__.get(_SPEC, {}))
    for name, kind in _own_annotations(cls).items():
        if _is_classvar(kind):
            continue
        spec.pop(name, None)  # redeclared: it moves to the end, as in dataclasses
        spec[name] = cls.__dict__.get(name, _MISSING)
    for name, value in spec.items():
        if value is _MISSING and name not in cls.__dict__:
            spec[name] = getattr(cls, name, _MISSING)  # a plain class attribute of a base
        elif value.__class__.__hash__ is None:  # as dataclasses refuse list, dict, set
            raise ValueError(f"mutable default {type(value)} for field {name} "
                             "is not allowed: use factory()")
    return spec


def _process(cls: type, frozen: bool) -> type:
    spec = _spec(cls)
    names = tuple(spec)
    namespace: dict[str, Any] = {"_MISSING": _MISSING}
    defaulted = False
    for name, default in spec.items():
        if isinstance(default, _Factory):
            namespace[f"_f_{name}"] = default.make
            defaulted = True
        elif default is not _MISSING:
            namespace[f"_d_{name}"] = default
            defaulted = True
        elif defaulted:
            raise TypeError(f"non-default argument {name!r} follows default argument")
        if isinstance(cls.__dict__.get(name), _Factory):
            delattr(cls, name)  # as dataclasses remove field() objects
    sources = _Sources(names, spec, frozen)
    _set(cls, "__init__", _compiled_on_first_call(cls, "__init__", sources, namespace,
                                                  _interpreted_init(cls, spec, frozen)))
    _set(cls, "__repr__", _make_repr(names))
    _set(cls, "__eq__", _compiled_on_first_call(cls, "__eq__", sources, namespace))
    if "__hash__" not in cls.__dict__:
        hashed = _compiled_on_first_call(cls, "__hash__", sources, namespace) if frozen else None
        cls.__hash__ = hashed  # type: ignore[assignment]
    if frozen:
        _set(cls, "__setattr__", _make_frozen_setattr(cls, names))
        _set(cls, "__delattr__", _make_frozen_delattr(cls, names))
    if "__match_args__" not in cls.__dict__:
        cls.__match_args__ = names  # type: ignore[attr-defined,misc]
    setattr(cls, _SPEC, spec)
    setattr(cls, _FIELDS, names)
    return cls


class _Sources:
    """The methods' source, written when the first of them is compiled:
    most records never are (~30 a run imports, ~1M instructions to write
    them all)."""

    __slots__ = ("_args", "_made")

    def __init__(self, names: tuple[str, ...], spec: dict[str, Any], frozen: bool) -> None:
        self._args = (names, spec, frozen)
        self._made: dict[str, str] | None = None

    def __getitem__(self, method: str) -> str:
        if self._made is None:
            self._made = _sources(*self._args)
        return self._made[method]


def _sources(names: tuple[str, ...], spec: dict[str, Any], frozen: bool) -> dict[str, str]:
    params, body = [], []
    for name, default in spec.items():
        value = name
        if isinstance(default, _Factory):
            params.append(f"{name}=_MISSING")
            value = f"_f_{name}() if {name} is _MISSING else {name}"
        elif default is not _MISSING:
            params.append(f"{name}=_d_{name}")
        else:
            params.append(name)
        # Frozen: its own __setattr__ refuses; the instance __dict__ is plain.
        body.append(f"  _state_[{name!r}] = {value}" if frozen else f"  self.{name} = {value}")
    if frozen and body:
        body.insert(0, "  _state_ = self.__dict__")
    mine = ", ".join(f"self.{name}" for name in names)
    theirs = ", ".join(f"other.{name}" for name in names)
    comma = "," if len(names) == 1 else ""
    return {
        "__init__": "\n".join([f"def __init__({', '.join(['self', *params])}):",
                               *(body or ["  pass"])]),
        "__eq__": "\n".join(["def __eq__(self, other):",
                             "  if other.__class__ is self.__class__:",
                             f"    return ({mine}{comma}) == ({theirs}{comma})",
                             "  return NotImplemented"]),
        "__hash__": f"def __hash__(self):\n  return hash(({mine}{comma}))",
    }


_INTERPRETED_CALLS = 64  # an `__init__` is compiled once a process has made this many


def _compiled_on_first_call(cls: type, name: str, sources: _Sources,
                            namespace: dict[str, Any], interpreted: Any = None) -> Any:
    """A stub that compiles the method from our own source (as dataclasses
    makes its `__init__`) when first called, and puts it in its place.
    Parsing and compiling cost ~1M instructions for a record of many fields;
    a run imports ~30 records and calls few of their methods. With
    `interpreted` (the same method, not compiled: slower per call), the
    first calls use it, and only a class made often is compiled: a `tick
    --wait` made ~20 kinds of records a few times each, ~21M instructions
    of compiling between its driver and its supervisor."""
    calls = 0

    def stub(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        func = namespace.get(name)
        if func is None and interpreted is not None and calls < _INTERPRETED_CALLS:
            calls += 1
            return interpreted(self, *args, **kwargs)
        if func is None:
            exec(sources[name], namespace)  # our own source
            func = namespace[name]
            func.__qualname__ = f"{cls.__qualname__}.{name}"
            if cls.__dict__.get(name) is stub:
                type.__setattr__(cls, name, func)
        return func(self, *args, **kwargs)

    stub.__name__ = stub.__qualname__ = name
    return stub


def _interpreted_init(cls: type, spec: dict[str, Any], frozen: bool) -> Any:
    """The compiled `__init__`'s behaviour, field by field: the arguments
    bound (a TypeError before any factory runs), then each field set in
    order, a factory called for each one not given."""
    names = tuple(spec)
    required = tuple(name for name, default in spec.items() if default is _MISSING)
    where = f"{cls.__qualname__}.__init__()"

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{where} takes {len(names) + 1} positional arguments but "
                            f"{len(args) + 1} were given")
        given = dict(zip(names, args, strict=False))  # the first len(args) fields
        for key, value in kwargs.items():
            if key in given:
                raise TypeError(f"{where} got multiple values for argument {key!r}")
            if key not in spec:
                raise TypeError(f"{where} got an unexpected keyword argument {key!r}")
            given[key] = value
        missing = [name for name in required if name not in given]
        if missing:
            raise TypeError(f"{where} missing {len(missing)} required argument(s): "
                            + ", ".join(map(repr, missing)))
        state = self.__dict__ if frozen else None
        for name in names:
            if name in given:
                value = given[name]
            else:
                value = spec[name]
                if isinstance(value, _Factory):
                    value = value.make()
            if state is not None:
                state[name] = value
            else:
                setattr(self, name, value)

    return __init__


def _set(cls: type, name: str, func: Any) -> None:
    """Add a method the class does not define itself."""
    if name in cls.__dict__:
        return
    func.__qualname__ = f"{cls.__qualname__}.{func.__name__}"
    setattr(cls, name, func)


def _make_repr(names: tuple[str, ...]) -> Any:
    def __repr__(self: Any) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{self.__class__.__qualname__}({inner})"

    return __repr__


def _make_frozen_setattr(cls: type, names: tuple[str, ...]) -> Any:
    known = frozenset(names)

    def __setattr__(self: Any, name: str, value: Any) -> None:
        if type(self) is cls or name in known:
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        super(cls, self).__setattr__(name, value)  # type: ignore[arg-type]

    return __setattr__


def _make_frozen_delattr(cls: type, names: tuple[str, ...]) -> Any:
    known = frozenset(names)

    def __delattr__(self: Any, name: str) -> None:
        if type(self) is cls or name in known:
            raise FrozenInstanceError(f"cannot delete field {name!r}")
        super(cls, self).__delattr__(name)  # type: ignore[arg-type]

    return __delattr__


def is_record(obj: Any) -> bool:
    """A record class or an instance of one."""
    cls = obj if isinstance(obj, type) else type(obj)
    return hasattr(cls, _FIELDS)


def fields(obj: Any) -> tuple[str, ...]:
    """The field names of a record (class or instance), in order."""
    try:
        return tuple(getattr(obj, _FIELDS))
    except AttributeError:
        raise TypeError("must be called with a record type or instance") from None


def asdict(obj: Any) -> dict[str, Any]:
    """The fields as a dict, recursing into records, lists, tuples and dicts
    (other values are deep-copied), as `dataclasses.asdict` does."""
    if isinstance(obj, type) or not is_record(obj):
        raise TypeError("asdict() should be called on record instances")
    result: dict[str, Any] = _asdict_inner(obj)
    return result


def _asdict_inner(obj: Any) -> Any:
    cls = type(obj)
    if cls in _ATOMIC:
        return obj
    if hasattr(cls, _FIELDS):
        return {name: _asdict_inner(getattr(obj, name)) for name in getattr(cls, _FIELDS)}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # a namedtuple
        return cls(*[_asdict_inner(v) for v in obj])
    if isinstance(obj, (list, tuple)):
        return cls(_asdict_inner(v) for v in obj)
    if isinstance(obj, dict):
        if hasattr(cls, "default_factory"):  # a defaultdict
            copied = cls(obj.default_factory)  # type: ignore[attr-defined]
            for k, v in obj.items():
                copied[_asdict_inner(k)] = _asdict_inner(v)
            return copied
        return cls((_asdict_inner(k), _asdict_inner(v)) for k, v in obj.items())
    import copy

    return copy.deepcopy(obj)


def replace(obj: T, /, **changes: Any) -> T:
    """A new record like `obj` with some fields changed (through `__init__`)."""
    if isinstance(obj, type) or not is_record(obj):
        raise TypeError("replace() should be called on record instances")
    for name in fields(obj):
        if name not in changes:
            changes[name] = getattr(obj, name)
    return obj.__class__(**changes)
