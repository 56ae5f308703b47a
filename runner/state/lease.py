"""One deploy at a time per manifest: a lease in the state store, taken with a conditional write.

``locks/<name>.json`` is created only if absent (S3 ``If-None-Match: *``). A second
deploy of the same manifest finds it and stands down without changing anything. A lease
left behind by a runner that died expires after its time-to-live and is then taken over
with ``If-Match`` on the stale lease, so two runners cannot both take it over.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

from runner.core import layout
from runner.core.bucket import Bucket, PreconditionFailed
from runner.core.errors import Problem, UserError
from runner.core.protocol.ownership import Lease


class LeaseHeld(UserError):
    """Another runner is deploying this manifest."""


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@contextmanager
def lease(
    bucket: Bucket,
    name: str,
    *,
    purpose: str,
    ttl: float = 900.0,
    now: datetime | None = None,
    holder: str | None = None,
    dead: Callable[[str], bool] | None = None,
    wait: float = 0.0,
    poll: float = 2.0,
) -> Iterator[str]:
    """Hold ``locks/<name>.json`` for the block; raises LeaseHeld if someone else holds it.

    ``holder`` names the owner (default: host, process and a random id); ``dead(owner)``
    says that a lease's owner is known to be gone (a session that was killed and is being
    restarted), so its lease is taken over before it expires. ``wait``: seconds to keep
    trying (every ``poll`` seconds) while another runner holds it.
    """
    me = holder or owner()
    started = time.monotonic()
    deadline = started + wait
    while True:
        moment = now + timedelta(seconds=time.monotonic() - started) if now else datetime.now(UTC)
        try:
            etag = _take(bucket, name, purpose, ttl, moment, me, dead)
            break
        except LeaseHeld:
            if time.monotonic() + poll > deadline:
                raise
            time.sleep(poll)
    try:
        yield me
    finally:
        # taken over after expiry: then it is the new holder's, not ours to delete
        with contextlib.suppress(PreconditionFailed):
            bucket.delete(layout.lock(name), if_etag=etag)


def _take(
    bucket: Bucket,
    name: str,
    purpose: str,
    ttl: float,
    now: datetime,
    me: str,
    dead: Callable[[str], bool] | None,
) -> str:
    """Write the lease (its ETag), or raise LeaseHeld."""
    body = Lease(
        owner=me,
        purpose=purpose,
        acquired_at=now.isoformat(),
        expires_at=(now + timedelta(seconds=ttl)).isoformat(),
    ).encode()
    key = layout.lock(name)
    try:
        return bucket.write(key, body, if_absent=True)
    except PreconditionFailed:
        current = bucket.read(key)
        if current is None:
            raise LeaseHeld(
                Problem.of("DEPLOY_IN_PROGRESS", name=name, reason="another runner released the lease a moment ago")
            ) from None
        found = Lease.decode(current.text)
        expired = datetime.fromisoformat(found.expires_at) < now or (dead is not None and dead(found.owner))
        if not expired:
            raise LeaseHeld(
                Problem.of(
                    "DEPLOY_IN_PROGRESS",
                    name=name,
                    reason=f"another runner holds the deploy lease ({found.purpose} by {found.owner} since "
                    f"{found.acquired_at})",
                )
            ) from None
        try:
            return bucket.write(key, body, if_etag=current.etag)
        except PreconditionFailed:
            raise LeaseHeld(
                Problem.of("DEPLOY_IN_PROGRESS", name=name, reason="another runner took over the expired lease first")
            ) from None
