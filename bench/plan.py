"""Planning many deployed, running, unchanged manifests against state on S3 (moto's server on loopback).

    .venv/bin/python bench/plan.py [--counts 200,1000] [--rounds 3] [--profile]

A project of N SQL manifests over one events table, each deployed (its record in the
manifests bucket, written by the runner's own code from one Spark analysis) and running
(its local job record names this process, which is alive). ``sql-runner plan`` over the
whole project is timed, N at a time, alternating the sizes, ``--rounds`` times; every
manifest must come out ``no change``. ``--profile`` prints where one plan of the largest
N spends its time (cProfile, cumulative).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")
ROLES = ("manifests", "checkpoints", "savepoints")


def buckets(count: int) -> dict[str, str]:
    """Each project size has its own state (a whole-project plan removes jobs whose manifest is gone)."""
    return {role: f"plan-bench-{count}-{role}" for role in ROLES}


DDL = """
CREATE TABLE `demo`.`events` (id STRING, account STRING, amount DOUBLE, ts TIMESTAMP(3),
  WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
WITH ('connector' = 'filesystem', 'path' = 'data/events', 'format' = 'json');
CREATE TABLE `demo`.`out` (id STRING, amount DOUBLE, __create_timestamp TIMESTAMP(3), __query_name STRING,
  __query_description STRING, __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3))
WITH ('connector' = 'filesystem', 'path' = 'data/out', 'format' = 'json');
"""


def manifest(i: int) -> str:
    return (
        f'name: q-{i:04d}\ntarget-table: "`demo`.`out`"\n'
        f"sql: SELECT id, amount FROM `demo`.`events` WHERE amount > {i}\n"
    )


def project(root: Path, count: int) -> Path:
    folder = root / f"project-{count}"
    (folder / "manifests" / "tables").mkdir(parents=True)
    (folder / "manifests" / "tables" / "tables.sql").write_text(DDL)
    for i in range(count):
        (folder / "manifests" / f"q-{i:04d}.yaml").write_text(manifest(i))
    return folder


def deploy_records(folder: Path, count: int, team: str) -> None:
    """Each manifest deployed and running: records written with the runner's own code."""
    from runner.analysis.session import close_local_session, local_session
    from runner.analysis.validate import analyse
    from runner.authoring.project import load_project
    from runner.core import layout
    from runner.core.bucket import S3Bucket
    from runner.core.identity import JobIdentity
    from runner.core.manifest import Meta
    from runner.core.protocol.deployed import DeploymentRecord
    from runner.core.protocol.ownership import JobRecord
    from runner.core.starts import SourceTable
    from runner.state.savepoints import new_run_id
    from runner.targets.local import process_start_ticks

    loaded = load_project(folder)
    spark = local_session("plan-bench")
    first = loaded.load_manifest(folder / "manifests" / "q-0000.yaml")
    analysed = analyse(spark, first, loaded.catalog, os.environ, file="manifests/q-0000.yaml")
    close_local_session(spark)
    sources = tuple(SourceTable(table=t.name, connector=t.connector) for t in analysed.reads)
    bucket = S3Bucket(buckets(count)["manifests"])
    now = datetime.now(UTC)
    me = {"host": socket.gethostname(), "pid": os.getpid(), "start_ticks": process_start_ticks(os.getpid())}

    def one(i: int) -> None:
        loaded_manifest = loaded.load_manifest(folder / "manifests" / f"q-{i:04d}.yaml")
        meta = Meta(query_id=f"id-{i}", query_version=1, query_create_timestamp=now.replace(microsecond=0))
        run_id = new_run_id(now)
        record = DeploymentRecord(
            manifest=loaded_manifest.model_copy(update={"meta": meta}),
            tables=analysed.tables,
            sources=sources,
            run_id=run_id,
            target="local",
            deployed_at=now,
        )
        bucket.write(layout.deployed(loaded_manifest.name), record.encode())
        identity = JobIdentity(team=team, name=loaded_manifest.name, version=1, run_id=run_id)
        job = JobRecord(target="local", identity=identity, **me, log="/dev/null", master="local[*]")
        bucket.write(layout.job_record(loaded_manifest.name), job.encode())

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(count)))


def plan_seconds(folder: Path, env: dict[str, str], team: str, count: int) -> float:
    options = [f"--{role}-bucket={bucket}" for role, bucket in buckets(count).items()]
    began = time.monotonic()
    result = subprocess.run(
        [SQL_RUNNER, "plan", "--json", "--team", team, *options],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    seconds = time.monotonic() - began
    if result.returncode != 0:
        raise SystemExit(f"plan failed: {result.stderr[-2000:]}")
    decisions = [json.loads(line)["decision"] for line in result.stdout.splitlines()]
    if len(decisions) != count or set(decisions) != {"nothing"}:
        raise SystemExit(f"expected {count} unchanged manifests, got {sorted(set(decisions))} x {len(decisions)}")
    if "starting local Spark" in result.stderr:
        raise SystemExit("plan started Spark for unchanged manifests")
    return seconds


def plans(counts: list[int], rounds: int, profile: bool, aws: dict[str, str]) -> dict[int, list[float]]:
    """Plan seconds per project size, the sizes alternating, ``rounds`` times (against moto's server)."""
    os.environ.update(aws)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    import boto3

    s3 = boto3.client("s3")
    for count in counts:
        for bucket in buckets(count).values():
            s3.create_bucket(Bucket=bucket)
    team = "bench"
    results_by_count: dict[int, list[float]] = {count: [] for count in counts}
    with tempfile.TemporaryDirectory(prefix="plan-bench-") as tmp:
        folders = {count: project(Path(tmp), count) for count in counts}
        started = time.monotonic()
        for count in counts:
            deploy_records(folders[count], count, team)
        print(f"deployed {sum(counts)} records in {time.monotonic() - started:.1f}s", flush=True)
        for _ in range(rounds):
            for count in counts:
                results_by_count[count].append(plan_seconds(folders[count], env, team, count))
        if profile:
            largest = folders[max(counts)]
            options = [f"--{role}-bucket={bucket}" for role, bucket in buckets(max(counts)).items()]
            code = (
                "import cProfile, pstats, sys; from runner.cli.main import cli; "
                "cProfile.run('cli.main(sys.argv[1:], standalone_mode=False)', '/tmp/plan.prof'); "
                "pstats.Stats('/tmp/plan.prof').sort_stats('cumulative').print_stats(25)"
            )
            subprocess.run(
                [sys.executable, "-c", code, "plan", "--json", "--team", team, *options],
                cwd=largest,
                env=env,
                check=False,
            )
    return results_by_count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="200,1000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    from tests.motoserver import moto_server

    with moto_server() as aws:
        results_by_count = plans(counts, args.rounds, args.profile, aws)
    from bench import results

    # no side to run beside a plan: each size is set against the target, PRODUCT.md's 3 s for 200
    records = [
        results.record(
            f"plan of {count} unchanged manifests (moto S3)",
            [(s, 3.0 * count / 200) for s in seconds],
            "s",
            higher_is_better=False,
        )
        for count, seconds in results_by_count.items()
    ]
    results.write("plan", records)
    print("\n| manifests | rounds | median s | min s | max s | per manifest ms |")
    print("|---|---|---|---|---|---|")
    for count, seconds in results_by_count.items():
        median = statistics.median(seconds)
        print(
            f"| {count} | {len(seconds)} | {median:.2f} | {min(seconds):.2f} | {max(seconds):.2f} | "
            f"{median / count * 1000:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
