"""The job on real local Spark: exact rows, exactly-once reruns, metadata columns,
dead letters without stopping the job, datagen, print sink and code snippets."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from demo.transactions import MALFORMED_LINES, transactions, write_batch
from jobs import batchtime, jvm, runtime
from jobs.control import JobControl
from runner.core.bucket import LocalBucket
from runner.core.manifest import Manifest
from runner.core.protocol.jobspec import JobSpec
from tests.conftest import HIGH_VALUE_MANIFEST, METADATA_DDL, ProjectDir, plan_nodes
from tests.jobhelpers import output_rows, run_once, run_published

pytestmark = pytest.mark.spark

START = datetime(2026, 1, 1, tzinfo=UTC)


def test_exact_rows_then_only_new_rows_on_rerun(spark, demo_project: ProjectDir, tmp_path: Path):
    events = demo_project.root / "data" / "in"
    first = transactions(30, start=START, seed=7)
    write_batch(events, "b1", first)
    prepared, _ = run_once(spark, demo_project, "high-value", tmp_path / "state")
    out = demo_project.root / "data" / "out"
    rows = output_rows(spark, out)
    expected = sorted(t.transaction_id for t in first if t.amount > 500)
    assert expected, "the fixture must contain high-value rows"
    assert sorted(r.transaction_id for r in rows) == expected
    meta = prepared.manifest.meta
    for row in rows:
        assert row["__query_name"] == "high-value"
        assert row["__query_description"] == "Card transactions above 500"
        assert row["__query_id"] == meta.query_id
        assert row["__query_version"] == 1
        assert row["__create_timestamp"] is not None and row["__query_create_timestamp"] is not None
    amounts = {t.transaction_id: t.amount for t in first}
    assert all(r.amount == amounts[r.transaction_id] for r in rows)

    second = transactions(30, start=START, seed=8, first_id=30)
    write_batch(events, "b2", second)
    again, _ = run_once(spark, demo_project, "high-value", tmp_path / "state")
    rows = output_rows(spark, out)
    expected += sorted(t.transaction_id for t in second if t.amount > 500)
    ids = [r.transaction_id for r in rows]
    assert sorted(ids) == sorted(expected)
    assert len(ids) == len(set(ids)), "a rerun on the same checkpoint must not duplicate rows"


def test_malformed_records_go_to_dead_letters_and_the_job_keeps_running(
    spark, demo_project: ProjectDir, tmp_path: Path
):
    events = demo_project.root / "data" / "in"
    path = demo_project.root / "manifests" / "high-value.yaml"
    path.write_text(path.read_text() + "trigger-interval: 500 milliseconds\n")
    prepared, queries = run_once(spark, demo_project, "high-value", tmp_path / "state", once=False)
    try:
        good = transactions(20, start=START, seed=3)
        write_batch(events, "mixed", good, MALFORMED_LINES)
        dead_dir = prepared.dead_letter / "demo-card-transactions"
        out = demo_project.root / "data" / "out"
        expected = sorted(t.transaction_id for t in good if t.amount > 500)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if len(output_rows(spark, out)) == len(expected) and len(output_rows(spark, dead_dir)) == 3:
                break
            time.sleep(0.5)
        assert sorted(r.transaction_id for r in output_rows(spark, out)) == expected
        dead = output_rows(spark, dead_dir)
        assert sorted(r.reason for r in dead) == [
            "field 'account_id' is missing (declared NOT NULL)",
            "field 'amount': twelve is not a valid DOUBLE",
            "malformed JSON: not a JSON object",
        ]
        assert {r.raw for r in dead} >= {"this is not json", MALFORMED_LINES[0]}
        assert all(r.error_time is not None and r.query_name == "high-value" for r in dead)
        assert all(q.isActive for q in queries), "malformed input must not stop the job"
        more = transactions(10, start=START, seed=4, first_id=100)
        write_batch(events, "after", more)
        expected += sorted(t.transaction_id for t in more if t.amount > 500)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(output_rows(spark, out)) < len(expected):
            time.sleep(0.5)
        assert sorted(r.transaction_id for r in output_rows(spark, out)) == sorted(expected)
    finally:
        runtime.stop_all(queries)


NOTES_DDL = (
    """
CREATE TABLE `demo`.`notes` (id STRING, note STRING, n INT)
WITH ('connector' = 'filesystem', 'path' = 'data/notes', 'format' = 'json');

