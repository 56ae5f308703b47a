"""What `sql-runner status` shows: a table that fits the terminal (the name and the state whole, the columns
left out named), every column with `-o wide`, and plain whole lines when piped. Over plain status rows, and
through the real command over a state folder written by hand (no Spark)."""

from __future__ import annotations

import io
import json
import re
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.console import Console

from runner.cli.status_layout import COLUMNS, show
from runner.core import layout
from runner.core.bucket import LocalBucket
from runner.core.manifest import Manifest
from runner.core.protocol.deployed import DeploymentRecord
from runner.core.protocol.status import BatchProgress, JobState, JobStatus, write_status
from tests.clihelpers import SQL_RUNNER, cli_env, in_process

AT = datetime(2026, 1, 1, 9, 0, 42, tzinfo=UTC)
WHY = (
    "StreamingQueryException: [STREAM_FAILED] Query [id = 1f0c] terminated with exception\n"
    "  caused by: java.io.FileNotFoundException: s3a://team-checkpoints/orders-enriched-with-customers/v3/offsets/17"
)
BOX = set("┏┳┓┃┡╇┩│└┴┘━─")
NEED = [column.key for column in sorted(COLUMNS, key=lambda column: column.keep)]


def row(name: str, state: str, **fields) -> dict:
    """A row as `runner.deploy.status.job_status` gives it (and `--json` prints it)."""
    return {
        "name": name,
        "version": 3,
        "target": "standalone",
        "state": state,
        "restarts": 2,
        "last progress": "2026-01-01T09:00:00.000Z",
        "input rows/s": 1234.5,
        "changes/s": "users 12.5, colors 0.0",
        "keys held": "users 120000, colors 12",
        "batch ms": 842,
        "watermark": "2026-01-01T08:59:00.000Z",
        "lookups": "jdbc.users 1000 rows, 12s old; jdbc.colors 12 rows, 3m05s old, reload failing",
        "latest savepoint": "savepoint-20260101T085500Z",
        "output": "exactly-once",
        "job": None,
        "detail": None,
        "why": None,
        **fields,
    }


ROWS = [
    row("orders-enriched-with-customers", "failed (restarts used up)", why=WHY),
    row("high-value", "running", **{"changes/s": None, "keys held": None, "lookups": None}),
    row("card-ids", "not running", **{"last progress": None, "input rows/s": None}),
]


def printed(rows: list[dict], *, width: int, terminal: bool, wide: bool = False) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=terminal, color_system=None)
    show(console, rows, wide=wide, at=AT)
    return console.file.getvalue()


