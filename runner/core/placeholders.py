"""``${NAME}`` placeholders in table options and engine properties.

They are resolved only when a job runs (from the environment), so what the runner
stores and logs keeps the placeholder, never the secret. ``$${`` writes a literal ``${``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from runner.core.errors import Problem, UserError
from runner.core.tables import TableDef

_PLACEHOLDER = re.compile(r"\$(\$?)\{([^}]*)\}")
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def names_in(text: str) -> list[str]:
    """Placeholder names used in ``text`` (escaped ``$${..}`` excluded)."""
    return [m.group(2) for m in _PLACEHOLDER.finditer(text) if not m.group(1)]


def check_syntax(text: str) -> list[str]:
    """Messages for malformed placeholders such as ``${}`` or ``${A B}``."""
    return [
        f"placeholder ${{{m.group(2)}}} is not a valid name (letters, digits and '_', not starting with a digit)"
        for m in _PLACEHOLDER.finditer(text)
        if not m.group(1) and not _NAME.match(m.group(2))
    ]


def resolve(
    text: str, env: Mapping[str, str], *, file: str | None = None, field: str | None = None, line: int | None = None
) -> str:
    """Replace every ``${NAME}`` from ``env``; a missing name is a located user error."""
    missing: list[str] = []

    def substitute(match: re.Match[str]) -> str:
        if match.group(1):
            return "${" + match.group(2) + "}"
        name = match.group(2)
        if name not in env:
            missing.append(name)
            return match.group(0)
        return env[name]

    resolved = _PLACEHOLDER.sub(substitute, text)
    if missing:
        also = f" (also missing: {', '.join(missing[1:])})" if missing[1:] else ""
        raise UserError.of(
            "UNRESOLVED_PLACEHOLDER", file=file, field=field, line=line, subject="", name=missing[0], also=also
        )
    return resolved


def unresolved(values: Mapping[str, str], env: Mapping[str, str]) -> list[tuple[str, str]]:
    """(key, placeholder name) pairs in ``values`` whose placeholder is not in ``env``."""
    return [(key, name) for key, value in values.items() for name in names_in(value) if name not in env]


def table_problems(table: TableDef, env: Mapping[str, str]) -> list[Problem]:
    """One problem per option of ``table`` whose placeholder is not set."""
    return [
        Problem.of(
            "UNRESOLVED_PLACEHOLDER",
            file=table.file,
            line=table.options_lines.get(key, table.line),
            subject=f"table {table.name} option '{key}': ",
            name=name,
            also="",
        )
        for key, name in unresolved(table.options, env)
    ]


def job_problems(
    spark_properties: Mapping[str, str], file: str | None, tables: Iterable[TableDef], env: Mapping[str, str]
) -> list[Problem]:
    """Unset placeholders in a job's sparkProperties and in the tables it reads and writes."""
    problems = [
        Problem.of("UNRESOLVED_PLACEHOLDER", file=file, field=f"sparkProperties.{key}", subject="", name=name, also="")
        for key, name in unresolved(spark_properties, env)
    ]
    for table in tables:
        problems.extend(table_problems(table, env))
    return problems


def resolved_options(table: TableDef, env: Mapping[str, str]) -> dict[str, str]:
    """Table options with ``${NAME}`` placeholders resolved (never logged or stored)."""
    return {
        key: resolve(
            value,
            env,
            file=table.file,
            field=f"{table.name} option '{key}'",
            line=table.options_lines.get(key, table.line),
        )
        for key, value in table.options.items()
    }
