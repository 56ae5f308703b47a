"""The desired manifests as pushed to the manifests bucket (``manifests/``), copied into a folder.

On EMR the runner deploys from the team's bucket (``--from-store``): the pushed
manifests, template and DDL are copied into a temporary project folder, optionally
with one manifest pinned to the exact S3 object version an event named. A session (and the
console) watching the bucket keeps its copy in step by ETag instead (``Desired``, ``sync_desired``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from runner.authoring.project import Project, load_project
from runner.core import layout
from runner.core.bucket import Bucket, LocalBucket, S3Bucket
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


class Desired:
    """The desired manifests under ``manifests/`` of a project folder or of the manifests bucket.

    Both are read as a bucket: ``listing()`` is cheap (no file is read) and changes with any file's
    content. The bucket's manifests are copied into one folder kept for the session's life, so
    relative paths in their DDL resolve the same way on every reload (a new folder each time would
    make every table look changed); only the keys whose tag changed since the last copy are read
    again, so a change to one manifest costs one GET, not one per file.
    """

    def __init__(self, folder: Path | None = None, bucket: Bucket | None = None):
        assert (folder is None) != (bucket is None), "a project folder or a manifests bucket"
        self.folder = folder
        self.bucket: Bucket = LocalBucket(folder) if folder is not None else bucket  # type: ignore[assignment]
        self._copy = Path(tempfile.mkdtemp(prefix="sql-runner-session-")) if folder is None else None
        self._copied: dict[str, str] = {}  # key -> the tag of the copy in the folder

    def describe(self) -> str:
        return self.bucket.uri(layout.DESIRED_PREFIX)

    def listing(self) -> dict[str, str]:
        """Every desired file with a tag that changes with its content."""
        return self.bucket.listing(layout.DESIRED_PREFIX)

    def load(self, listing: dict[str, str]) -> Project:
        """The desired project: the folder, or the session's copy of the bucket's manifests brought up to
        ``listing`` (this round's ``listing()``)."""
        if self.folder is not None:
            return load_project(self.folder)
        assert self._copy is not None
        sync_desired(self.bucket, self._copy, listing, self._copied)
        return load_project(self._copy)