def table(text: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The table's header and its rows by name, each cell stripped."""
    lines = text.splitlines()
    header = [cell.strip() for cell in lines[1].strip("┃").split("┃")]
    rows = [[cell.strip() for cell in line.strip("│").split("│")] for line in lines if line.startswith("│")]
    return header, {cells[0]: dict(zip(header, cells, strict=True)) for cells in rows}


def left_out(text: str) -> list[str]:
    """The columns the line under the table names as left out (the line wraps at the terminal's width)."""
    said = re.search(
        r"left out to fit \d+ columns: (.*?) \(sql-runner status -o wide shows them\)", " ".join(text.split())
    )
    assert said is not None, text
    return said.group(1).split(", ")


def test_piped_output_is_a_header_and_one_line_per_job_with_every_value_whole():
    text = printed(ROWS, width=80, terminal=False)
    lines = text.splitlines()
    assert len(lines) == 1 + len(ROWS)
    assert not BOX & set(text) and "\x1b" not in text
    keys = [column.key for column in COLUMNS] + ["why"]
    # columns are split by two spaces or more: no value holds two in a row, its line breaks become one space
    assert re.split(r" {2,}", lines[0]) == [key.upper() for key in keys]
    for line, shown in zip(lines[1:], ROWS, strict=True):
        expected = ["-" if shown[key] is None else " ".join(str(shown[key]).split()) for key in keys]
        assert re.split(r" {2,}", line) == expected
    assert max(len(line) for line in lines) > 300  # not squeezed to the 80 columns COLUMNS says
    assert "2026-01-01T09:00:00.000Z" in lines[1]  # a pipe keeps the recorded time


@pytest.mark.parametrize(("width", "shown_at_least"), [(80, 3), (120, 6)])
def test_at_a_terminal_the_name_and_state_are_whole_and_the_columns_left_out_are_named(width, shown_at_least):
    text = printed(ROWS, width=width, terminal=True)
    assert max(cell_len(line) for line in text.splitlines()) <= width
    header, rows = table(text)
    assert header[:1] == ["name"] and "state" in header
    assert header == [column.key for column in COLUMNS if column.key in header]  # shown in their usual order
    for shown in ROWS:
        assert rows[shown["name"]]["state"] == shown["state"]
    # the most needed columns are shown, the least needed left out, and every one left out is named
    assert set(header) == set(NEED[: len(header)]) and len(header) >= shown_at_least
    assert left_out(text) == [column.key for column in COLUMNS if column.key not in header]
    # why, whole, under the table at the terminal's width
    assert "why orders-enriched-with-customers" in text
    assert "".join(text.split("why orders-enriched-with-customers", 1)[1].split()) == "".join(WHY.split())


def test_at_120_columns_the_figures_that_say_whether_a_job_is_well_are_shown():
    header, rows = table(printed(ROWS, width=120, terminal=True))
    assert {"version", "input rows/s", "last progress", "restarts"} <= set(header)
    assert rows["high-value"]["last progress"] == "42s ago"  # at a terminal, how long ago
    assert rows["high-value"]["input rows/s"] == "1234.5"


def test_wide_shows_every_column_whole_however_narrow_the_terminal():
    text = printed(ROWS, width=80, terminal=True, wide=True)
    header, rows = table(text)
    assert header == [column.key for column in COLUMNS]
    assert "left out" not in text
    lookups = ROWS[0]["lookups"]
    assert rows["orders-enriched-with-customers"]["lookups"] == lookups
    assert rows["card-ids"]["latest savepoint"] == "savepoint-20260101T085500Z"


def test_a_name_wider_than_the_terminal_is_shown_whole_rather_than_cut():
    name = "orders-enriched-with-customers-and-their-addresses-by-region"
    text = printed([row(name, "running")], width=40, terminal=True)
    header, rows = table(text)
    assert header == ["name", "state"]
    assert rows[name]["state"] == "running"


# Through the real command, over a state folder as deploys and jobs leave it.


@pytest.fixture
def state(tmp_path: Path) -> Path:
    root = tmp_path / "state"
    manifests = LocalBucket(root / "manifests")
    now = datetime.now(UTC)
    for name in ("orders-enriched-with-customers", "card-ids"):
        manifest = Manifest.model_validate(
            {
                "name": name,
                "target-table": "`demo`.`out`",
                "sql": "SELECT 1",
                "meta": {"query-id": name, "query-version": 3, "query-create-timestamp": now.isoformat()},
            }
        )
        record = DeploymentRecord(manifest=manifest, run_id="run-1", target="local", deployed_at=now)
        manifests.write(layout.deployed(name), record.encode())
    progress = BatchProgress(batch=7, timestamp=(now - timedelta(seconds=5)).isoformat(), input_rows_per_second=12.5)
    failed = JobStatus(
        name="orders-enriched-with-customers",
        version=3,
        run_id="run-1",
        state=JobState.FAILED,
        started_at=now.isoformat(),
        updated_at=now.isoformat(),
        restarts=3,
        gave_up=True,
        error=WHY,
        progress=progress,
    )
    write_status(manifests, failed)
    return root


def sql_runner(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SQL_RUNNER, *args], capture_output=True, text=True, timeout=60, env=cli_env(env), check=False
    )


def test_the_command_piped_prints_one_plain_line_per_job_and_json_stays_as_it_was(state: Path):
    piped = sql_runner("status", "--state", str(state))
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    assert [re.split(r" {2,}", line)[:4] for line in lines] == [
        ["NAME", "VERSION", "TARGET", "STATE"],
        ["card-ids", "3", "local", "not running"],
        ["orders-enriched-with-customers", "3", "local", "failed (restarts used up)"],
    ]
    assert lines[2].endswith(" ".join(WHY.split()))
    assert sql_runner("status", "--state", str(state), "-o", "wide").stdout == piped.stdout
    for option in (["--json"], ["-o", "json"]):
        shown = [json.loads(line) for line in sql_runner("status", "--state", str(state), *option).stdout.splitlines()]
        assert [(job["name"], job["state"], job["why"]) for job in shown] == [
            ("card-ids", "not running", None),
            ("orders-enriched-with-customers", "failed (restarts used up)", WHY),
        ]


def test_the_command_at_an_80_column_terminal_fits_it_and_names_what_it_left_out(state: Path):
    # rich takes TTY_COMPATIBLE=1 as a terminal: what a person at an 80-column terminal sees
    shown = sql_runner("status", "--state", str(state), env={"TTY_COMPATIBLE": "1", "COLUMNS": "80"})
    assert shown.returncode == 0, shown.stderr
    text = re.sub(r"\x1b\[[0-9;]*m", "", shown.stdout)
    assert max(cell_len(line) for line in text.splitlines()) <= 80
    header, rows = table(text)
    assert rows["orders-enriched-with-customers"]["state"] == "failed (restarts used up)"
    assert rows["card-ids"]["state"] == "not running"
    assert left_out(text) == [column.key for column in COLUMNS if column.key not in header]


def test_an_unknown_output_is_refused_with_the_choices(state: Path):
    code, stdout, stderr = in_process(["status", "--state", str(state), "-o", "yaml"])
    assert code == 2 and not stdout
    assert "Invalid value for '-o' / '--output': 'yaml' is not one of 'wide', 'json'." in stderr


def test_with_nothing_deployed_the_command_says_so_and_prints_no_table(tmp_path: Path):
    code, stdout, stderr = in_process(["status", "--state", str(tmp_path / "state")])
    assert code == 0 and stdout == ""
    assert stderr.strip() == "no jobs deployed"
