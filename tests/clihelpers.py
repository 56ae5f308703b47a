"""Driving the real `sql-runner` command from tests, reading what it and its jobs report, and waiting on it.

``cli`` runs the command as its own process, as a user does; ``invoke`` runs it in this process, for what
needs no Spark (argument errors, problems found before anything starts). ``status`` reads a job's line of
``sql-runner status --json`` in this process, by the command's own code, so that a test can poll it without
starting a process for each look; ``status_file`` reads the status document a job publishes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

from runner.core import logs
from runner.core.bucket import LocalBucket
from runner.core.protocol.history import HistoryEntry, read_history
from tests.conftest import ProjectDir

START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
KILLS = 3  # kill -9 rounds of a soak test; SQL_RUNNER_KILLS=N for a longer soak
SQL_RUNNER = str(Path(sys.executable).parent / "sql-runner")


def kill_rounds(what: str, at_least: int = 1) -> tuple[int, int]:
    """A kill soak's seed and how many rounds: ``SQL_RUNNER_KILL_SEED`` (random when unset, and printed so
    that a failure can be replayed) and ``SQL_RUNNER_KILLS`` (``KILLS`` when unset), but ``at_least``."""
    seed = int(os.environ.get("SQL_RUNNER_KILL_SEED", random.randrange(1 << 30)))
    kills = max(at_least, int(os.environ.get("SQL_RUNNER_KILLS", KILLS)))
    print(f"{kills} kills, {what} seeded with {seed} (SQL_RUNNER_KILLS, SQL_RUNNER_KILL_SEED)")
    return seed, kills


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


def invoke(
    project: ProjectDir, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``cli``'s answer, the command run in this process (in the project folder): for commands that end
    before any Spark or job starts, at a fraction of a process's start."""
    with contextlib.chdir(project.root):
        result = subprocess.CompletedProcess(["sql-runner", *args], *in_process(list(args), env))
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


@contextlib.contextmanager
def _logging_kept() -> Iterator[None]:
    """The command configures the runner's loggers for its own process (``runner/core/logs.py``): put this
    process's back as they were once it returns."""
    kept = []
    for tree in logs.TREES:
        logger = logging.getLogger(tree)
        kept.append((logger, list(logger.handlers), logger.level, logger.propagate))
    try:
        yield
    finally:
        for logger, handlers, level, propagate in kept:
            logger.handlers[:] = handlers
            logger.setLevel(level)
            logger.propagate = propagate


def in_process(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The exit code, stdout and stderr of ``sql-runner ARGS`` run in this process."""
    from click.testing import CliRunner

    from runner.cli.main import cli as main

    with _logging_kept():
        result = CliRunner().invoke(main, args, env={"COLUMNS": "200", **(env or {})})
    return result.exit_code, result.stdout, result.stderr


def wait_for(condition, what: str, timeout: float = 120.0, *, explain=None):
    """Poll ``condition`` until it is true; on a timeout, ``explain()`` (if given) says what was seen.

    A condition is polled at most a quarter of the time (every 0.1 s when it takes no time; a condition that
    runs a command, half a second of a core, every 1.5 s), so that waiting does not take the CPU the jobs
    waited on need."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        began = time.monotonic()
        value = condition()
        if value:
            return value
        time.sleep(max(0.1, 3 * (time.monotonic() - began)))
    seen = f"; seen: {explain()}" if explain else ""
    raise AssertionError(f"timed out waiting for {what}{seen}")


def statuses(project: ProjectDir, *options: str) -> dict[str, dict]:
    """Every deployed job's line of ``sql-runner status --json`` (run in the project, with ``options``), by
    name: the command run in this process, its JSON lines read back."""
    code, stdout, stderr = in_process(["status", "--json", "--project", str(project.root), *options])
    assert code == 0, stdout + stderr
    return {row["name"]: row for row in map(json.loads, stdout.splitlines())}


def status(project: ProjectDir, name: str, *options: str) -> dict:
    """``name``'s line of ``sql-runner status --json`` (see ``statuses``)."""
    return statuses(project, *options)[name]


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
    before = sorted(p.relative_to(project.root) for p in project.root.rglob("*"))
    exit_code, stdout, stderr = in_process(["validate", "--project", str(project.root)])
    assert exit_code == 2, (case, stdout, stderr)
    lines = [line for line in stderr.splitlines() if code in line]
    assert len(lines) == 1, (case, stderr)
    assert "Traceback" not in stderr
    assert secret not in stderr + stdout
    after = sorted(p.relative_to(project.root) for p in project.root.rglob("*"))
    assert after == before, "validate must not create state or data"
