"""kill -9 a running job at random moments, redeploy it, and check the output is exact.

    .venv/bin/python bench/kill_restart.py [--kills 10] [--seed 7]

A copy of the example project runs `high-value-transactions` as a detached local job
(1 s trigger). Each round writes a batch of events, waits a random 0-4 s (so the kill
lands before, during or after a micro-batch), kills the job's process group with
SIGKILL, and runs `sql-runner deploy`, which finds the job dead and resumes it from its
latest checkpoint. At the end the file sink must hold every expected row exactly once.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from demo.committed_rows import committed_json_rows  # noqa: E402
from demo.transactions import transactions, write_batch  # noqa: E402
from runner.targets.local import process_start_ticks  # noqa: E402

SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")
NAME = "high-value-transactions"
START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)


def sql_runner(root: Path, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [SQL_RUNNER, *args],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    if result.returncode != 0:
        raise SystemExit(f"sql-runner {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def job_pid(root: Path) -> int:
    record = root / ".sql-runner" / "manifests" / "jobs" / f"{NAME}.json"
    return json.loads(record.read_text())["pid"]


def wait_until(condition, timeout: float) -> float | None:
    """Seconds until ``condition()`` held, or None on timeout."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if condition():
            return time.monotonic() - started
        time.sleep(0.25)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="sql-runner-kill-bench-"))
    shutil.copytree(ROOT / "manifests", root / "manifests")
    for other in ("payee-bands", "spend-per-account"):
        (root / "manifests" / f"{other}.yaml").unlink()
    template = root / "manifests" / "job-template.yaml"
    template.write_text(template.read_text().replace("trigger-interval: 5 seconds", "trigger-interval: 1 second"))
    events = root / "demo-data" / "events" / "card-transactions"
    output = root / "demo-data" / "output" / "high-value-tx"
    written: list = []
    catch_up: list[float] = []
    delays: list[float] = []
    outcomes: Counter = Counter()
    try:
        first = transactions(20, start=START, seed=args.seed)
        written += first
        write_batch(events, "batch-000", first)
        sql_runner(root, "deploy")
        for kill in range(1, args.kills + 1):
            rows = transactions(20, start=START, seed=args.seed + kill, first_id=len(written))
            written += rows
            write_batch(events, f"batch-{kill:03d}", rows)
            delay = rng.uniform(0, 4)
            delays.append(delay)
            time.sleep(delay)
            pid = job_pid(root)
            os.killpg(pid, signal.SIGKILL)
            if wait_until(lambda pid=pid: process_start_ticks(pid) is None, 30) is None:
                raise SystemExit(f"job {pid} did not die")
            redeployed = time.monotonic()
            out = sql_runner(root, "deploy").stdout
            if "restore v1 from checkpoint" in out:
                how = "resumed its latest checkpoint"
            elif "v1 never started" in out:  # killed while starting, before its first checkpoint
                how = "started as planned (killed before its first checkpoint)"
            else:
                raise SystemExit(f"round {kill}: expected a resume from the latest checkpoint, got:\n{out}")
            outcomes[how] += 1
            expected = sorted(t.transaction_id for t in written if t.amount > 500)
            took = wait_until(
                lambda expected=expected: sorted(r["transaction_id"] for r in committed_json_rows(output)) == expected,
                180,
            )
            if took is None:
                break
            catch_up.append(time.monotonic() - redeployed)
            print(
                f"round {kill:2d}: killed {delay:.1f}s after new input; {how}; caught up "
                f"{catch_up[-1]:.1f}s after the redeploy began",
                flush=True,
            )
        rows = committed_json_rows(output)
        got = Counter(r["transaction_id"] for r in rows)
        expected_ids = Counter(t.transaction_id for t in written if t.amount > 500)
        duplicates = sum(n - 1 for n in got.values() if n > 1)
        missing = sum((expected_ids - got).values())
        unexpected = sum((got - expected_ids).values()) - duplicates
        print()
        print(
            "| kills | expected rows | rows in sink | duplicates | missing | unexpected | "
            "redeploy to caught up (mean / max s) |"
        )
        print("|---|---|---|---|---|---|---|")
        print(
            f"| {len(catch_up)} of {args.kills} | {sum(expected_ids.values())} | {len(rows)} | {duplicates} | "
            f"{missing} | {unexpected} | {statistics.mean(catch_up or [0]):.1f} / {max(catch_up or [0]):.1f} |"
        )
        for how, count in outcomes.items():
            print(f"{count} x {how}")
        exact = len(catch_up) == args.kills and got == expected_ids
        print("exact: every expected row once, nothing else" if exact else "NOT EXACT")
        if not exact:
            raise SystemExit(1)
    finally:
        record = root / ".sql-runner" / "manifests" / "jobs" / f"{NAME}.json"
        if record.exists() and process_start_ticks(job_pid(root)) is not None:
            os.killpg(job_pid(root), signal.SIGKILL)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
