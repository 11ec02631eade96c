"""Parse YAML text into plain JSON-like documents that remember where each node was.

PyYAML's composer keeps a start mark on every node; we build the Python value
ourselves from the node tree so every JSON pointer maps to a 1-based line and
column. That is what lets ``gridctl validate`` name the exact line of a bad
field. Anything PyYAML or the tree walk rejects becomes a ``ConfigIssue``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gridctl.errors import ConfigIssue

try:  # the C loader composes the same nodes, faster
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - depends on how PyYAML was built
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

MAX_NODES = 200_000
MAX_DEPTH = 64

_CORE = "tag:yaml.org,2002:"
_CONSTRUCTED_TAGS = {_CORE + t for t in ("null", "bool", "int", "float", "str")}
_STR = _CORE + "str"
# PyYAML's safe scalar constructors, called directly: ``construct_object`` adds recursion
# and alias bookkeeping that scalars never need (about 5 ms of a 200-profile load, measured)
_SCALARS = {tag: yaml.SafeLoader.yaml_constructors[tag] for tag in _CONSTRUCTED_TAGS}
_CONSTRUCTOR = yaml.constructor.SafeConstructor()  # stateless for scalars
_RAW_TAGS = {_CORE + t for t in ("timestamp", "binary", "value", "merge")}

Position = tuple[int, int]


@dataclass
class SourceDocument:
    """One YAML document: its value and the position of every node and key."""

    file: str
    index: int
    data: Any
    line: int
    column: int
    positions: dict[str, Position] = field(default_factory=dict)
    key_positions: dict[str, Position] = field(default_factory=dict)

    def position(self, pointer: str, *, key: bool = False) -> Position:
        """Best known position for ``pointer``: itself, else its nearest ancestor."""
        table = self.key_positions if key else self.positions
        if pointer in table:
            return table[pointer]
        while pointer:
            pointer = pointer.rsplit("/", 1)[0]
            if pointer in self.positions:
                return self.positions[pointer]
        return self.positions.get("", (self.line, self.column))


def escape_pointer_token(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


class _Builder:
    """Turns one composed node tree into Python values, recording positions."""

    def __init__(self, file: str, document: SourceDocument):
        self.file = file
        self.doc = document
        self.count = 0
        self.issues: list[ConfigIssue] = []

    def fail(self, node: Node, pointer: str, message: str) -> None:
        self.issues.append(
            ConfigIssue(
                file=self.file,
                line=node.start_mark.line + 1,
                column=node.start_mark.column + 1,
                pointer=pointer,
                message=message,
            )
        )

    def build(self, node: Node, pointer: str, stack: tuple[int, ...]) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise _TooLarge(node)
        if len(stack) > MAX_DEPTH:
            self.fail(node, pointer, f"nesting deeper than {MAX_DEPTH} levels")
            return None
        if id(node) in stack:
            self.fail(node, pointer, "recursive alias")
            return None
        self.doc.positions[pointer] = (node.start_mark.line + 1, node.start_mark.column + 1)
        stack = (*stack, id(node))
        if isinstance(node, ScalarNode):
            return self.scalar(node, pointer)
        if isinstance(node, SequenceNode):
            if node.tag != _CORE + "seq":
                self.fail(node, pointer, f"unsupported YAML tag {node.tag!r}")
                return None
            return [
                self.build(child, f"{pointer}/{i}", stack) for i, child in enumerate(node.value)
            ]
        if isinstance(node, MappingNode):
            if node.tag != _CORE + "map":
                self.fail(node, pointer, f"unsupported YAML tag {node.tag!r}")
                return None
            return self.mapping(node, pointer, stack)
        self.fail(node, pointer, "unsupported YAML node")  # pragma: no cover
        return None

    def scalar(self, node: ScalarNode, pointer: str) -> Any:
        tag = node.tag
        if tag == _STR:
            return node.value
        construct = _SCALARS.get(tag)
        if construct is not None:
            try:
                value = construct(_CONSTRUCTOR, node)
            except (yaml.YAMLError, ValueError, OverflowError) as exc:
                self.fail(node, pointer, f"cannot read scalar: {exc}")
                return None
            if isinstance(value, float) and not math.isfinite(value):
                self.fail(node, pointer, f"number {node.value!r} is not finite")
                return None
            return value
        if node.tag in _RAW_TAGS:
            return str(node.value)
        self.fail(node, pointer, f"unsupported YAML tag {node.tag!r}")
        return None

    def mapping(self, node: MappingNode, pointer: str, stack: tuple[int, ...]) -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag not in (
                _CORE + "str",
                _CORE + "merge",
            ):
                shown = key_node.value if isinstance(key_node, ScalarNode) else "<complex>"
                self.fail(key_node, pointer, f"mapping key {shown!r} must be a string")
                continue
            key = str(key_node.value)
            child = f"{pointer}/{escape_pointer_token(key)}"
            if key in result:
                self.fail(key_node, child, f"duplicate key {key!r}")
                continue
            self.doc.key_positions[child] = (
                key_node.start_mark.line + 1,
                key_node.start_mark.column + 1,
            )
            result[key] = self.build(value_node, child, stack)
        return result


class _TooLarge(Exception):
    def __init__(self, node: Node):
        self.node = node


def parse_yaml(text: str, file: str) -> tuple[list[SourceDocument], list[ConfigIssue]]:
    """Parse every document of ``text``; empty documents are skipped."""
    documents: list[SourceDocument] = []
    issues: list[ConfigIssue] = []
    try:
        for index, root in enumerate(yaml.compose_all(text, Loader=_Loader)):
            if root is None:
                continue
            doc = SourceDocument(
                file=file,
                index=index,
                data=None,
                line=root.start_mark.line + 1,
                column=root.start_mark.column + 1,
            )
            builder = _Builder(file, doc)
            try:
                doc.data = builder.build(root, "", ())
            except _TooLarge as too_large:
                mark = too_large.node.start_mark
                issues.append(
                    ConfigIssue(
                        file,
                        mark.line + 1,
                        mark.column + 1,
                        message=f"document has more than {MAX_NODES} nodes",
                    )
                )
                continue
            if builder.issues:
                issues.extend(builder.issues)
                continue
            if doc.data is not None:
                documents.append(doc)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (0, 0)
        problem = exc.problem or exc.context or "invalid YAML"
        issues.append(ConfigIssue(file, line, column, message=f"YAML syntax error: {problem}"))
    except yaml.YAMLError as exc:
        issues.append(ConfigIssue(file, 0, 0, message=f"YAML error: {exc}"))
    except RecursionError:
        issues.append(ConfigIssue(file, 0, 0, message="YAML nesting too deep"))
    return documents, issues