CREATE TABLE `demo`.`note-ids` (id STRING"""
    + METADATA_DDL
    + """
) WITH ('connector' = 'filesystem', 'path' = 'data/note-ids', 'format' = 'json');
"""
)


def test_a_record_malformed_in_a_column_the_query_does_not_read_is_dead_lettered(
    spark, project: ProjectDir, tmp_path: Path
):
    """A query that reads some of a table's columns, the others declared nullable: a record is still checked
    against every column (Spark would read only ``id``). A wrong type in a column the query does not read
    sets the record aside, as does a record that is not JSON; the job does not fail writing them."""
    project.ddl("tables", NOTES_DDL)
    project.manifest(
        "note-ids", 'name: note-ids\ntarget-table: "`demo`.`note-ids`"\nsql: SELECT id FROM `demo`.`notes`\n'
    )
    folder = project.root / "data" / "notes"
    folder.mkdir(parents=True)
    (folder / "part.json").write_text(
        '{"id": "a", "note": "fine", "n": 1}\n{"id": "b", "n": "not a number"}\nnot json at all\n'
    )
    prepared, _ = run_once(spark, project, "note-ids", tmp_path / "state")
    assert sorted(r.id for r in output_rows(spark, project.root / "data" / "note-ids")) == ["a"]
    dead = output_rows(spark, prepared.dead_letter / "demo-notes")
    assert sorted((r.raw, r.reason) for r in dead) == [
        ("not json at all", "malformed JSON: not a JSON object"),
        ('{"id": "b", "n": "not a number"}', "field 'n': not a number is not a valid INT"),
    ]


PER_MINUTE_DDL = """
CREATE TABLE per_minute (window_start TIMESTAMP, account_id STRING, n BIGINT, total DOUBLE,
  __create_timestamp TIMESTAMP, __query_name STRING, __query_description STRING, __query_id STRING,
  __query_version INT, __query_create_timestamp TIMESTAMP)
WITH ('connector' = 'filesystem', 'path' = 'data/agg', 'format' = 'parquet');
"""

PER_MINUTE_MANIFEST = """
name: per-minute
target-table: per_minute
sql: |
  SELECT window.start AS window_start, account_id, COUNT(*) AS n, SUM(amount) AS total
  FROM `demo`.`card-transactions`
  GROUP BY window(ts, '1 minute'), account_id
