"""One team's state store: the buckets for manifests, checkpoints and savepoints.

Each can be a local folder or an S3 bucket (``runner/core/bucket.py``); any of them can
be S3 while the others stay local.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.core.bucket import Bucket, BucketAddress, LocalBucket, S3Bucket


@dataclass(frozen=True)
class Store:
    """One team's state: the manifests, checkpoints and savepoints buckets."""

    manifests: Bucket
    checkpoints: Bucket
    savepoints: Bucket

    def describe(self) -> dict[str, BucketAddress]:
        """Where each bucket is, as a job and the session are told (``manifests``, ``checkpoints``,
        ``savepoints``)."""
        return {
            "manifests": self.manifests.describe(),
            "checkpoints": self.checkpoints.describe(),
            "savepoints": self.savepoints.describe(),
        }


def open_store(
    state: Path,
    *,
    manifests_bucket: str | None = None,
    checkpoints_bucket: str | None = None,
    savepoints_bucket: str | None = None,
) -> Store:
    """Local folders under ``state`` for every bucket not given as an S3 bucket name."""

    def pick(name: str, bucket: str | None) -> Bucket:
        if bucket:
            return S3Bucket(bucket)
        return LocalBucket(state / name)

    return Store(
        pick("manifests", manifests_bucket),
        pick("checkpoints", checkpoints_bucket),
        pick("savepoints", savepoints_bucket),
    )
