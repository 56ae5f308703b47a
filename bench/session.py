"""Session mode against application mode, side by side in one run.

    .venv/bin/python bench/session.py [--changes 20] [--app-changes 20] [--queries 50] [--kills 10] [--seed 7]
                                      [--previews 5]

1. Time to effect: from a manifest landing to the first completed micro-batch of the new
   or changed query (the completion time of the new run's first batch, from its status).
   Each round adds a query, changes its filter (compatible: restored), changes its target
   table (version 2, continuing after the files version 1 read), all measured, then
   removes it (not measured), so the load stays the same. Session mode watching the
   project folder; session mode watching the manifests bucket on S3 (moto's server on
   127.0.0.1); application mode (the manifest written, then ``sql-runner deploy`` of it:
   a fresh spark-submit per change). Beside
   it, the part spent carrying the decision out (stop with savepoint, restore or start:
   the history's ``seconds``); the rest is noticing the change, checking the query, and
   the new run's first micro-batch.
   While the folder-watching session runs, live previews: ``sql-runner preview --sql``
   answered by the session, against ``--local`` (a new local Spark JVM), alternating.
2. Memory: ``--queries`` simple queries in one session (the session's whole process
   group: JVM and Python workers) against one application-mode job's process group
   times ``--queries``.
3. Soak: the session killed with SIGKILL ``--kills`` times at random moments while events
   arrive, started again each time; every file sink must hold each row exactly once.

Events are small JSON-lines files written every half second; every query reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demo.committed_rows import committed_json_rows  # noqa: E402
from runner.targets.base import group_processes  # noqa: E402

SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")
METADATA = """, __create_timestamp TIMESTAMP(3), __query_name STRING, __query_description STRING,
  __query_id STRING, __query_version INT, __query_create_timestamp TIMESTAMP(3)"""


class Project:
    """A throw-away project: an events table, ``outputs`` output tables, a template."""

    def __init__(self, root: Path, outputs: int, mode: str, env: dict[str, str] | None = None):
        self.root = root
        self.env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", **(env or {})}
        (root / "manifests" / "tables").mkdir(parents=True)
        # absolute paths: the S3 variant's session reads its DDL from a copy of the bucket elsewhere
        data = root / "data"
        ddl = (
            "CREATE TABLE `b`.`events` (id STRING, amount DOUBLE) WITH ('connector' = 'filesystem', "
            f"'path' = '{data / 'events'}', 'format' = 'json');\n"
        )
        for n in range(outputs):
            ddl += (
                f"CREATE TABLE `b`.`out-{n}` (id STRING, amount DOUBLE{METADATA}) WITH "
                f"('connector' = 'filesystem', 'path' = '{data / f'out-{n}'}', 'format' = 'json');\n"
            )
        (root / "manifests" / "tables" / "b.sql").write_text(ddl)
        (root / "manifests" / "job-template.yaml").write_text(
            f"mode: {mode}\ntrigger-interval: 1 second\nsparkProperties: {{spark.sql.shuffle.partitions: '2'}}\n"
        )
        self.files = 0
        self.ids: list[str] = []
        self._stop = threading.Event()

    def manifest_text(self, name: str, out: int, threshold: int) -> str:
        return (
            f'name: {name}\ntarget-table: "`b`.`out-{out}`"\n'
            f'sql: "SELECT id, amount FROM `b`.`events` WHERE amount >= {threshold}"\n'
        )

    def write_events(self) -> None:
        folder = self.root / "data" / "events"
        folder.mkdir(parents=True, exist_ok=True)
        ids = [f"e{self.files:05d}-{i}" for i in range(5)]
        tmp = folder / f".{self.files}.tmp"
        tmp.write_text("".join(json.dumps({"id": i, "amount": float(n)}) + "\n" for n, i in enumerate(ids)))
        tmp.rename(folder / f"f{self.files:05d}.json")
        self.ids.extend(ids)
        self.files += 1

    def feed(self, every: float = 0.5) -> threading.Thread:
        def run() -> None:
            while not self._stop.wait(every):
                self.write_events()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def stop_feeding(self) -> None:
        self._stop.set()

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run([SQL_RUNNER, *args], cwd=self.root, env=self.env, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise SystemExit(f"sql-runner {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def rows(self, out: int) -> Counter:
        return Counter(r["id"] for r in committed_json_rows(self.root / "data" / f"out-{out}"))


def wait(condition: Callable[[], object], what: str, timeout: float = 180.0, every: float = 0.02) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(every)
    raise SystemExit(f"timed out waiting for {what}")


def first_completed(status: dict, old_run: str | None) -> float | None:
    """When the first micro-batch of a run other than ``old_run`` completed (epoch seconds), from its
    status: the batch's trigger time plus its duration."""
    recent = status.get("recent-progress") or []
    if status.get("run-id") in (None, old_run) or not recent:
        return None
    first = recent[0]
    began = datetime.fromisoformat(first["timestamp"]).timestamp()
    return began + (first["batch-duration-ms"] or 0) / 1000


