"""What every benchmark reports: side-by-side records, printed as one table and kept as JSON.

A record is ``{"name", "ours", "reference", "unit", "ratio"}`` with the rounds' medians,
the ratio's median, min and max over the rounds (ours / reference, each round measured
side by side), and the rounds' raw values. ``write`` adds to ``bench/results/<date>.json``
(one file per day, the records of every benchmark run that day, newest last) and
``bench/results/latest.json``, with the machine and versions.
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Record:
    name: str
    ours: float  # median over the rounds
    reference: float
    unit: str
    ratio: float  # median of the per-round ratios
    ratio_min: float
    ratio_max: float
    rounds: list[tuple[float, float]] = field(default_factory=list)  # (ours, reference) per round
    higher_is_better: bool = True


def batch_seconds(progress: list[dict]) -> float:
    """A query's time in micro-batches: the ``batch-duration-ms`` of its progress records (a job's
    status keeps them as ``recent-progress``), summed."""
    return sum(p.get("batch-duration-ms") or 0 for p in progress) / 1000


def record(name: str, rounds: list[tuple[float, float]], unit: str, *, higher_is_better: bool = True) -> Record:
    """Summarise ``rounds`` of (ours, reference), each pair measured side by side."""
    ratios = [ours / reference for ours, reference in rounds if reference]
    return Record(
        name,
        statistics.median(o for o, _ in rounds),
        statistics.median(r for _, r in rounds),
        unit,
        statistics.median(ratios) if ratios else float("nan"),
        min(ratios) if ratios else float("nan"),
        max(ratios) if ratios else float("nan"),
        rounds,
        higher_is_better,
    )


def measured(name: str, values: list[float], unit: str) -> Record:
    """A measurement with no reference side (reference and ratios NaN, written as null)."""
    nan = float("nan")
    return Record(name, statistics.median(values), nan, unit, nan, nan, nan, [(v, nan) for v in values])


def _figure(value: float, text: str) -> str:
    return "-" if math.isnan(value) else text


def table(records: list[Record]) -> str:
    lines = [
        "| benchmark | ours | reference | unit | ratio (median) | min | max | rounds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        lines.append(
            f"| {r.name} | {r.ours:,.1f} | {_figure(r.reference, f'{r.reference:,.1f}')} | {r.unit} | "
            f"{_figure(r.ratio, f'x{r.ratio:.3f}')} | {_figure(r.ratio_min, f'x{r.ratio_min:.3f}')} | "
            f"{_figure(r.ratio_max, f'x{r.ratio_max:.3f}')} | {len(r.rounds)} |"
        )
    return "\n".join(lines)


def machine() -> dict[str, object]:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr.splitlines()
    import pyspark

    return {
        "cores": os.cpu_count(),
        "memory-gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "java": java[0] if java else None,
        "pyspark": pyspark.__version__,
    }


def _plain(value: object) -> object:
    """NaN as null: JSON has no NaN."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def write(benchmark: str, records: list[Record]) -> Path:
    """Add ``records`` to today's results and to latest.json; returns today's file."""
    RESULTS.mkdir(exist_ok=True)
    now = datetime.now(UTC)
    entry = {
        "benchmark": benchmark,
        "at": now.isoformat(timespec="seconds"),
        "machine": machine(),
        "records": [_plain(asdict(r)) for r in records],
    }
    today = RESULTS / f"{now.date().isoformat()}.json"
    runs = json.loads(today.read_text()) if today.exists() else []
    runs = [run for run in runs if run["benchmark"] != benchmark] + [entry]
    today.write_text(json.dumps(runs, indent=2) + "\n")
    latest = RESULTS / "latest.json"
    current = json.loads(latest.read_text()) if latest.exists() else []
    current = [run for run in current if run["benchmark"] != benchmark] + [entry]
    latest.write_text(json.dumps(current, indent=2) + "\n")
    return today
