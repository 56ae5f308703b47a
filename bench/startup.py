"""Start-up: what a user waits for on every deploy, every ``run --once`` and every session start.

    .venv/bin/python bench/startup.py [--events 2000000] [--rounds 3] [--warm-up 1000000]
                                      [--deploys 2,10] [--session-rounds 2] [--yarn-rounds 3]
                                      [--parts once,launch,deploy,session,yarn,judging]

1. ``once``: the whole process of ``sql-runner run MANIFEST --once`` over ``--events`` seeded JSON card
   transactions into parquet, against the same query as a hand-written ``spark-submit`` job reading the
   same files (bench/overhead.py's hand-written job, same checks and metadata, processing what is there
   and stopping), wall time from launch to exit, a fresh state and output each time. Filter and 1-minute
   window; the order rotates each of ``--rounds`` rounds. Target: the hand-written time over ours,
   0.90 or more. Every driver the runner starts here maps the drivers' class-data archive
   (``runner/core/classdata.py``); a third side, the hand-written job given that archive as well, shows
   what the runner costs beyond what the archive saves.
2. ``launch``: launch to the first ``--warm-up`` events processed, ``sql-runner run`` (running on) against
   the hand-written job (bench/overhead.py's measure, filter into noop, one side after the other, order
   alternating). Target: ours over the hand-written, x1.05 or less.
3. ``deploy``: ``sql-runner deploy`` of 2 and of 10 new manifests at once (``--deploys``), application
   mode on this machine, to every one of their queries running (its first micro-batch completed, from
   its status); beside it the same queries as hand-written jobs launched at once, to each one's first
   micro-batch. No target of its own: the figure users meet when a team pushes several manifests.
4. ``session``: a fresh ``session start`` (which warms the session up before it reports itself up),
   then one manifest landing after another: the first query's time to effect (landing to its first
   completed micro-batch, from its status) against the later ones'. Target: the first under 2 s.
5. ``yarn``: ``sql-runner deploy`` of one new manifest to its first completed micro-batch (from its status), with
   ``--target yarn`` on a real ResourceManager and NodeManager on 127.0.0.1 (demo/yarn_cluster.py, started once)
   against local mode, one after the other each of ``--yarn-rounds`` rounds. No target: what moving a query
   from one machine to YARN costs in time to its first result (a container to be granted and launched, Spark
   started in it).
6. ``judging``: where ``deploy`` to YARN has a new manifest judged (Spark's checks and the comparison with the
   deployed query): on the team's session, running on the same YARN, against a Spark started by the deploy on
   the machine it runs on (EMR's primary node; what happens when no session runs). Two teams on the cluster, one
   with its session started; each round a new application-mode manifest for each, the order alternating: the
   ``deploy`` command's wall time (judged, decided, submitted and accepted by YARN), and its time to the job's
   first committed batch. Judging inside the job's own driver, as local mode does, would wait for its YARN
   container before judging: the ``yarn`` part's figures against these show what that adds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import overhead, results, session, steady  # noqa: E402
from demo.yarn_cluster import YarnCluster  # noqa: E402
from runner.core import classdata  # noqa: E402

SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")
ENV = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
TIMEOUT = 900.0
ONCE_SCRIPT = (
    overhead.HANDWRITTEN.removesuffix(overhead.PRINT_PROGRESS).replace(
        ".trigger(processingTime=trigger)", ".trigger(availableNow=True)"
    )
    + "query.awaitTermination()\n"
)
assert ".trigger(availableNow=True)" in ONCE_SCRIPT, "bench/overhead.py's hand-written job changed: adapt this"


def events(base: Path, count: int) -> steady.Tranche:
    """``count`` seeded transactions (bench/overhead.py's generator), once for every part."""
    return overhead.generate(base / "events", [count], seed=7)[0]


def run_once_sides(base: Path, query: str, tranche: steady.Tranche) -> tuple[list[str], Path, list[str], Path]:
    """``sql-runner run --once`` and the hand-written job, each over its own link of the events into parquet:
    (our command, our folder, the hand-written command, its folder)."""
    combo = base / f"once-{query}"
    ours = overhead.ours(combo, query, "parquet")
    ours.inputs["tx"].mkdir(parents=True)
    steady.link({ours.inputs["tx"]: tranche.files["tx"]})
    hand = combo / "by-hand"
    (hand / "in" / "tx").mkdir(parents=True)
    (hand / "in" / "refunds").mkdir()  # the hand-written job declares both tables, as the project does
    steady.link({hand / "in" / "tx": tranche.files["tx"]})
    (hand / "handwritten.py").write_text(ONCE_SCRIPT)
    by_hand = [
        *overhead.hand_written_submit(str(hand / "checkpoint")),
        "--conf",
        "spark.sql.json.filterPushdown.enabled=false",
        str(hand / "handwritten.py"),
        str(hand / "in"),
        str(hand / "out"),
        str(hand / "checkpoint"),
        "parquet",
        overhead.QUERIES[query][0],
        overhead.TRIGGER,
        "checked",
    ]
    return [SQL_RUNNER, "run", "manifests/q.yaml", "--once"], ours.cwd, by_hand, hand


def timed(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> float:
    """Wall seconds of ``command`` from launch to exit (it must succeed)."""
    began = time.monotonic()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env or ENV, check=False)
    took = time.monotonic() - began
    if done.returncode != 0:
        raise steady.BenchError(f"{' '.join(command[:3])} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return took


def bench_once(base: Path, tranche: steady.Tranche, rounds: int) -> list[results.Record]:
    """``run --once`` against the hand-written job, and against the hand-written job given the runner's class-data
    archive too (``SPARK_SUBMIT_OPTS``): what the runner costs beyond what the archive saves."""
    found = []
    shared = {**ENV, "SPARK_SUBMIT_OPTS": classdata.options()}
    for query in ("filter", "window"):
        ours_cmd, ours_dir, hand_cmd, hand_dir = run_once_sides(base, query, tranche)
        pairs, shared_pairs = [], []
        for number in range(rounds):
            sides = [("ours", ours_cmd, ours_dir, ENV), ("hand", hand_cmd, hand_dir, ENV)]
            sides.append(("hand, archive", hand_cmd, hand_dir, shared))
            sides = sides[number % 3 :] + sides[: number % 3]  # each side first, and last, in turn
            took = {}
            for side, cmd, cwd, env in sides:
                for folder in (ours_dir / ".sql-runner", ours_dir / "out", hand_dir / "checkpoint", hand_dir / "out"):
                    shutil.rmtree(folder, ignore_errors=True)
                took[side] = timed(cmd, cwd, env)
            print(f"run --once {query}, round {number + 1}: {took}", flush=True)
            pairs.append((took["ours"], took["hand"]))
            shared_pairs.append((took["ours"], took["hand, archive"]))
        events = f"{tranche.rows['tx']:,} events into parquet"
        found.append(speed(f"run --once, {query}, {events}, vs by hand; by hand / ours (target >= 0.90)", pairs))
        found.append(
            speed(f"run --once, {query}, {events}, vs by hand with the runner's class-data archive", shared_pairs)
        )
    return found


def speed(name: str, pairs: list[tuple[float, float]]) -> results.Record:
    """Seconds ours and by hand per round, the ratio being the hand-written time over ours (higher is better:
    1 is as fast as by hand), as the start-up targets are stated."""
    ratios = [hand / ours for ours, hand in pairs]
    return results.Record(
        name,
        statistics.median(o for o, _ in pairs),
        statistics.median(h for _, h in pairs),
        "s",
        statistics.median(ratios),
        min(ratios),
        max(ratios),
        pairs,
        higher_is_better=True,
    )


def bench_launch(base: Path, warm_up: steady.Tranche, rounds: int) -> results.Record:
    pairs = []
    for number in range(rounds):
        combo = base / f"launch-{number}"
        ours = overhead.ours(combo, "filter", "noop")
        hand = overhead.reference(combo, "filter", "noop", "checked")
        sides = [ours, hand] if number % 2 == 0 else [hand, ours]
        try:
            took = steady.launch(sides, warm_up, TIMEOUT)
        finally:
            steady.stop_all(sides)
        print(f"launch to the first {warm_up.rows['tx']:,} events, round {number + 1}: {took}", flush=True)
        pairs.append((took[ours.name], took[hand.name]))
    return results.record(
        f"launch to the first {warm_up.rows['tx']:,} events processed vs by hand, filter (target <= x1.05)",
        pairs,
        "s",
        higher_is_better=False,
    )


def bench_deploy(base: Path, count: int) -> results.Record:
    """``deploy`` of ``count`` new manifests to all running, and ``count`` hand-written jobs launched at once."""
    project = session.Project(base / f"deploy-{count}", count, "application")
    project.write_events()
    for n in range(count):
        (project.root / "manifests" / f"q-{n:02d}.yaml").write_text(project.manifest_text(f"q-{n:02d}", n, n % 5))
    read = session.local_status(project)
    names = [f"q-{n:02d}" for n in range(count)]
    began = time.time()
    project.cli("deploy")
    completed = [session.wait(lambda n=n: session.first_completed(read(n), None), f"{n} running") for n in names]
    ours = max(float(c) for c in completed) - began  # type: ignore[arg-type]
    for name in names:
        project.cli("stop", name, "--no-savepoint", check=False)
    hand = hand_jobs(base / f"deploy-{count}-by-hand", project, count)
    print(f"deploy of {count} new manifests to all running: {ours:.1f} s; by hand at once: {hand:.1f} s", flush=True)
    return results.record(
        f"deploy of {count} new manifests at once to all their queries running vs {count} hand-written jobs",
        [(ours, hand)],
        "s",
        higher_is_better=False,
    )


HAND_FIRST_BATCH = """
import json, sys
from pyspark.sql import SparkSession
events, out, checkpoint, threshold = sys.argv[1:5]
spark = SparkSession.builder.getOrCreate()
query = (spark.readStream.schema("id STRING, amount DOUBLE").json(events).where(f"amount >= {threshold}")
         .writeStream.format("json").option("path", out).option("checkpointLocation", checkpoint)
         .trigger(processingTime="1 second").start())
while query.lastProgress is None or "addBatch" not in query.lastProgress["durationMs"]:
    query.awaitTermination(0.1)
print("PROGRESS " + json.dumps({"batch": query.lastProgress["batchId"]}), flush=True)
query.stop()
"""


def hand_jobs(folder: Path, project: session.Project, count: int) -> float:
    """``count`` hand-written jobs of the same queries launched at once: seconds to the last one's first batch."""
    folder.mkdir(parents=True)
    script = folder / "job.py"
    script.write_text(HAND_FIRST_BATCH)
    began = time.monotonic()
    processes = [
        subprocess.Popen(
            [
                *overhead.hand_written_submit(str(folder / f"checkpoint-{n}")),
                str(script),
                str(project.root / "data" / "events"),
                str(folder / f"out-{n}"),
                str(folder / f"checkpoint-{n}"),
                str(n % 5),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=ENV,
        )
        for n in range(count)
    ]
    for process in processes:
        out, _ = process.communicate(timeout=TIMEOUT)
        if "PROGRESS" not in out:
            raise steady.BenchError(f"a hand-written job ended without a batch:\n{out}")
    return time.monotonic() - began


def bench_session(base: Path, rounds: int) -> results.Record:
    firsts, laters = [], []
    for number in range(rounds):
        project = session.Project(base / f"session-{number}", 3, "session")
        project.write_events()
        read = session.local_status(project)
        project.cli("session", "start", "--poll", "0.2")
        try:
            for n in range(3):
                name = f"q-{n}"
                landed = time.time()
                (project.root / "manifests" / f"{name}.yaml").write_text(project.manifest_text(name, n, 1))
                completed = session.wait(lambda name=name, read=read: session.first_completed(read(name), None), name)
                took = float(completed) - landed  # type: ignore[arg-type]
                (firsts if n == 0 else laters).append(took)
                print(f"session {number + 1}: {name} took effect in {took:.2f} s", flush=True)
        finally:
            project.cli("session", "stop", check=False)
    pairs = [(first, statistics.median(laters)) for first in firsts]
    return results.record(
        "session: first query's time to effect after session start vs the later ones' (target: first < 2 s)",
        pairs,
        "s",
        higher_is_better=False,
    )


def bench_judging(base: Path, rounds: int, cluster: YarnCluster) -> list[results.Record]:
    """``deploy`` to YARN of a new manifest judged by the team's session against judged on a Spark the deploy starts:
    the command's wall time and the time to the job's first committed batch, per round, the order alternating."""
    projects = {
        side: session.Project(base / f"judging-{side}", rounds, "application", cluster.runner_env(f"bench-{side}"))
        for side in ("session", "primary")
    }
    for project in projects.values():
        project.write_events()
    projects["session"].cli("session", "start")
    commands: list[tuple[float, float]] = []
    batches: list[tuple[float, float]] = []
    try:
        for number in range(rounds):
            took: dict[str, tuple[float, float]] = {}
            for side in ("session", "primary") if number % 2 == 0 else ("primary", "session"):
                project, name = projects[side], f"q-{number:02d}"
                (project.root / "manifests" / f"{name}.yaml").write_text(project.manifest_text(name, number, 1))
                read = session.local_status(project)
                began = time.time()
                deployed = project.cli("deploy", f"manifests/{name}.yaml")
                command = time.time() - began
                judged_here = "judged by the team's session" not in deployed.stderr
                if judged_here != (side == "primary"):
                    raise steady.BenchError(f"{side}: not judged where expected:\n{deployed.stderr}")
                completed = session.wait(lambda read=read, name=name: session.first_completed(read(name), None), side)
                took[side] = (command, float(completed) - began)  # type: ignore[arg-type]
                project.cli("stop", name, "--no-savepoint", check=False)
            print(
                f"round {number + 1}: deploy judged by the session {took['session'][0]:.1f} s (first batch "
                f"{took['session'][1]:.1f} s), on a Spark of its own {took['primary'][0]:.1f} s "
                f"({took['primary'][1]:.1f} s)",
                flush=True,
            )
            commands.append((took["session"][0], took["primary"][0]))
            batches.append((took["session"][1], took["primary"][1]))
    finally:
        projects["session"].cli("session", "stop", check=False)
    return [
        results.record(
            "deploy to YARN, the command (judged, decided, submitted): judged by the team's session vs on a Spark "
            "the deploy starts",
            commands,
            "s",
            higher_is_better=False,
        ),
        results.record(
            "deploy to YARN to the first committed batch: judged by the team's session vs on a Spark the deploy starts",
            batches,
            "s",
            higher_is_better=False,
        ),
    ]


def bench_yarn(base: Path, rounds: int, cluster: YarnCluster) -> results.Record:
    """``deploy`` of one new manifest to its first committed micro-batch, on YARN (cluster mode, the driver in the
    ApplicationMaster's container of demo/yarn_cluster.py's real ResourceManager and NodeManager) against local
    mode, one after the other each round, the order alternating."""
    pairs: list[tuple[float, float]] = []
    on_yarn = cluster.runner_env("bench")
    for number in range(rounds):
        took: dict[str, float] = {}
        for side in ("yarn", "local") if number % 2 == 0 else ("local", "yarn"):
            project = session.Project(
                base / f"yarn-{number}-{side}", 1, "application", on_yarn if side == "yarn" else None
            )
            project.write_events()
            (project.root / "manifests" / "q-00.yaml").write_text(project.manifest_text("q-00", 0, 1))
            read = session.local_status(project)
            began = time.time()
            project.cli("deploy")
            completed = session.wait(lambda read=read: session.first_completed(read("q-00"), None), side)
            took[side] = float(completed) - began  # type: ignore[arg-type]
            project.cli("stop", "q-00", "--no-savepoint", check=False)
        print(f"round {number + 1}: first batch on YARN {took['yarn']:.1f} s, local {took['local']:.1f} s")
        pairs.append((took["yarn"], took["local"]))
    return results.record(
        "deploy of one new manifest to its first committed batch: on YARN (cluster mode) vs local mode",
        pairs,
        "s",
        higher_is_better=False,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--warm-up", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--deploys", default="2,10")
    parser.add_argument("--session-rounds", type=int, default=2)
    parser.add_argument("--yarn-rounds", type=int, default=3)
    parser.add_argument("--parts", default="once,launch,deploy,session,yarn,judging")
    args = parser.parse_args()
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    unknown = parts - {"once", "launch", "deploy", "session", "yarn", "judging"}
    if unknown:
        parser.error(
            f"--parts takes once, launch, deploy, session, yarn and judging (got {', '.join(sorted(unknown))})"
        )
    records: list[results.Record] = []
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        base = Path(tmp)
        if "once" in parts:
            records += bench_once(base, events(base / "once-data", args.events), args.rounds)
        if "launch" in parts:
            records.append(bench_launch(base, events(base / "launch-data", args.warm_up), args.rounds))
        if "deploy" in parts:
            records += [bench_deploy(base, int(n)) for n in args.deploys.split(",")]
        if "session" in parts:
            records.append(bench_session(base, args.session_rounds))
        if parts & {"yarn", "judging"}:
            with YarnCluster() as cluster:  # started once for both
                if "yarn" in parts:
                    records.append(bench_yarn(base, args.yarn_rounds, cluster))
                if "judging" in parts:
                    records += bench_judging(base, args.yarn_rounds, cluster)
    print(results.table(records))
    written = results.write("startup", records)
    print(json.dumps({"written": str(written)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