"""


def test_windowed_aggregation_with_watermark(spark, demo_project: ProjectDir, tmp_path: Path):
    demo_project.ddl("agg", PER_MINUTE_DDL)
    demo_project.manifest("per-minute", PER_MINUTE_MANIFEST)
    rows = transactions(40, start=START, seed=5, step_seconds=6)  # 4 minutes of event time
    write_batch(demo_project.root / "data" / "in", "b1", rows)
    run_once(spark, demo_project, "per-minute", tmp_path / "state")
    result = spark.read.parquet(str(demo_project.root / "data" / "agg")).collect()
    watermark = max(t.ts for t in rows).timestamp() - 5
    expected: dict = {}
    for t in rows:
        window = int(t.ts.timestamp()) // 60 * 60
        if window + 60 <= watermark:  # only windows the watermark has closed are emitted in append mode
            n, total = expected.get((window, t.account_id), (0, 0.0))
            expected[(window, t.account_id)] = (n + 1, total + t.amount)
    got = {(int(r.window_start.timestamp()), r.account_id): (r.n, r.total) for r in result}
    assert got.keys() == expected.keys()
    for key, (n, total) in expected.items():
        assert got[key][0] == n and got[key][1] == pytest.approx(total)


def test_the_status_says_there_is_no_watermark_until_the_query_has_one(spark, demo_project, tmp_path: Path):
    """Spark reports the start of the epoch as the watermark of a query that has none yet: a windowed query's
    first micro-batch (the watermark moves after it). The published status says none there, so no one is
    shown a watermark decades behind, and the watermark once the query has one."""
    demo_project.ddl("agg", PER_MINUTE_DDL)
    demo_project.manifest("per-minute", PER_MINUTE_MANIFEST)
    rows = transactions(40, start=START, seed=5, step_seconds=6)
    write_batch(demo_project.root / "data" / "in", "b1", rows)
    _, status, queries = run_published(spark, demo_project, "per-minute", tmp_path / "state")
    said = [progress.eventTime.get("watermark") for progress in queries[0].recentProgress]
    assert said[0] == "1970-01-01T00:00:00.000Z", "Spark's watermark before the query has one"
    shown = [(p["batch"], p.get("watermark")) for p in status["recent-progress"]]
    watermark = max(t.ts for t in rows) - timedelta(seconds=5)  # the table's WATERMARK delay
    assert shown == [(0, None), (1, watermark.isoformat(timespec="milliseconds").replace("+00:00", "Z"))]
    assert status["progress"]["watermark"] == shown[-1][1]


def test_datagen_source_respects_bounds_and_cardinality(spark, project: ProjectDir, tmp_path: Path):
    project.ddl(
        "gen",
        """
        CREATE TABLE gen (id BIGINT, account STRING, amount DOUBLE, flag BOOLEAN, at TIMESTAMP)
        WITH ('connector' = 'datagen', 'rows-per-second' = '200', 'number-of-rows' = '50',
              'fields.id.kind' = 'sequence', 'fields.id.start' = '1',
              'fields.account.cardinality' = '3', 'fields.amount.min' = '10', 'fields.amount.max' = '20');
        CREATE TABLE sink (id BIGINT, account STRING, amount DOUBLE, flag BOOLEAN, at TIMESTAMP,
          __create_timestamp TIMESTAMP, __query_name STRING, __query_description STRING, __query_id STRING,
          __query_version INT, __query_create_timestamp TIMESTAMP)
        WITH ('connector' = 'filesystem', 'path' = 'data/gen', 'format' = 'json');
    """,
    )
    project.manifest(
        "gen",
        "name: gen\ntarget-table: sink\ntrigger-interval: 1 second\n"
        "sql: SELECT id, account, amount, flag, at FROM gen\n",
    )
    _, queries = run_once(spark, project, "gen", tmp_path / "state", once=False)
    try:
        out = project.root / "data" / "gen"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(output_rows(spark, out)) < 50:
            time.sleep(0.5)
        rows = output_rows(spark, out)
    finally:
        runtime.stop_all(queries)
    assert sorted(r.id for r in rows) == list(range(1, 51))
    assert {r.account for r in rows} <= {"account-0", "account-1", "account-2"}
    assert all(10 <= r.amount <= 20 for r in rows)
    assert {r.flag for r in rows} == {True, False}


def test_code_snippet_and_print_sink(spark, demo_project: ProjectDir, tmp_path: Path, capfd):
    demo_project.ddl(
        "print",
        "CREATE TABLE console (transaction_id STRING, band STRING, __create_timestamp "
        "TIMESTAMP, __query_name STRING, __query_description STRING, __query_id STRING, "
        "__query_version INT, __query_create_timestamp TIMESTAMP) "
        "WITH ('connector' = 'print', 'print-identifier' = 'bands');",
    )
    demo_project.manifest(
        "bands",
        """
        name: bands
        target-table: console
        code: |
          tx = table("`demo`.`card-transactions`")
          execution_output = tx.select("transaction_id",
                                       F.when(F.col("amount") > 500, "high").otherwise("low").alias("band"))
    """,
    )
    rows = transactions(6, start=START, seed=9)
    write_batch(demo_project.root / "data" / "in", "b1", rows)
    run_once(spark, demo_project, "bands", tmp_path / "state")
    printed = [line for line in capfd.readouterr().out.splitlines() if line.startswith("bands> +I[")]
    assert len(printed) == 6
    for t in rows:
        band = "high" if t.amount > 500 else "low"
        assert any(line.startswith(f"bands> +I[{t.transaction_id}, {band}, ") for line in printed)


def test_file_and_noop_sinks_get_the_batchs_own_plan_and_the_print_sink_the_wrapped_batch(
    spark, demo_project: ProjectDir, tmp_path: Path, monkeypatch, capfd
):
    """What each sink's write is given, as a job runs: the file and noop sinks the micro-batch's own plan
    (no copy of its rows through foreachBatch's wrapper), the print sink the wrapped batch it plans again."""
    columns = "transaction_id STRING, account_id STRING, amount DOUBLE, ts TIMESTAMP(3)" + METADATA_DDL
    demo_project.ddl(
        "more",
        f"""
        CREATE TABLE `demo`.`discarded` ({columns}) WITH ('connector' = 'blackhole');
        CREATE TABLE `demo`.`shown` ({columns}) WITH ('connector' = 'print', 'print-identifier' = 'shown');
        """,
    )
    sql = "sql: SELECT transaction_id, account_id, amount, ts FROM `demo`.`card-transactions` WHERE amount > 500"
    demo_project.manifest("discard", f'name: discard\ntarget-table: "`demo`.`discarded`"\n{sql}\n')
    demo_project.manifest("show", f'name: show\ntarget-table: "`demo`.`shown`"\n{sql}\n')
    rows = transactions(30, start=START, seed=7)
    write_batch(demo_project.root / "data" / "in", "b1", rows)
    high = sorted(t.transaction_id for t in rows if t.amount > 500)
    assert high, "the fixture must contain high-value rows"

    given: list[tuple[bool, list[str]]] = []
    real = runtime.streamed

    def spy(session, batch, execution):
        frame = real(session, batch, execution)
        given.append((frame is not batch, plan_nodes(frame._jdf.queryExecution().executedPlan())))
        return frame

    monkeypatch.setattr(runtime, "streamed", spy)
    by_job = {}
    for name in ("high-value", "discard", "show"):
        before = len(given)
        run_once(spark, demo_project, name, tmp_path / "state")
        by_job[name] = given[before:]

    for name in ("high-value", "discard"):  # a file table, the noop sink
        assert len(by_job[name]) == 1, name
        direct, nodes = by_job[name][0]
        assert direct and "FileSourceScanExec" in nodes and "RDDScanExec" not in nodes, (name, nodes)
    assert by_job["show"] == []  # the print sink collects its batch: it keeps foreachBatch's
    assert sorted(r.transaction_id for r in output_rows(spark, demo_project.root / "data" / "out")) == high
    printed = [line for line in capfd.readouterr().out.splitlines() if line.startswith("shown> +I[")]
    assert sorted(line.split("[", 1)[1].split(",", 1)[0] for line in printed) == high


def test_only_spark_refusing_the_checkpoint_state_counts_as_a_refused_restore():
    from jobs.control import refused_restore

    spark_said = (
        "[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: [STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] "
        "Provided key schema does not match existing state key schema. SQLSTATE: XXKST\nJVM stacktrace: ..."
    )
    assert refused_restore(Exception(spark_said)) == (
        "[STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE] Provided key schema does not match existing state key schema."
    )
    sources = "assertion failed: There are [1] sources in the checkpoint offsets and now there are [2] sources"
    assert refused_restore(Exception(sources)) == sources
    assert refused_restore(Exception("[STREAM_FAILED] ... java.io.IOException: No space left on device")) is None


def test_the_status_shows_the_batch_after_an_idle_spell_and_no_idle_progress(spark, tmp_path: Path):
    """An idle query reports progress of its own (Spark does, every noDataProgressEventInterval): no rows,
    no batch run, the id of the batch to come. The status keeps only batches that ran, so the batch that
    ends an idle spell is there with its rows (it used to be lost behind the idle progress with its id)."""
    from runner.core.catalog import Catalog

    store = LocalBucket(tmp_path / "manifests")
    manifest = Manifest.model_validate({"name": "q", "target-table": "t", "sql": "SELECT 1"})
    spec = JobSpec(
        manifest=manifest, catalog=Catalog(), checkpoint="/c", dead_letter="/d", store={"manifests": store.describe()}
    )
    control = JobControl(spec)
    control.machine.started()  # its query runs
    session = spark.newSession()
    session.conf.set("spark.sql.streaming.noDataProgressEventInterval", "200ms")
    data = tmp_path / "in"
    data.mkdir()
    (data / "a.json").write_text('{"n": 1}\n{"n": 2}\n')
    query = (
        session.readStream.schema("n INT")
        .json(str(data))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )

    def published() -> list[tuple[int, int]]:
        path = tmp_path / "manifests" / "status" / "q.json"
        status = json.loads(path.read_text()) if path.exists() else {}
        return [(p["batch"], p["input-rows"]) for p in status.get("recent-progress") or []]

    def polled_until(done, what: str) -> None:  # as the job's watcher does, a look every 0.1 s
        deadline = time.monotonic() + 60
        while not done():
            assert time.monotonic() < deadline, f"timed out waiting for {what}; published {published()}"
            control.publish_progress([query])
            time.sleep(0.1)

    try:
        polled_until(lambda: published() == [(0, 2)], "the first batch")
        polled_until(lambda: query.lastProgress.batchId == 1, "idle progress")
        idle = query.lastProgress
        assert (idle.numInputRows, "addBatch" in idle.durationMs) == (0, False), "Spark's idle progress"
        polled_until(lambda: len(query.recentProgress) >= 4, "more idle progress")
        assert published() == [(0, 2)], "idle progress is no batch"
        (data / "b.json").write_text('{"n": 3}\n{"n": 4}\n{"n": 5}\n')
        polled_until(lambda: len(published()) == 2, "the batch after the idle spell")
        assert published() == [(0, 2), (1, 3)]
    finally:
        query.stop()


def _listing_jobs(spark, queries) -> list[str]:
    """Spark's distributed file-listing jobs run for ``queries`` (from the application's status store)."""
    from jobs.jvm import scala_list

    runs = {str(q.runId) for q in queries}
    return [
        str(job.description().get())
        for job in scala_list(spark.sparkContext._jsc.sc().statusStore().jobsList(None))
        if job.jobGroup().isDefined()
        and job.jobGroup().get() in runs
        and job.description().isDefined()
        and str(job.description().get()).startswith("Listing leaf files")
    ]


@pytest.mark.parametrize("threshold", [None, "32"], ids=["runner-default", "manifest-sets-spark-default"])
def test_a_first_batch_over_a_backlog_of_local_files_lists_them_on_the_driver(
    spark, demo_project: ProjectDir, tmp_path: Path, threshold: str | None
):
    """Above 32 paths Spark checks a batch's files with a distributed job; for local files the runner
    has the driver do it (jobs/localfs.py), unless the manifest sets the property itself."""
    events = demo_project.root / "data" / "in"
    written = []
    for n in range(40):
        batch = transactions(2, start=START, seed=n, first_id=2 * n)
        write_batch(events, f"f{n:02d}", batch)
        written += batch
    if threshold is not None:
        path = demo_project.root / "manifests" / "high-value.yaml"
        key = "spark.sql.sources.parallelPartitionDiscovery.threshold"
        path.write_text(path.read_text() + f"sparkProperties:\n  {key}: '{threshold}'\n")
    session = spark.newSession()
    if threshold is not None:  # as the application or the session applies a manifest's sparkProperties
        session.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", threshold)
    _, queries = run_once(session, demo_project, "high-value", tmp_path / "state")
    rows = output_rows(spark, demo_project.root / "data" / "out")
    assert sorted(r.transaction_id for r in rows) == sorted(t.transaction_id for t in written if t.amount > 500)
    listing = _listing_jobs(spark, queries)
    if threshold is None:
        assert listing == [], listing
    else:
        assert any("for 40 paths" in d for d in listing), listing


def compiles(spark) -> int:
    """Classes Spark's code generator has compiled in this JVM so far (its own metric)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def stamped_batches(spark, project: ProjectDir, state: Path, files: int) -> tuple[list[int], dict[int, set], Path]:
    """Run the high-value query with a 1-second trigger, one input file per micro-batch (each written
    once the previous batch committed); the code generator's count after each batch, and each batch's
    ``__create_timestamp`` values (epoch ms) from the output."""
    manifest = HIGH_VALUE_MANIFEST.replace("name: high-value", "name: stamped") + "trigger-interval: 1 second\n"
    project.manifest("stamped", manifest)
    events = project.root / "data" / "in"

    def write_file(n: int) -> None:  # event time moves on an hour a file: no row is late
        write_batch(events, f"f{n}", transactions(40, start=START + timedelta(hours=n), seed=11 + n, first_id=40 * n))

    write_file(0)
    prepared, queries = run_once(spark, project, "stamped", state, once=False)
    counts = []
    try:
        for n in range(files):
            deadline = time.monotonic() + 60
            while not (prepared.checkpoint / "commits" / str(n)).exists():
                assert time.monotonic() < deadline and queries[0].isActive, f"batch {n} did not commit"
                time.sleep(0.1)
            counts.append(compiles(spark))
            if n + 1 < files:
                write_file(n + 1)
    finally:
        runtime.stop_all(queries)
    rows = (
        spark.read.schema("transaction_id STRING, __create_timestamp TIMESTAMP")
        .json(str(project.root / "data" / "out"))
        .selectExpr("transaction_id", "unix_millis(__create_timestamp) AS at")
        .collect()
    )
    batch_of = {f"tx-{i:06d}": i // 40 for i in range(40 * files)}  # transactions() numbers them so
    stamps: dict[int, set] = {n: set() for n in range(files)}
    for row in rows:
        stamps[batch_of[row.transaction_id]].add(row.at)
    return counts, stamps, prepared.checkpoint


def test_each_micro_batch_stamps_its_own_time_and_its_code_is_compiled_once(spark, demo_project, tmp_path: Path):
    counts, stamps, checkpoint = stamped_batches(spark, demo_project, tmp_path / "state", files=4)
    for n, at in stamps.items():  # every row of a batch: that batch's timestamp, as Spark's current_timestamp()
        offsets = (checkpoint / "offsets" / str(n)).read_text().splitlines()
        assert at == {json.loads(offsets[1])["batchTimestampMs"]}, n
    assert len({next(iter(at)) for at in stamps.values()}) == 4
    # the batches after the first two found their code compiled already
    assert counts[3] == counts[1], counts


def test_without_the_rule_each_micro_batch_compiles_its_code_again(spark, demo_project, tmp_path: Path, monkeypatch):
    """The check above can fail: the same job without the rule compiles code in every batch."""
    monkeypatch.setattr(batchtime, "install", lambda _spark, _name, _version: False)
    counts, stamps, _ = stamped_batches(spark.newSession(), demo_project, tmp_path / "state", files=4)
    assert counts[2] > counts[1] and counts[3] > counts[2], counts
    assert all(len(at) == 1 for at in stamps.values())


def test_a_rule_that_cannot_compile_is_said_once_and_changes_nothing(spark, monkeypatch, caplog, tmp_path: Path):
    monkeypatch.setattr(jvm, "_COMPILED", {})
    monkeypatch.setattr(batchtime, "_WARNED", set())
    broken = "public class SqlRunnerStableBatchTimestamp extends NoSuchRule {}"
    (tmp_path / f"{batchtime.RULE_CLASS}.java").write_text(broken)
    monkeypatch.setattr(jvm, "JAVA", tmp_path)
    session = spark.newSession()
    before = session._jsparkSession.experimental().extraOptimizations().size()
    with caplog.at_level(logging.WARNING, logger="jobs.batchtime"):
        assert batchtime.install(session, "q", 1) is False
        assert batchtime.install(session, "q", 1) is False
    said = [r.getMessage() for r in caplog.records if r.name == "jobs.batchtime"]
    assert len(said) == 1 and said[0].startswith("micro-batch code is compiled anew each batch"), said
    assert "failed to compile" in said[0] and "NoSuchRule" in said[0], said  # the compiler's reason, not Py4J's
    assert caplog.records[0].label == "q v1", "the line says which job"
    assert session._jsparkSession.experimental().extraOptimizations().size() == before


def test_a_jobs_json_reader_is_given_no_filter_and_runs_no_filter_checks(spark, demo_project, tmp_path: Path):
    write_batch(demo_project.root / "data" / "in", "b1", transactions(30, start=START, seed=7))
    session = spark.newSession()
    _, queries = run_once(session, demo_project, "high-value", tmp_path / "state")
    scan = next(
        line
        for line in queries[0]._jsq.streamingQuery().lastExecution().executedPlan().toString().splitlines()
        if "FileScan json" in line
    )
    # the query's `amount > 500` stays above the taps: nothing reaches the reader to check
    assert "DataFilters: []" in scan and "PushedFilters: []" in scan, scan
    assert session.conf.get("spark.sql.json.filterPushdown.enabled") == "false"
    assert session.conf.get("spark.sql.csv.filterPushdown.enabled") == "false"


def test_a_manifest_that_turns_reader_pushdown_on_keeps_it(spark, demo_project, tmp_path: Path):
    path = demo_project.root / "manifests" / "high-value.yaml"
    path.write_text(path.read_text() + "sparkProperties:\n  spark.sql.json.filterPushdown.enabled: 'true'\n")
    write_batch(demo_project.root / "data" / "in", "b1", transactions(30, start=START, seed=7))
    session = spark.newSession()
    session.conf.set("spark.sql.json.filterPushdown.enabled", "true")  # as the job's launch sets it
    run_once(session, demo_project, "high-value", tmp_path / "state")
    assert session.conf.get("spark.sql.json.filterPushdown.enabled") == "true"
    assert session.conf.get("spark.sql.csv.filterPushdown.enabled") == "false"
