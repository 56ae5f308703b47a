"""Documents that say who holds or started something, each written with a conditional write by its owner.

- ``locks/<name>.json`` (``Lease``): one deploy at a time per manifest (``runner/state/lease.py``);
- ``deploy-requests/<name>/<event>.json`` (``DeployClaim``): an S3 change the deploy Lambda turns into
  exactly one EMR step (``runner/aws/deploy_lambda.py``);
- ``jobs/<name>.json`` (``JobRecord``): how to find a job started on this machine (``runner/targets/local.py``).

Their conditional writes (if absent, if the ETag still matches) stay with their owners; what the
documents hold, and how they are encoded and parsed, is here.
"""

from __future__ import annotations

from runner.core.identity import JobIdentity
from runner.core.protocol.document import Document


class Lease(Document):
    owner: str  # host:pid:random of the runner holding it
    purpose: str  # deploy, stop, savepoint, session, ...
    acquired_at: str
    expires_at: str


class DeployClaim(Document):
    key: str  # the manifest's S3 key
    version_id: str | None = None
    created: bool | None = None  # whether the S3 event created the object (else removed it)
    step_name: str
    state: str  # "pending" while its step is added, then "added"
    at: str  # when the state was written
    step_id: str | None = None


class JobRecord(Document):
    target: str  # the target kind that started it
    identity: JobIdentity
    host: str
    pid: int
    start_ticks: int | None = None  # its start (/proc), so that a reused pid is not taken for it; None: it had ended
    log: str
    master: str
