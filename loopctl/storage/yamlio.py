"""YAML in and out: a strict reader and a dumper for people to read.

The reader refuses duplicate keys, aliases and documents over a million
values, and reports every failure as one line with the line number (exit 3).
PyYAML is imported here only, and only when a file must really be parsed or
written: an idle `tick` and a cached read never load it.
"""

from __future__ import annotations

from loopctl.domain.errors import UnreadableError
from loopctl.domain.untrusted import shorten

TYPE_CHECKING = False  # not `typing`: its import is a cost of every run

if TYPE_CHECKING:
    from typing import Any


# str() of an int past 4,300 decimal digits (~14,280 bits) raises: no error
# message could print it. Below that, each setting's own rule judges it.
MAX_INT_BITS = 14_000


def _strict_loader() -> type:
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class StrictLoader(base):  # type: ignore[misc, valid-type]
        """SafeLoader that refuses duplicate keys (PyYAML keeps the last one
        silently, which would drop a loop without a word) and aliases (ten
        nested ones expand to billions of nodes in any walk of the result)."""

        def get_single_node(self) -> Any:
            node = super().get_single_node()
            if node is not None:
                _refuse_aliases(node)
            return node

        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:
                    raise yaml.constructor.ConstructorError(
                        None, None, "unhashable key", key_node.start_mark) from None
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r}", key_node.start_mark)
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_object(self, node: Any, deep: bool = False) -> Any:
            try:
                return super().construct_object(node, deep=deep)
            except yaml.YAMLError:
                raise
            except (ValueError, KeyError, AttributeError, TypeError) as exc:
                # The safe constructors raise these for `2026-02-30` or
                # `!!int x`; report them like any YAML error, with the line.
                value = node.value if isinstance(node.value, str) else node.tag
                raise yaml.constructor.ConstructorError(
                    None, None, f"bad value {shorten(value, 60)} ({type(exc).__name__})",
                    node.start_mark) from None

        def construct_yaml_int(self, node: Any) -> int:
            # `0x` and 4,000 digits is an int no setting takes, and one that
            # no error message can print: refused here, like any value YAML
            # cannot hold.
            value = int(super().construct_yaml_int(node))
            if value.bit_length() > MAX_INT_BITS:
                raise yaml.constructor.ConstructorError(
                    None, None, f"bad value {shorten(str(node.value), 60)} (an integer beyond "
                    f"{MAX_INT_BITS} bits)", node.start_mark)
            return value

    StrictLoader.add_constructor(
        "tag:yaml.org,2002:map", StrictLoader.construct_mapping)
    StrictLoader.add_constructor(
        "tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    return StrictLoader


MAX_YAML_NODES = 1_000_000


def _refuse_aliases(root: Any) -> None:
    """An alias is a node reached twice; refused before anything is built.
    Linear in the document: each node is visited once."""
    import yaml

    seen: set[int] = set()
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            raise yaml.constructor.ConstructorError(
                None, None, "YAML aliases (*name) are not allowed in loopctl files; "
                "write the value out", node.start_mark)
        seen.add(id(node))
        if len(seen) > MAX_YAML_NODES:
            raise yaml.constructor.ConstructorError(
                None, None, f"more than {MAX_YAML_NODES} values", node.start_mark)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                stack.extend((key, value))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)


def _where_it_began(exc: Exception) -> str | None:
    """An unclosed quote (any scalar or flow the scanner was in) is found at
    the end of the file: say where it began, the line a person must fix."""
    context, began = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    ended = getattr(exc, "problem_mark", None)
    if not context or began is None or ended is None or began.line == ended.line \
            or not any(kind in str(context) for kind in ("quoted scalar", "flow")):
        return None  # a block mapping's start says nothing of where it broke
    what = str(context).removeprefix("while scanning ").removeprefix("while parsing ")
    return (f", line {began.line + 1}, column {began.column + 1}: not valid YAML: "
            f"{what} that starts here is not closed")


def _yaml_error(exc: Exception, where: str) -> UnreadableError:
    import yaml

    if isinstance(exc, yaml.YAMLError):
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        if began := _where_it_began(exc):
            return UnreadableError(f"{where}{began}: {problem}"
                                   + (f" (line {mark.line + 1})" if mark is not None else ""))
        line = f", line {mark.line + 1}" if mark is not None else ""
        return UnreadableError(f"{where}{line}: not valid YAML: {problem}")
    # The safe constructors raise these for values like `2026-02-30` or
    # `!!int x`; they are still a broken file, not a crash.
    return UnreadableError(f"{where}: not valid YAML: bad value "
                           f"({type(exc).__name__}: {exc})")


def parse_yaml_node(text: str, where: str) -> tuple[Any, Any]:
    """The document and its root node (for where the text can be extended)."""
    import yaml

    loader = _strict_loader()(text)
    try:
        node = loader.get_single_node()
        return (None if node is None else loader.construct_document(node)), node
    except (yaml.YAMLError, ValueError, KeyError, AttributeError, TypeError,
            RecursionError) as exc:
        raise _yaml_error(exc, where) from None
    finally:
        loader.dispose()


def parse_yaml_text(text: str, where: str) -> Any:
    return parse_yaml_node(text, where)[0]


def dump_yaml(doc: Any) -> str:
    """YAML for people to read: key order kept, multi-line text as `|` blocks."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
        style = "|" if "\n" in value and value == value.rstrip(" ") else None
        if "\x85" in value:
            style = '"'  # NEL does not survive plain or block style
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, allow_unicode=True,
                     default_flow_style=False, width=100)


def dump_yaml_doc(doc: dict[str, Any]) -> str:
    # `loops` last, so the next `start` can append its entry as text.
    ordered = {k: v for k, v in doc.items() if k != "loops"}
    if "loops" in doc:
        ordered["loops"] = doc["loops"]
    return ("# loopctl loop definitions; every key is described in `man 5 loops.yaml`\n"
            + dump_yaml(ordered))

