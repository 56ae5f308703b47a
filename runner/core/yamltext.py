"""YAML for people to read: a query as its author would write it.

PyYAML's defaults suit machines: a multi-line string (a query over several lines, a ``code`` snippet)
becomes one quoted string with escaped or doubled line breaks, and long lines are folded at 80
columns. Here a multi-line string is a literal block (``|``), line breaks kept, and no line is folded.
"""

from __future__ import annotations

from typing import Any

import yaml


class _Readable(yaml.SafeDumper):
    """The safe dumper, writing multi-line strings as literal blocks."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # A literal block cannot hold trailing spaces on a line or some control characters: PyYAML quotes those.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Readable.add_representer(str, _string)


def readable(data: Any) -> str:
    """``data`` as block YAML, keys in their order, multi-line strings as literal blocks, no line folded."""
    return yaml.dump(data, Dumper=_Readable, sort_keys=False, allow_unicode=True, width=1 << 20)
