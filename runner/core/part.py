"""The one way a value is written for another process: kebab-case keys, unknown keys ignored.

Every protocol document (``runner/core/protocol/``) is made of parts, and so are the core's own types that
travel inside them (tables, problems, reasons, query diffs, source starts). It lives here, below
``runner/core/protocol/``, so that those types can be parts without the core depending on the protocol.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


def kebab(name: str) -> str:
    """A field's key as written: ``run_id`` -> ``run-id``."""
    return name.replace("_", "-")


class Part(BaseModel):
    """A part of a document: kebab-case keys; keys it does not know (from a later release) are ignored.

    A key spelt as the field's own name (``run_id``) reads too: documents written before they were parts
    used those spellings."""

    model_config = ConfigDict(alias_generator=kebab, populate_by_name=True, extra="ignore", frozen=True)
