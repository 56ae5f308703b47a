"""How a placeholder is written: ``${NAME}``, ``${ssm:/path/name}``, ``${secret:name#key}``, and
``$${`` for a literal ``${`` (``runner/core/placeholders.py`` says where their values come from).

Only the text, so what checks option values as they are written (the connectors, the manifest)
can tell a placeholder from a value without knowing the tables that hold it.
"""

from __future__ import annotations

import re

PLACEHOLDER = re.compile(r"\$(\$?)\{([^}]*)\}")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
SSM_PATH = re.compile(r"^/?[A-Za-z0-9_.\-]+(?:/[A-Za-z0-9_.\-]+)*$")
SECRET_NAME = re.compile(r"^([A-Za-z0-9/_+=.@\-]+)(?:#([A-Za-z0-9_.\-]+))?$")
SSM = "ssm:"
SECRET = "secret:"


def names_in(text: str) -> list[str]:
    """Placeholder references used in ``text`` (``NAME``, ``ssm:/p``, ``secret:s#k``; escaped ``$${..}`` excluded)."""
    return [m.group(2) for m in PLACEHOLDER.finditer(text) if not m.group(1)]


def _reference_problem(reference: str) -> str | None:
    if reference.startswith(SSM):
        if not SSM_PATH.match(reference[len(SSM) :]):
            return f"placeholder ${{{reference}}} is not an SSM parameter name (letters, digits, '_', '.', '-', '/')"
        return None
    if reference.startswith(SECRET):
        if not SECRET_NAME.match(reference[len(SECRET) :]):
            return (
                f"placeholder ${{{reference}}} is not a secret name (letters, digits and /_+=.@-), "
                "optionally followed by #field"
            )
        return None
    if not NAME.match(reference):
        return (
            f"placeholder ${{{reference}}} is not a valid name (letters, digits and '_', not starting with a digit; "
            "or ssm:/path, secret:name)"
        )
    return None


def check_syntax(text: str) -> list[str]:
    """Messages for malformed placeholders such as ``${}``, ``${A B}`` or ``${ssm:}``."""
    return [message for reference in names_in(text) if (message := _reference_problem(reference))]
