"""``console/access.json``: the web console's tokens (``sql-runner console``), kept as their SHA-256.

Every request to the console carries one of them, or a sign-in a browser made with one; what it does
through the console's actions is recorded in history under the token's name. A token is shown once,
when it is made (``sql-runner console --print-token``); the state store keeps only its digest, so
whoever reads the bucket learns no token. Making a token anew for a name replaces that name's earlier
one, which stops working (and the sign-ins made with it end). The console (or the session serving it)
is the one reader; ``issue_token`` and ``revoke_token`` the writers.

A file written by an earlier release held the tokens themselves: it still reads (each token becomes its
digest), and ``scrub`` rewrites it so that none stays in the store.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from collections.abc import Callable
from typing import Any

from pydantic import model_validator

from runner.core import layout
from runner.core.bucket import Bucket, PreconditionFailed
from runner.core.protocol.document import Document, Part, now, read

TOKEN_NAME = re.compile(r"^[a-z0-9][a-z0-9_.@-]{0,63}$")


def digest(secret: str) -> str:
    """The SHA-256 of a random secret, hex: a token has 256 random bits, so no salt or stretching is needed."""
    return hashlib.sha256(secret.encode()).hexdigest()


class ConsoleToken(Part):
    name: str
    digest: str
    created_at: str

    @model_validator(mode="before")
    @classmethod
    def _digest_of_a_kept_token(cls, data: Any) -> Any:
        """An earlier release kept the token itself: its digest is what is kept now."""
        if isinstance(data, dict) and "token" in data and "digest" not in data:
            data = {key: value for key, value in data.items() if key != "token"} | {"digest": digest(data["token"])}
        return data


class ConsoleAccess(Document):
    tokens: list[ConsoleToken] = []

    def named(self, name: str) -> ConsoleToken | None:
        return next((token for token in self.tokens if token.name == name), None)

    def holder(self, given: str) -> str | None:
        """The name of the token ``given`` is; None if none. Its digest is compared with every token's in
        constant time."""
        return self.holder_of_digest(digest(given)) if given else None

    def holder_of_digest(self, given: str) -> str | None:
        """The name of the token whose digest is ``given``; None if no token has it (any more)."""
        found = None
        for token in self.tokens:
            if hmac.compare_digest(given.encode(), token.digest.encode()):
                found = token.name
        return found


def read_access(bucket: Bucket) -> ConsoleAccess:
    return read(bucket, layout.CONSOLE_ACCESS, ConsoleAccess) or ConsoleAccess()


def check_name(name: str) -> None:
    if not TOKEN_NAME.match(name):
        raise ValueError(f"a token name is 1 to 64 of a-z, 0-9, _ . @ - (starting with a letter or digit): {name!r}")


def issue_token(bucket: Bucket, name: str) -> str:
    """A new console token named ``name``, returned once: the state store keeps its digest, in place of the
    digest of that name's earlier token."""
    check_name(name)
    made = secrets.token_urlsafe(32)
    entry = ConsoleToken(name=name, digest=digest(made), created_at=now())
    _update(bucket, lambda tokens: [*(t for t in tokens if t.name != name), entry])
    return made


def revoke_token(bucket: Bucket, name: str) -> bool:
    """Remove the token named ``name``; whether there was one."""
    check_name(name)
    had = read_access(bucket).named(name) is not None
    if had:
        _update(bucket, lambda tokens: [t for t in tokens if t.name != name])
    return had


def scrub(bucket: Bucket) -> bool:
    """Rewrite an access file that still holds tokens (an earlier release's) with their digests only;
    whether it did."""
    blob = bucket.read(layout.CONSOLE_ACCESS)
    if blob is None:
        return False
    try:
        kept = json.loads(blob.data).get("tokens", [])
    except (ValueError, AttributeError):
        return False  # not readable: read_access says so where it is read
    if not any(isinstance(token, dict) and "token" in token for token in kept):
        return False
    _update(bucket, lambda tokens: tokens)
    return True


def _update(bucket: Bucket, change: Callable[[list[ConsoleToken]], list[ConsoleToken]]) -> None:
    """Write ``change`` of the tokens, read and written under the file's version so that two writers at
    once do not lose each other's token."""
    for _ in range(10):
        blob = bucket.read(layout.CONSOLE_ACCESS)
        access = ConsoleAccess.decode(blob.data) if blob is not None else ConsoleAccess()
        updated = access.model_copy(update={"tokens": change(list(access.tokens))})
        try:
            if blob is None:
                bucket.write(layout.CONSOLE_ACCESS, updated.encode(), if_absent=True)
            else:
                bucket.write(layout.CONSOLE_ACCESS, updated.encode(), if_etag=blob.etag)
            return
        except PreconditionFailed:  # another console wrote at the same time: read again
            continue
    raise RuntimeError("could not record a console token: the access file keeps changing")
