"""The desired manifests as pushed to the manifests bucket (``manifests/``), copied into a folder.

On EMR the runner deploys from the team's bucket (``--from-store``): the pushed
manifests, template and DDL are copied into a temporary project folder, optionally
with one manifest pinned to the exact S3 object version an event named.
"""

from __future__ import annotations

from pathlib import Path

from runner.core import layout
from runner.core.bucket import Bucket, S3Bucket
from runner.core.errors import UserError


def copy_desired(bucket: Bucket, root: Path, pinned: tuple[str, str] | None = None) -> None:
    """Write every key under ``manifests/`` into ``root``; ``pinned``: (key, S3 version id) to take exactly."""
    for key in bucket.keys(layout.DESIRED_PREFIX):
        blob = bucket.read(key)
        if blob is not None:
            (root / key).parent.mkdir(parents=True, exist_ok=True)
            (root / key).write_bytes(blob.data)
    if pinned is not None:
        key, version_id = pinned
        if not isinstance(bucket, S3Bucket):
            raise UserError.of("OBJECT_VERSION_NEEDS_S3")
        blob = bucket.read(key, version_id=version_id)
        if blob is None:
            raise UserError.of("OBJECT_VERSION_NOT_FOUND", uri=bucket.uri(key), version=version_id)
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(blob.data)
    (root / layout.DESIRED_PREFIX).mkdir(exist_ok=True)
