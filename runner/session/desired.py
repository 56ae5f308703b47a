"""Where a session's desired manifests come from: the project folder, or the manifests bucket."""

from __future__ import annotations

import tempfile
from pathlib import Path

from runner.authoring.project import Project, load_project
from runner.core import layout
from runner.core.bucket import Bucket, LocalBucket
from runner.state.desired import sync_desired


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