# The changes each round makes to its query, measured one after the other: (kind, output table, threshold).
CHANGES = (
    ("new", 1, 0),
    ("compatible", 1, 1),  # another filter: stopped with a savepoint and restored
    ("new version", 2, 1),  # another target table: version 2, continuing after the files version 1 read
)


def time_to_effect(
    project: Project,
    rounds: int,
    land: Callable[[str, str], None],
    remove: Callable[[str], None],
    read_status: Callable[[str], dict],
    apply: Callable[[str], None] | None = None,
) -> dict[str, list[float]]:
    """Seconds from a manifest landing to its first completed micro-batch, by kind of change (``CHANGES``).

    The end is the batch's own completion time as its status reports it, not the moment the
    bench reads it, so how often the bench polls does not count (reading moto's server fifty
    times a second took cores from the session it measures)."""
    timings: dict[str, list[float]] = {kind: [] for kind, _, _ in CHANGES}
    for i in range(rounds):
        name = f"q-{i:02d}"
        for kind, out, threshold in CHANGES:
            old_run = read_status(name).get("run-id")
            landed = time.time()
            land(name, project.manifest_text(name, out, threshold))
            if apply is not None:
                apply(name)
            completed = wait(lambda: first_completed(read_status(name), old_run), f"{name} in effect", every=0.1)  # noqa: B023
            timings[kind].append(float(completed) - landed)  # type: ignore[arg-type]
        remove(name)
    return timings


def carrying_out(root: Path) -> list[float]:
    """Seconds each measured change spent carrying out its decision (stop, savepoint, restore or start:
    the history's ``seconds``); the rest of its time to effect is noticing the change, checking the
    query, and the first micro-batch."""
    found = []
    for entry in sorted((root / ".sql-runner" / "manifests" / "history").glob("q-*/*.json")):
        record = json.loads(entry.read_text())
        if record["decision"] in ("start", "restore") and record.get("seconds") is not None:
            found.append(float(record["seconds"]))
    return found


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def local_status(project: Project) -> Callable[[str], dict]:
    def read(name: str) -> dict:
        path = project.root / ".sql-runner" / "manifests" / "status" / f"{name}.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return {}

    return read


def group_rss(pgid: int) -> int:
    """Resident memory of every process in the group, in bytes."""
    total = 0
    for entry, _ in group_processes(pgid):
        try:
            lines = (entry / "status").read_text().splitlines()
        except OSError:  # it ended meanwhile
            continue
        total += sum(int(line.split()[1]) * 1024 for line in lines if line.startswith("VmRSS:"))
    return total


def record_pid(project: Project, name: str) -> int:
    return json.loads((project.root / ".sql-runner" / "manifests" / "jobs" / f"{name}.json").read_text())["pid"]


def previews(project: Project, rounds: int) -> dict[str, list[float]]:
    """``sql-runner preview --sql`` answered by the running session, and with --local (a new JVM), alternating:
    the command's wall time, and for the session the seconds its endpoint took to answer."""
    sql = "SELECT id, amount FROM `b`.`events` WHERE amount >= 3"
    found: dict[str, list[float]] = {"session": [], "session endpoint": [], "local": []}
    for _ in range(rounds):
        for how in ("session", "local"):
            began = time.monotonic()
            done = project.cli("preview", "--sql", sql, "-n", "5", *(["--local"] if how == "local" else []))
            found[how].append(time.monotonic() - began)
            assert "5 row(s)" in done.stdout, done.stdout
            if how == "session":
                answered = re.search(r"answered by session \S+ in ([0-9.]+)s", done.stderr)
                assert answered is not None, done.stderr
                found["session endpoint"].append(float(answered.group(1)))
    return found


