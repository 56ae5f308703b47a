"""``console/access.json``: the web console's tokens (``sql-runner console``).

Every request to the console carries one of them; what it does through the console's actions is
recorded in history under the token's name. The console (or the session serving it) is the one
reader; ``ensure_token`` the one writer. Only what can read the team's manifests bucket can see them,
as with the session's control token.
"""

from __future__ import annotations

import hmac
import re
import secrets

from runner.core import layout
from runner.core.bucket import Bucket, PreconditionFailed
from runner.core.protocol.document import Document, Part, now, read

TOKEN_NAME = re.compile(r"^[a-z0-9][a-z0-9_.@-]{0,63}$")


class ConsoleToken(Part):
    name: str
    token: str
    created_at: str


class ConsoleAccess(Document):
    tokens: list[ConsoleToken] = []

    def named(self, name: str) -> ConsoleToken | None:
        return next((token for token in self.tokens if token.name == name), None)

    def holder(self, given: str) -> str | None:
        """The name of the token ``given`` is, compared in constant time with every token; None if none."""
        found = None
        for token in self.tokens:
            if hmac.compare_digest(given.encode(), token.token.encode()):
                found = token.name
        return found


def read_access(bucket: Bucket) -> ConsoleAccess:
    return read(bucket, layout.CONSOLE_ACCESS, ConsoleAccess) or ConsoleAccess()


def ensure_token(bucket: Bucket, name: str) -> ConsoleToken:
    """The console token named ``name``, made (and kept in the state store) when there is none yet."""
    if not TOKEN_NAME.match(name):
        raise ValueError(f"a token name is 1 to 64 of a-z, 0-9, _ . @ - (starting with a letter or digit): {name!r}")
    for _ in range(10):
        blob = bucket.read(layout.CONSOLE_ACCESS)
        access = ConsoleAccess.decode(blob.data) if blob is not None else ConsoleAccess()
        existing = access.named(name)
        if existing is not None:
            return existing
        made = ConsoleToken(name=name, token=secrets.token_urlsafe(32), created_at=now())
        updated = access.model_copy(update={"tokens": [*access.tokens, made]})
        try:
            if blob is None:
                bucket.write(layout.CONSOLE_ACCESS, updated.encode(), if_absent=True)
            else:
                bucket.write(layout.CONSOLE_ACCESS, updated.encode(), if_etag=blob.etag)
            return made
        except PreconditionFailed:  # another console made one at the same time: read again
            continue
    raise RuntimeError("could not record a console token: the access file keeps changing")
