"""The figures the console and ``/metrics`` show are true and read at a glance (no Spark, no browser;
tests/test_console.py shows them in Chromium).

Over a state folder as a job leaves it: a query whose table declares a watermark, before Spark has one
(Spark says 1970-01-01), shows "no watermark yet" and has no watermark series in ``/metrics`` (parsed
with Prometheus' own parser); a batch of 2,812 ms is 2.812 s there, not 2.8120000000000003; durations are
in units a person reads (``4 min 12 s``, ``329 d``); counts take the right noun; a manifest shows as its
author would write it (a multi-line query or snippet as a literal block). Bad inputs tried: a watermark of
the epoch written by an earlier job, a time that is not ISO 8601, a string that cannot be a literal block.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from runner.authoring.ddl import parse_ddl
from runner.authoring.project import load_project
from runner.console import figures, metrics
from runner.console.overview import Overview, Stall
from runner.console.query import manifest_yaml
from runner.core import layout
from runner.core.bucket import LocalBucket
from runner.core.manifest import Manifest
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.status import BatchProgress, JobState, JobStatus, write_status
from runner.core.starts import SourceTable
from runner.state.store import open_store
from runner.targets.local import LocalTarget
from runner.targets.modes import Targets

EXAMPLES = Path(__file__).resolve().parents[1]  # the repository's own example project


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "–"),
        (0.0, "0 ms"),
        (0.85, "850 ms"),
        (2.812, "2.8 s"),
        (4.0, "4 s"),
        (42.4, "42 s"),
        (252, "4 min 12 s"),
        (3600 * 3 + 300, "3 h 05 min"),
        (86400 * 2 + 3600 * 4, "2 d 4 h"),
        (86400 * 329 + 5000, "329 d"),
        (-3, "0 ms"),  # a clock a little behind: never a negative duration
    ],
)
def test_durations_are_written_in_units_a_person_reads(seconds, shown):
    assert figures.duration(seconds) == shown


def test_counts_numbers_sizes_and_moments():
    assert [figures.count(n, "row") for n in (0, 1, 2, 12345)] == ["0 rows", "1 row", "2 rows", "12,345 rows"]
    assert figures.count(1, "entry", "entries") == "1 entry" and figures.count(3, "entry", "entries") == "3 entries"
    assert [figures.number(v) for v in (2.8120000000000003, 12.0, 1204.54, None)] == ["2.8", "12", "1,204.5", "–"]
    assert [figures.size(n) for n in (512, 3500, 12 * 1024 * 1024)] == ["512 B", "3.4 KiB", "12 MiB"]
    assert figures.moment("2026-11-26T22:49:42.123456+00:00") == "2026-11-26 22:49:42 UTC"  # no microseconds
    assert figures.moment("2026-11-26T23:49:42.5+01:00") == "2026-11-26 22:49:42 UTC"
    assert figures.iso("2026-11-26T22:49:42.123Z") == "2026-11-26T22:49:42+00:00"
    assert figures.moment("yesterday") == "yesterday" and figures.iso("yesterday") == ""  # shown as given


def test_a_manifest_shows_as_its_author_would_write_it():
    project = load_project(EXAMPLES)
    for path in project.manifest_paths():
        manifest = project.load_manifest(path)
        shown = manifest_yaml(manifest)
        assert "\\n" not in shown and "''" not in shown, shown  # no escaped line breaks, no doubled quotes
        data = yaml.safe_load(shown)
        assert data == {k: v for k, v in manifest.to_dict().items() if k != "meta"}  # the same manifest
        text = manifest.sql or manifest.code or ""
        if "\n" in text:  # a literal block: each of its lines on a line of its own, indented
            assert any(line.endswith((": |", ": |-")) for line in shown.splitlines()), shown
            lines = shown.splitlines()
            for line in text.strip().splitlines():
                assert f"  {line}".rstrip() in lines, (line, shown)
    trailing = manifest_yaml(
        Manifest.model_validate({"name": "q", "target-table": "`t`.`x`", "sql": "SELECT 1 \nFROM t"})
    )
    assert yaml.safe_load(trailing)["sql"] == "SELECT 1 \nFROM t"  # a line with a trailing space: quoted, still exact


(WATERMARKED,) = parse_ddl(
    """CREATE TABLE `demo`.`events` (id STRING, ts TIMESTAMP(3), WATERMARK FOR ts AS ts - INTERVAL '5' SECOND)
    WITH ('connector' = 'filesystem', 'path' = '/tmp/events', 'format' = 'json');"""
)


@pytest.fixture
def state(tmp_path: Path):
    store = open_store(tmp_path / "state")
    now = datetime.now(UTC)

    def deploy(name: str, watermark: str | None, *, batch_ms: int = 2812, event_time: bool = True) -> None:
        manifest = Manifest.model_validate(
            {
                "name": name,
                "target-table": "`demo`.`out`",
                "sql": "SELECT id, ts FROM `demo`.`events`",
                "meta": {"query-id": name, "query-version": 1, "query-create-timestamp": now.isoformat()},
            }
        )
        tables = (WATERMARKED,) if event_time else ()
        sources = (SourceTable(table="`demo`.`events`", connector="filesystem"),) if event_time else ()
        record = DeploymentRecord(
            manifest=manifest, tables=tables, sources=sources, run_id="run-1", target="local", deployed_at=now
        )
        store.manifests.write(layout.deployed(name), record.encode())
        began = now - timedelta(seconds=30)
        progress = BatchProgress(
            batch=4,
            timestamp=began.isoformat(),
            input_rows=1,
            input_rows_per_second=2.8120000000000003,
            batch_duration_ms=batch_ms,
            watermark=watermark,
        )
        status = JobStatus(
            name=name,
            version=1,
            run_id="run-1",
            state=JobState.STOPPED,
            started_at=began.isoformat(),
            updated_at=now.isoformat(),
            progress=progress,
        )
        write_status(store.manifests, status)

    late = (now - timedelta(seconds=30 + 252)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    deploy("before-its-watermark", "1970-01-01T00:00:00.000Z")  # what Spark says before it has one
    deploy("with-a-watermark", late)
    deploy("without-event-time", None, event_time=False)
    targets = Targets(LocalTarget(LocalBucket(tmp_path / "state" / "manifests"), tmp_path / "logs"))
    return Overview(store, targets, "local", Stall())


def test_no_watermark_yet_is_said_and_never_a_57_year_delay(state: Overview):
    rows = {row["name"]: row for row in state.rows()}
    before = rows["before-its-watermark"]
    assert before["watermark_delay_s"] is None and before["shown"]["watermark"] == "no watermark yet"
    assert rows["with-a-watermark"]["watermark_delay_s"] == pytest.approx(252, abs=1)
    assert rows["with-a-watermark"]["shown"]["watermark"] in ("4 min 11 s", "4 min 12 s", "4 min 13 s")
    assert rows["without-event-time"]["shown"]["watermark"] == "–"  # a query without event time has none
    assert {row["shown"]["rate"] for row in rows.values()} == {"2.8"}
    assert {row["shown"]["batch"] for row in rows.values()} == {"2.8 s"}
    assert before["shown"]["last_batch"].startswith("#4, ") and before["shown"]["last_batch"].endswith(" s ago")

    samples: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(metrics.exposition(state).decode()):
        for sample in family.samples:
            samples[(sample.name, sample.labels.get("query", ""))] = sample.value
    watermarks = {query for name, query in samples if name == "sql_runner_query_watermark_delay_seconds"}
    assert watermarks == {"with-a-watermark"}  # no series for a query without one: no alert fires on 57 years
    assert samples[("sql_runner_query_batch_duration_seconds", "before-its-watermark")] == 2.812
    text = metrics.exposition(state).decode()
    assert "2.8120000000000003" not in text and "e+09" not in text
