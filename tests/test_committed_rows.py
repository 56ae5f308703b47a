"""Reading a file sink's committed rows without Spark: only files in _spark_metadata count."""

from __future__ import annotations

import json
from pathlib import Path

from demo.committed_rows import committed_files, committed_json_rows


def _log(folder: Path, name: str, files: list[Path]) -> None:
    log = folder / "_spark_metadata"
    log.mkdir(parents=True, exist_ok=True)
    entries = [json.dumps({"path": f.as_uri(), "size": 1, "isDir": False, "action": "add"}) for f in files]
    (log / name).write_text("\n".join(["v1", *entries]) + "\n")


def _part(folder: Path, name: str, rows: list[dict]) -> Path:
    path = folder / f"part-{name}.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_files_of_unfinished_batches_are_ignored(tmp_path: Path):
    a = _part(tmp_path, "a", [{"id": 1}, {"id": 2}])
    b = _part(tmp_path, "b", [{"id": 3}])
    _part(tmp_path, "in-flight", [{"id": 99}])  # written, but its batch never committed
    _log(tmp_path, "0", [a])
    _log(tmp_path, "1", [b])
    assert [r["id"] for r in committed_json_rows(tmp_path)] == [1, 2, 3]


def test_a_compacted_log_replaces_the_batches_before_it(tmp_path: Path):
    parts = [_part(tmp_path, str(i), [{"id": i}]) for i in range(4)]
    _log(tmp_path, "0", [parts[0]])
    _log(tmp_path, "1", [parts[1]])
    _log(tmp_path, "2.compact", parts[:3])  # batches 0..2, as Spark compacts them
    _log(tmp_path, "3", [parts[3]])
    assert committed_files(tmp_path) == parts
    assert [r["id"] for r in committed_json_rows(tmp_path)] == [0, 1, 2, 3]


def test_a_folder_without_a_log_has_no_committed_rows(tmp_path: Path):
    _part(tmp_path, "x", [{"id": 1}])
    assert committed_json_rows(tmp_path) == []
