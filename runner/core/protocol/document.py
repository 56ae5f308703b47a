"""The base of every protocol document: parts (``runner/core/part.py``) with a schema number, one encoding."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Self, TypeVar

from pydantic import Field, ValidationError

from runner.core.bucket import Bucket
from runner.core.part import Part

SCHEMA = 1  # the version of the documents this release writes


def now() -> str:
    """The time a document says something happened: UTC, ISO 8601, milliseconds."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Document(Part):
    """A document in the state store. ``schema`` is the release's document version (absent: 0)."""

    schema_version: int = Field(default=0, alias="schema")

    def encode(self, *, line: bool = False) -> bytes:
        """The document as written: this release's schema number, keys by alias, unset optional keys left out;
        ``line``: on one line (one of a stream of JSON lines)."""
        stamped = self.model_copy(update={"schema_version": SCHEMA})
        return stamped.model_dump_json(by_alias=True, exclude_none=True, indent=None if line else 2).encode()

    @classmethod
    def decode(cls, text: str | bytes) -> Self:
        return cls.model_validate_json(text)


class Unreadable(Exception):
    """A document in the state store that is not what its key says it is (the key and pydantic's reason)."""

    def __init__(self, key: str, error: ValidationError | ValueError):
        super().__init__(f"{key} is not a readable document: {error}")
        self.key = key


D = TypeVar("D", bound=Document)


def read(bucket: Bucket, key: str, model: type[D]) -> D | None:
    """The document at ``key``, or None when there is none; ``Unreadable`` when it does not parse."""
    blob = bucket.read(key)
    if blob is None:
        return None
    try:
        return model.decode(blob.text)
    except (ValidationError, ValueError) as error:
        raise Unreadable(key, error) from None