def bench_session_local(
    base: Path, rounds: int, preview_rounds: int
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    project = Project(base / "session-local", 3, "session")
    project.write_events()
    (project.root / "manifests" / "steady.yaml").write_text(project.manifest_text("steady", 0, 0))
    project.cli("session", "start", "--poll", "0.2")
    project.feed()
    read = local_status(project)
    try:
        wait(lambda: read("steady").get("progress"), "the steady query")

        def land(name: str, text: str) -> None:
            (project.root / "manifests" / f"{name}.yaml").write_text(text)

        def remove(name: str) -> None:
            (project.root / "manifests" / f"{name}.yaml").unlink()
            wait(lambda: read(name).get("state") == "stopped", f"{name} removed", every=0.1)

        timings = time_to_effect(project, rounds, land, remove, read)
        return timings, previews(project, preview_rounds)
    finally:
        project.stop_feeding()
        project.cli("session", "stop", check=False)


def bench_session_s3(base: Path, rounds: int) -> dict[str, list[float]]:
    from tests.motoserver import moto_server

    with moto_server() as env:
        return _session_s3(base, rounds, env)


def _session_s3(base: Path, rounds: int, env: dict[str, str]) -> dict[str, list[float]]:
    import boto3

    os.environ.update(env)
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="bench-manifests")
    project = Project(base / "session-s3", 3, "session", {**env, "SQL_RUNNER_MANIFESTS_BUCKET": "bench-manifests"})
    for path in (project.root / "manifests").rglob("*.*"):
        key = path.relative_to(project.root).as_posix()
        s3.put_object(Bucket="bench-manifests", Key=key, Body=path.read_bytes())
    project.write_events()

    def land(name: str, text: str) -> None:
        s3.put_object(Bucket="bench-manifests", Key=f"manifests/{name}.yaml", Body=text.encode())

    def read(name: str) -> dict:
        try:
            return json.loads(s3.get_object(Bucket="bench-manifests", Key=f"status/{name}.json")["Body"].read())
        except s3.exceptions.NoSuchKey:
            return {}

    def remove(name: str) -> None:
        s3.delete_object(Bucket="bench-manifests", Key=f"manifests/{name}.yaml")
        wait(lambda: read(name).get("state") == "stopped", f"{name} removed", every=0.1)

    land("steady", project.manifest_text("steady", 0, 0))
    project.cli("session", "start", "--from-store", "--poll", "0.2")
    project.feed()
    try:
        wait(lambda: read("steady").get("progress"), "the steady query")
        return time_to_effect(project, rounds, land, remove, read)
    finally:
        project.stop_feeding()
        project.cli("session", "stop", check=False)


def bench_application(base: Path, rounds: int) -> tuple[dict[str, list[float]], int]:
    project = Project(base / "application", 3, "application")
    project.write_events()
    project.feed()
    read = local_status(project)
    rss = 0

    def land(name: str, text: str) -> None:
        (project.root / "manifests" / f"{name}.yaml").write_text(text)

    def apply(name: str) -> None:
        project.cli("deploy", f"manifests/{name}.yaml")

    def remove(name: str) -> None:
        nonlocal rss
        rss = max(rss, group_rss(record_pid(project, name)))
        (project.root / "manifests" / f"{name}.yaml").unlink()
        project.cli("undeploy", name)

    try:
        return time_to_effect(project, rounds, land, remove, read, apply), rss
    finally:
        project.stop_feeding()


def bench_memory(base: Path, queries: int) -> int:
    """Resident memory of the session once every query has completed a micro-batch over the same input."""
    project = Project(base / "memory", queries, "session")
    for _ in range(3):
        project.write_events()
    template = project.root / "manifests" / "job-template.yaml"
    template.write_text(template.read_text().replace("1 second", "10 seconds"))  # 2 cores: let them settle
    for n in range(queries):
        (project.root / "manifests" / f"m-{n:02d}.yaml").write_text(project.manifest_text(f"m-{n:02d}", n, n % 3))
    project.cli("session", "start")
    read = local_status(project)
    try:
        wait(lambda: all(read(f"m-{n:02d}").get("progress") for n in range(queries)), "every query", 1800, 2.0)
        return group_rss(record_pid(project, "_session"))
    finally:
        project.cli("session", "stop", check=False)


