"""A bucket of the state store: a flat key space, a local folder or S3.

The runner and the running jobs both read and write state through it. Every bucket has
the operations deployments need, and the same behaviour on both backends:

- ``read``/``write``/``delete``/``keys``/``copy_prefix``;
- conditional writes: ``write(..., if_absent=True)`` fails when the key exists, and
  ``write(..., if_etag=tag)`` fails unless the key still holds the version read earlier.
  On S3 these are ``If-None-Match: *`` and ``If-Match``; locally a lock file serialises
  the check and an atomic rename makes the write, so two processes racing for the same
  key see exactly one winner either way (:class:`PreconditionFailed` for the loser);
- ``uri(key)``: where Spark reads and writes the same key (a local path, or ``s3://``).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field

from runner.core.part import Part


class PreconditionFailed(Exception):
    """A conditional write lost: the key exists, or changed since it was read."""


@dataclass(frozen=True)
class Blob:
    data: bytes
    etag: str

    @property
    def text(self) -> str:
        return self.data.decode("utf-8")


class Bucket(Protocol):
    """One bucket's keys. Keys use '/' and never start with it."""

    def read(self, key: str) -> Blob | None: ...

    def write(self, key: str, data: bytes, *, if_absent: bool = False, if_etag: str | None = None) -> str: ...

    def delete(self, key: str, *, if_etag: str | None = None) -> None: ...

    def keys(self, prefix: str) -> list[str]: ...

    def listing(self, prefix: str) -> dict[str, str]:
        """Every key under ``prefix`` with a tag that changes when its content does (S3: the ETag)."""
        ...

    def sizes(self, prefix: str) -> dict[str, int]:
        """Keys under ``prefix`` with their sizes in bytes, from a listing."""
        ...

    def copy_prefix(self, source: str, destination: str, into: Bucket | None = None) -> int: ...

    def delete_prefix(self, prefix: str) -> int: ...

    def uri(self, key: str) -> str: ...

    def describe(self) -> BucketAddress: ...


