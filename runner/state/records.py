"""Reading what is deployed: each name's record (``runner/core/protocol/deployed.py``) and its etag."""

from __future__ import annotations

from runner.core import layout
from runner.core.bucket import Blob, Bucket
from runner.core.protocol.deployed import DeploymentRecord


def read_deployed(bucket: Bucket, name: str) -> tuple[DeploymentRecord | None, Blob | None]:
    """The deployed record and the blob it came from (its etag guards the next write)."""
    blob = bucket.read(layout.deployed(name))
    if blob is None:
        return None, None
    return DeploymentRecord.decode(blob.text), blob


def deployed_names(bucket: Bucket) -> list[str]:
    return sorted(
        k.removeprefix("deployed/").removesuffix(".yaml") for k in bucket.keys("deployed/") if k.endswith(".yaml")
    )