def soak(base: Path, kills: int, seed: int) -> dict[str, int]:
    rng = random.Random(seed)
    project = Project(base / "soak", 2, "session")
    project.write_events()
    (project.root / "manifests" / "s-a.yaml").write_text(project.manifest_text("s-a", 0, 0))
    (project.root / "manifests" / "s-b.yaml").write_text(
        'name: s-b\ntarget-table: "`b`.`out-1`"\ncode: |\n'
        '  execution_output = table("`b`.`events`").dropDuplicates(["id"]).select("id", "amount")\n'
    )
    project.cli("session", "start")
    project.feed()
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(1.0, 8.0))
            os.killpg(record_pid(project, "_session"), signal.SIGKILL)
            time.sleep(0.5)
            project.cli("session", "start")
    finally:
        project.stop_feeding()
    wanted = set(project.ids)
    wait(lambda: all(set(project.rows(n)) == wanted for n in (0, 1)), "every event written", 300, 1.0)
    project.cli("session", "stop")
    result = {"expected": len(wanted)}
    for n in (0, 1):
        rows = project.rows(n)
        result[f"out-{n} rows"] = sum(rows.values())
        result[f"out-{n} duplicates"] = sum(c - 1 for c in rows.values() if c > 1)
        result[f"out-{n} missing"] = len(wanted - set(rows))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=20, help="measured changes per session variant")
    parser.add_argument("--app-changes", type=int, default=20, help="measured changes in application mode")
    parser.add_argument("--queries", type=int, default=50)
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--previews", type=int, default=5, help="previews each way (session, local JVM)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sql-runner-bench-") as folder:
        base = Path(folder)
        rounds = max(1, -(-args.changes // len(CHANGES)))
        local, previewed = bench_session_local(base, rounds, args.previews)
        print("\n## Live preview (sql-runner preview --sql, 5 rows, while the session hosts the bench's queries)\n")
        print("| how | previews | p50 s | max s | vs session p50 |")
        print("|---|---|---|---|---|")
        session_p50 = statistics.median(previewed["session"])
        for label, key in (
            ("session: the whole command", "session"),
            ("session: its endpoint's answer", "session endpoint"),
            ("--local: a new local Spark JVM", "local"),
        ):
            values = previewed[key]
            print(
                f"| {label} | {len(values)} | {statistics.median(values):.2f} | {max(values):.2f} "
                f"| x{statistics.median(values) / session_p50:.1f} |",
                flush=True,
            )
        s3 = bench_session_s3(base, rounds)
        application, app_rss = bench_application(base, max(1, -(-args.app_changes // len(CHANGES))))
        print("\n## Time to effect (manifest landed -> first completed micro-batch of the new run)\n")
        kinds = [kind for kind, _, _ in CHANGES]
        print(
            "| mode | changes | p50 s | p95 s | max s | vs session (local) p50 | "
            + " | ".join(f"{kind}, p50 s" for kind in kinds)
            + " | of which carrying out, p50 s |"
        )
        print("|---|---|---|---|---|---|" + "---|" * len(kinds) + "---|")
        base_p50 = statistics.median([t for values in local.values() for t in values])
        for label, by_kind, root in (
            ("session, project folder", local, base / "session-local"),
            ("session, S3 manifests prefix (moto server)", s3, None),
            ("application (sql-runner deploy: fresh spark-submit)", application, base / "application"),
        ):
            values = [t for kind in kinds for t in by_kind[kind]]
            p50 = statistics.median(values)
            carried = carrying_out(root) if root is not None else []
            print(
                f"| {label} | {len(values)} | {p50:.2f} | {percentile(values, 0.95):.2f} | {max(values):.2f} "
                f"| x{p50 / base_p50:.1f} | "
                + " | ".join(f"{statistics.median(by_kind[kind]):.2f}" for kind in kinds)
                + f" | {f'{statistics.median(carried):.2f}' if carried else '-'} |",
                flush=True,
            )
        soaked = soak(base, args.kills, args.seed)
        print(f"\n## Soak: {args.kills} SIGKILLs of the session, restarted each time (seed {args.seed})\n")
        print("| " + " | ".join(soaked) + " |")
        print("|" + "---|" * len(soaked))
        print("| " + " | ".join(str(v) for v in soaked.values()) + " |", flush=True)
        session_rss = bench_memory(base, args.queries)
        print(f"\n## Memory of {args.queries} simple queries (resident, process groups)\n")
        print("| how | GiB | ratio |")
        print("|---|---|---|")
        gib = 1024**3
        print(f"| one session hosting {args.queries} queries | {session_rss / gib:.2f} | x1.0 |")
        print(
            f"| one application-mode job x {args.queries} | {app_rss * args.queries / gib:.2f} "
            f"| x{app_rss * args.queries / session_rss:.1f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
