"""YAML loading that remembers where each key is, for errors that point at a line."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from runner.core.errors import UserError


@dataclass(frozen=True)
class YamlDocument:
    data: Any
    # Dotted key path -> 1-based line of the key, e.g. {"sparkProperties.spark.x": 7}.
    lines: dict[str, int]

    def line_of(self, *path: str | int) -> int | None:
        """Line of the deepest known key along ``path``."""
        keys = [str(p) for p in path]
        while keys:
            line = self.lines.get(".".join(keys))
            if line:
                return line
            keys.pop()
        return None


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """The safe loader (libyaml's parser when PyYAML has it) rejecting duplicate keys instead of silently
    keeping the last one."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load(text: str, *, file: str | None, code: str = "MANIFEST_INVALID_YAML") -> YamlDocument:
    """Parse YAML; a syntax error is a user error naming the file and line."""
    loader = _UniqueKeyLoader(text)
    try:  # parsed once: the nodes give the lines, the same nodes the data
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        line = mark.line + 1 if mark else None
        message = f"{error.problem or error}" + (f" ({error.context})" if error.context else "")
        raise UserError.of(
            code, file=file, line=line, reason=message, hint="check indentation and quoting around this line"
        ) from None
    except yaml.YAMLError as error:
        raise UserError.of(code, file=file, reason=str(error), hint="") from None
    finally:
        loader.dispose()
    lines: dict[str, int] = {}
    if node is not None:
        _collect_lines(node, "", lines)
    return YamlDocument(data, lines)


def _collect_lines(node: yaml.Node, prefix: str, out: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}{key_node.value}"
            out.setdefault(key, key_node.start_mark.line + 1)
            _collect_lines(value_node, key + ".", out)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            key = f"{prefix}{index}"
            out.setdefault(key, item.start_mark.line + 1)
            _collect_lines(item, key + ".", out)
