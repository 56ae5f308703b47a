"""One state-store suite, run against both backends: a local folder and S3 (moto)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from runner.core.bucket import LocalBucket, PreconditionFailed, S3Bucket
from runner.state.lease import LeaseHeld, lease

pytestmark = pytest.mark.s3  # moto, in-process or as its server


@pytest.fixture(params=["local", "s3"])
def bucket(request, tmp_path: Path):
    if request.param == "local":
        yield LocalBucket(tmp_path / "bucket")
        return
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="team-manifests")
        yield S3Bucket("team-manifests", client=client)


@pytest.fixture
def other(bucket, tmp_path: Path):
    """A second bucket of the same kind (savepoints next to checkpoints)."""
    if isinstance(bucket, LocalBucket):
        return LocalBucket(tmp_path / "other")
    bucket.client.create_bucket(Bucket="team-savepoints")
    return S3Bucket("team-savepoints", client=bucket.client)


def test_write_read_and_missing_keys(bucket):
    assert bucket.read("deployed/job.yaml") is None
    etag = bucket.write("deployed/job.yaml", b"one")
    blob = bucket.read("deployed/job.yaml")
    assert blob.data == b"one" and blob.etag == etag
    bucket.write("deployed/job.yaml", b"two")
    assert bucket.read("deployed/job.yaml").text == "two"


def test_create_only_if_absent_has_one_winner(bucket):
    bucket.write("locks/job.json", b"first", if_absent=True)
    with pytest.raises(PreconditionFailed):
        bucket.write("locks/job.json", b"second", if_absent=True)
    assert bucket.read("locks/job.json").text == "first"


def test_write_if_unchanged_rejects_a_stale_etag(bucket):
    old = bucket.write("deployed/job.yaml", b"v1")
    new = bucket.write("deployed/job.yaml", b"v2", if_etag=old)
    with pytest.raises(PreconditionFailed):
        bucket.write("deployed/job.yaml", b"v3", if_etag=old)
    with pytest.raises(PreconditionFailed):
        bucket.write("missing.yaml", b"x", if_etag=old)
    assert bucket.read("deployed/job.yaml").text == "v2"
    with pytest.raises(PreconditionFailed):
        bucket.delete("deployed/job.yaml", if_etag=old)
    bucket.delete("deployed/job.yaml", if_etag=new)
    assert bucket.read("deployed/job.yaml") is None


def test_racing_creators_see_exactly_one_winner(bucket):
    """Eight writers at once: one creates the key. On S3 this rests on the condition every write
    carries (moto's handling of it made atomic, as S3's is: tests/motoserver.py)."""
    winners, losers = [], []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        try:
            bucket.write("locks/race.json", str(i).encode(), if_absent=True)
            winners.append(i)
        except PreconditionFailed:
            losers.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1 and len(losers) == 7
    assert bucket.read("locks/race.json").text == str(winners[0])


def test_keys_copy_and_delete_prefixes(bucket, other):
    for key in (
        "checkpoints/job/1/run-a/offsets/0",
        "checkpoints/job/1/run-a/commits/0",
        "checkpoints/job/1/run-a/state/0/0/1.delta",
        "checkpoints/job/2/run-b/metadata",
    ):
        bucket.write(key, key.encode())
    assert bucket.keys("checkpoints/job/1/") == [
        "checkpoints/job/1/run-a/commits/0",
        "checkpoints/job/1/run-a/offsets/0",
        "checkpoints/job/1/run-a/state/0/0/1.delta",
    ]
    copied = bucket.copy_prefix("checkpoints/job/1/run-a/", "savepoints/job/1/sp/", into=other)
    assert copied == 3
    assert other.read("savepoints/job/1/sp/state/0/0/1.delta").text == "checkpoints/job/1/run-a/state/0/0/1.delta"
    assert bucket.delete_prefix("checkpoints/job/1/") == 3
    assert bucket.keys("checkpoints/") == ["checkpoints/job/2/run-b/metadata"]


def test_lease_excludes_a_second_holder_and_is_released(bucket):
    with lease(bucket, "job", purpose="deploy"):
        with pytest.raises(LeaseHeld) as held, lease(bucket, "job", purpose="deploy"):
            pass
        assert held.value.codes == ["DEPLOY_IN_PROGRESS"]
        assert "standing down, nothing changed" in held.value.problems[0].message
    with lease(bucket, "job", purpose="deploy"):  # released: can be taken again
        pass
    assert bucket.read("locks/job.json") is None


def test_an_expired_lease_is_taken_over(bucket):
    past = datetime.now(UTC) - timedelta(hours=2)
    # the first holder's lease expired an hour ago
    with lease(bucket, "job", purpose="deploy", ttl=60, now=past), lease(bucket, "job", purpose="deploy"):
        assert "acquired-at" in bucket.read("locks/job.json").text
    assert bucket.read("locks/job.json") is None


def test_local_keys_cannot_leave_the_bucket(tmp_path: Path):
    with pytest.raises(ValueError):
        LocalBucket(tmp_path / "b").write("../escape", b"x")


def test_a_session_watching_the_bucket_reads_only_the_manifests_that_changed():
    """The session's copy of the manifests prefix follows adds, edits and deletions, and re-reads
    only the keys whose ETag changed (one GET for one edited manifest, not one per file)."""
    from runner.state.desired import Desired

    ddl = (
        "CREATE TABLE `b`.`events` (id STRING) WITH ('connector' = 'filesystem', 'path' = '/tmp/e', "
        "'format' = 'json');\nCREATE TABLE `b`.`out` (id STRING) WITH ('connector' = 'blackhole');\n"
    )

    def manifest(name: str, where: str = "") -> bytes:
        return f'name: {name}\ntarget-table: "`b`.`out`"\nsql: "SELECT id FROM `b`.`events`{where}"\n'.encode()

    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="team-manifests")
        bucket = S3Bucket("team-manifests", client=client)
        bucket.write("manifests/tables/b.sql", ddl.encode())
        bucket.write("manifests/job-template.yaml", b"mode: session\n")
        for name in ("q-a", "q-b", "q-c"):
            bucket.write(f"manifests/{name}.yaml", manifest(name))
        reads: list[str] = []
        read = bucket.read
        bucket.read = lambda key, **kw: (reads.append(key), read(key, **kw))[1]  # type: ignore[method-assign]
        desired = Desired(bucket=bucket)

        def loaded() -> dict[str, str | None]:
            project = desired.load(desired.listing())
            return {p.stem: project.load_manifest(p).sql for p in project.manifest_paths()}

        assert set(loaded()) == {"q-a", "q-b", "q-c"} and len(reads) == 5  # the first copy reads everything
        reads.clear()
        assert loaded()["q-a"] == "SELECT id FROM `b`.`events`" and reads == []  # nothing changed: no GET
        bucket.write("manifests/q-b.yaml", manifest("q-b", " WHERE id > 'a'"))
        bucket.delete("manifests/q-c.yaml")
        bucket.write("manifests/q-d.yaml", manifest("q-d"))
        found = loaded()
        assert set(found) == {"q-a", "q-b", "q-d"} and found["q-b"] == "SELECT id FROM `b`.`events` WHERE id > 'a'"
        assert sorted(reads) == ["manifests/q-b.yaml", "manifests/q-d.yaml"]