def _etag(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


class LocalBucket:
    """A folder playing a bucket."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / key).resolve()
        if path != self.root and self.root not in path.parents:
            raise ValueError(f"key {key!r} leaves the bucket folder")
        return path

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".store.lock", "a+b") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def read(self, key: str) -> Blob | None:
        try:
            data = self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return Blob(data, _etag(data))

    def write(self, key: str, data: bytes, *, if_absent: bool = False, if_etag: str | None = None) -> str:
        path = self._path(key)
        if not (if_absent or if_etag):
            _replace(path, data)
            return _etag(data)
        with self._locked():
            current = self.read(key)
            if if_absent and current is not None:
                raise PreconditionFailed(f"{key} already exists")
            if if_etag is not None and (current is None or current.etag != if_etag):
                raise PreconditionFailed(f"{key} changed since it was read")
            _replace(path, data)
        return _etag(data)

    def delete(self, key: str, *, if_etag: str | None = None) -> None:
        path = self._path(key)
        if if_etag is None:
            path.unlink(missing_ok=True)
            return
        with self._locked():
            current = self.read(key)
            if current is None or current.etag != if_etag:
                raise PreconditionFailed(f"{key} changed since it was read")
            path.unlink()

    def keys(self, prefix: str) -> list[str]:
        base = self._path(prefix.rstrip("/")) if prefix.strip("/") else self.root
        if base.is_file():
            return [prefix]
        if not base.is_dir():
            return []
        found = []
        for directory, _, files in os.walk(base):
            for name in files:
                if name.startswith(".store.lock") or name.startswith(".tmp-"):
                    continue
                found.append((Path(directory) / name).relative_to(self.root).as_posix())
        return sorted(k for k in found if k.startswith(prefix))

    def listing(self, prefix: str) -> dict[str, str]:
        """Keys with their modification time and size: a change without reading the content."""
        tags = {}
        for key in self.keys(prefix):
            try:
                stat = self._path(key).stat()
            except FileNotFoundError:
                continue
            tags[key] = f"{stat.st_mtime_ns}-{stat.st_size}"
        return tags

    def sizes(self, prefix: str) -> dict[str, int]:
        found = {}
        for key in self.keys(prefix):
            try:
                found[key] = self._path(key).stat().st_size
            except FileNotFoundError:
                continue
        return found

    def copy_prefix(self, source: str, destination: str, into: Bucket | None = None) -> int:
        target = into or self
        count = 0
        for key in self.keys(source):
            relative = key[len(source) :].lstrip("/")
            if isinstance(target, LocalBucket):
                destination_path = target._path(f"{destination.rstrip('/')}/{relative}")
                destination_path.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(self._path(key), destination_path)
            else:
                blob = self.read(key)
                if blob is None:
                    continue
                target.write(f"{destination.rstrip('/')}/{relative}", blob.data)
            count += 1
        return count

    def delete_prefix(self, prefix: str) -> int:
        keys = self.keys(prefix)
        base = self._path(prefix.rstrip("/"))
        if base.is_dir():
            shutil.rmtree(base)
        else:
            for key in keys:
                self._path(key).unlink(missing_ok=True)
        return len(keys)

    def uri(self, key: str) -> str:
        return str(self._path(key))

    def describe(self) -> LocalAddress:
        return LocalAddress(path=str(self.root))


def _replace(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename, so readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class S3Bucket:
    """An S3 bucket (optionally under a key prefix), through boto3.

    The endpoint comes from boto3's own settings (``AWS_ENDPOINT_URL`` and friends), so
    the same code talks to AWS, to a local S3 or to moto's server in tests.
    """

    def __init__(self, bucket: str, prefix: str = "", client: Any | None = None):
        import boto3

        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.client = client or boto3.client("s3")

    def _key(self, key: str) -> str:
        return self.prefix + key

    def read(self, key: str, *, version_id: str | None = None) -> Blob | None:
        """The object (or one version of it, in a versioned bucket); None if there is none."""
        from botocore.exceptions import ClientError

        extra = {"VersionId": version_id} if version_id else {}
        try:
            response = self.client.get_object(Bucket=self.bucket, Key=self._key(key), **extra)
        except ClientError as error:
            if error.response["Error"]["Code"] in ("NoSuchKey", "NoSuchVersion", "404", "InvalidArgument"):
                return None
            raise
        return Blob(response["Body"].read(), response["ETag"])

    def write(self, key: str, data: bytes, *, if_absent: bool = False, if_etag: str | None = None) -> str:
        from botocore.exceptions import ClientError

        extra: dict[str, str] = {}
        if if_absent:
            extra["IfNoneMatch"] = "*"
        if if_etag is not None:
            extra["IfMatch"] = if_etag
        try:
            response = self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **extra)
        except ClientError as error:
            code = error.response["Error"]["Code"]
            # If-Match on a key that is gone answers 404 NoSuchKey: it changed since it was read, too.
            if code in ("PreconditionFailed", "ConditionalRequestConflict", "412") or (
                if_etag is not None and code in ("NoSuchKey", "404")
            ):
                raise PreconditionFailed(f"{key}: {code}") from None
            raise
        return response["ETag"]

    def delete(self, key: str, *, if_etag: str | None = None) -> None:
        from botocore.exceptions import ClientError

        extra = {"IfMatch": if_etag} if if_etag is not None else {}
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key), **extra)
        except ClientError as error:
            if error.response["Error"]["Code"] in ("PreconditionFailed", "412"):
                raise PreconditionFailed(f"{key} changed since it was read") from None
            if error.response["Error"]["Code"] not in ("NoSuchKey", "404"):
                raise

    def current_version(self, key: str) -> str | None:
        """The version id of the object's current version; None if it has none (deleted, or never written)."""
        from botocore.exceptions import ClientError

        try:
            response = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as error:
            if error.response["Error"]["Code"] in ("NoSuchKey", "404", "NotFound"):
                return None
            raise
        return response.get("VersionId")

    def keys(self, prefix: str) -> list[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        found = []
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            found.extend(item["Key"][len(self.prefix) :] for item in page.get("Contents", []))
        return sorted(found)

    def listing(self, prefix: str) -> dict[str, str]:
        """Keys with their ETags, from the listing alone (one request per 1000 keys)."""
        paginator = self.client.get_paginator("list_objects_v2")
        tags = {}
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            tags.update({item["Key"][len(self.prefix) :]: item["ETag"] for item in page.get("Contents", [])})
        return tags

    def sizes(self, prefix: str) -> dict[str, int]:
        paginator = self.client.get_paginator("list_objects_v2")
        found = {}
        for page in paginator.paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            found.update({item["Key"][len(self.prefix) :]: int(item["Size"]) for item in page.get("Contents", [])})
        return found

    def copy_prefix(self, source: str, destination: str, into: Bucket | None = None) -> int:
        target = into or self
        count = 0
        for key in self.keys(source):
            relative = key[len(source) :].lstrip("/")
            new_key = f"{destination.rstrip('/')}/{relative}"
            if isinstance(target, S3Bucket):
                target.client.copy_object(
                    Bucket=target.bucket,
                    Key=target._key(new_key),
                    CopySource={"Bucket": self.bucket, "Key": self._key(key)},
                )
            else:
                blob = self.read(key)
                if blob is None:
                    continue
                target.write(new_key, blob.data)
            count += 1
        return count

    def delete_prefix(self, prefix: str) -> int:
        keys = self.keys(prefix)
        for start in range(0, len(keys), 1000):
            batch = [{"Key": self._key(k)} for k in keys[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})
        return len(keys)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def describe(self) -> S3Address:
        return S3Address(bucket=self.bucket, prefix=self.prefix)


class LocalAddress(Part):
    """A local folder playing a bucket, as a job or the session is told where its store is."""

    kind: Literal["local"] = "local"
    path: str


class S3Address(Part):
    """An S3 bucket (and a prefix in it), as a job or the session is told where its store is."""

    kind: Literal["s3"] = "s3"
    bucket: str
    prefix: str = ""


# Where a bucket is (:meth:`Bucket.describe`), told apart by its ``kind``.
BucketAddress = Annotated[LocalAddress | S3Address, Field(discriminator="kind")]


def bucket_from(address: LocalAddress | S3Address) -> Bucket:
    """The bucket an address names (how a job finds its store)."""
    if isinstance(address, LocalAddress):
        return LocalBucket(Path(address.path))
    return S3Bucket(address.bucket, address.prefix)


def read_uri(uri: str) -> bytes:
    """The bytes at ``uri``: ``s3://bucket/key`` or a local path (how a driver reads its job spec)."""
    if uri.startswith("s3://"):
        bucket, _, key = uri[len("s3://") :].partition("/")
        blob = S3Bucket(bucket).read(key)
        if blob is None:
            raise FileNotFoundError(uri)
        return blob.data
    return Path(uri).read_bytes()
