"""The desired manifests as pushed to the manifests bucket (``manifests/``), copied into a folder.

On EMR the runner deploys from the team's bucket (``--from-store``): the pushed
manifests, template and DDL are copied into a temporary project folder, optionally
with one manifest pinned to the exact S3 object version an event named. A session
watching the bucket keeps its copy in step by ETag instead (``sync_desired``).
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
            _place(root, key, blob.data)
    if pinned is not None:
        key, version_id = pinned
        if not isinstance(bucket, S3Bucket):
            raise UserError.of("OBJECT_VERSION_NEEDS_S3")
        blob = bucket.read(key, version_id=version_id)
        if blob is None:
            raise UserError.of("OBJECT_VERSION_NOT_FOUND", uri=bucket.uri(key), version=version_id)
        _place(root, key, blob.data)
    (root / layout.DESIRED_PREFIX).mkdir(exist_ok=True)


def sync_desired(bucket: Bucket, root: Path, listing: dict[str, str], copied: dict[str, str]) -> None:
    """Bring ``root``'s copy of ``manifests/`` up to ``listing`` (key -> tag, from ``bucket.listing``),
    reading only the keys whose tag differs from ``copied`` (key -> tag of the copy; updated here)."""
    for key in sorted(set(copied) - set(listing)):
        (root / key).unlink(missing_ok=True)
        del copied[key]
    for key, tag in sorted(listing.items()):
        if copied.get(key) == tag:
            continue
        blob = bucket.read(key)
        if blob is None:  # deleted since the listing
            (root / key).unlink(missing_ok=True)
            copied.pop(key, None)
            continue
        _place(root, key, blob.data)
        copied[key] = blob.etag  # if it changed since the listing, its newer tag is read again next time
    (root / layout.DESIRED_PREFIX).mkdir(exist_ok=True)


def _place(root: Path, key: str, data: bytes) -> None:
    (root / key).parent.mkdir(parents=True, exist_ok=True)
    (root / key).write_bytes(data)
