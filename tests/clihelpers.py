"""Driving the real `sql-runner` command from tests, and waiting on what it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from runner.core.bucket import LocalBucket
from runner.core.protocol.history import HistoryEntry, read_history
from tests.conftest import ProjectDir

START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "COLUMNS": "200", **(extra or {})}


def cli(
    project: ProjectDir, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [SQL_RUNNER, *args],
        cwd=project.root,
        capture_output=True,
        text=True,
        timeout=300,
        env=cli_env(env),
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def wait_for(condition, what: str, timeout: float = 120.0, *, explain=None):
    """Poll ``condition`` until it is true; on a timeout, ``explain()`` (if given) says what was seen.

    A condition that runs a command (``sql-runner status``: half a second of a core) is polled at most
    a quarter of the time, so that waiting does not take the CPU the jobs waited on need."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        began = time.monotonic()
        value = condition()
        if value:
            return value
        time.sleep(max(0.2, 3 * (time.monotonic() - began)))
    seen = f"; seen: {explain()}" if explain else ""
    raise AssertionError(f"timed out waiting for {what}{seen}")


def status(project: ProjectDir, name: str, *options: str) -> dict:
    lines = cli(project, "status", "--json", *options).stdout.splitlines()
    return next(json.loads(line) for line in lines if json.loads(line)["name"] == name)


def status_file(project: ProjectDir, name: str) -> dict:
    """The status document the job ``name`` published last (``status/<name>.json`` in the project's local
    state), as written; empty before it has published one."""
    path = project.root / ".sql-runner" / "manifests" / "status" / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else {}


def batch(project: ProjectDir, name: str) -> int:
    """The id of the last micro-batch the job ``name`` has published (-1: none yet)."""
    return (status_file(project, name).get("progress") or {}).get("batch", -1)


def history(project: ProjectDir, name: str) -> list[HistoryEntry]:
    return read_history(LocalBucket(project.root / ".sql-runner" / "manifests"), name)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


def parsed_command(args: list[str]) -> tuple[str, dict]:
    """Parse a full ``sql-runner ...`` command line as the CLI would, without running it: the
    command's path (``session start``) and its parameters. A misplaced option raises click's error
    (the command groups take no options of their own, so a group is followed by its command's name)."""
    import click

    from runner.cli.main import cli as group

    command: click.Command = group
    words, path = list(args[1:]), []
    ctx = click.Context(command, info_name="sql-runner")
    while isinstance(command, click.Group):
        name, words = words[0], words[1:]
        sub = command.get_command(ctx, name)
        assert sub is not None, f"no command {name!r}"
        path.append(name)
        command = sub
    return " ".join(path), command.make_context(path[-1], words, parent=ctx).params


def refused_by_validate(project: ProjectDir, code: str, *, secret: str, case: str = "") -> None:
    """``sql-runner validate`` of the project exits 2 with one line naming ``code``, no traceback, without
    ``secret`` in what it says, and creates nothing in the project."""
    from click.testing import CliRunner

    from runner.cli.main import cli as main

    before = sorted(p.relative_to(project.root) for p in project.root.rglob("*"))
    result = CliRunner().invoke(main, ["validate", "--project", str(project.root)])
    assert result.exit_code == 2, (case, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if code in line]
    assert len(lines) == 1, (case, result.stderr)
    assert "Traceback" not in result.stderr
    assert secret not in result.stderr + result.stdout
    after = sorted(p.relative_to(project.root) for p in project.root.rglob("*"))
    assert after == before, "validate must not create state or data"
