"""A command whose queries did not change starts no Spark: the deployed record already holds Spark's verdict.

Bad inputs tried: an unset placeholder in an unchanged job's properties (still refused, without
Spark); each change that must be judged again: the SQL text (even whitespace), a column type in
a table the query reads, a new table that shares an unqualified name with one it reads.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.clihelpers import SQL_RUNNER, cli, cli_env, edit, wait_for
from tests.conftest import ProjectDir

pytestmark = [pytest.mark.spark, pytest.mark.e2e]

ANALYSIS = "starting local Spark to analyse the queries"


def plan(project: ProjectDir, env: dict | None = None):
    result = cli(project, "plan", check=False, env=env)
    return result, ANALYSIS in result.stderr


def test_plan_and_deploy_start_spark_only_for_queries_that_changed(demo_project: ProjectDir):
    project = demo_project
    manifest = project.root / "manifests" / "high-value.yaml"
    manifest.write_text(manifest.read_text() + "sparkProperties:\n  spark.sql.shuffle.partitions: ${PARTITIONS}\n")
    env = {"PARTITIONS": "4"}
    first = cli(project, "deploy", env=env)
    # judged by the job's own driver (tests/test_judged_launch.py): no Spark of the command's own
    assert ANALYSIS not in first.stderr and "start v1 with clean state" in first.stdout
    assert "judged by its job's driver" in first.stderr

    result, analysed = plan(project, env)
    assert result.returncode == 0 and not analysed and "no change" in result.stdout, result.stderr
    again = cli(project, "deploy", env=env)
    assert ANALYSIS not in again.stderr and "high-value: no change -> ok" in again.stdout

    # configuration only: restart with the state, still no analysis
    edit(manifest, "Card transactions above 500", "Card transactions above 500 (audited)")
    result, analysed = plan(project, env)
    assert not analysed and "restore v1" in result.stdout, result.stdout
    # an unchanged job whose placeholder is no longer set is still refused
    result, analysed = plan(project, {})
    assert result.returncode == 2 and "UNRESOLVED_PLACEHOLDER" in result.stderr and not analysed

    # what Spark must judge again
    edit(manifest, "WHERE amount > 500", "WHERE  amount > 500")
    result, analysed = plan(project, env)
    assert analysed and "restore v1" in result.stdout, result.stdout
    edit(manifest, "WHERE  amount > 500", "WHERE amount > 500")
    tables = project.root / "manifests" / "tables" / "tables.sql"
    edit(tables, "amount         DOUBLE,", "amount         DECIMAL(12, 2),")
    assert plan(project, env)[1], "a column type of a table it reads"
    edit(tables, "amount         DECIMAL(12, 2),", "amount         DOUBLE,")
    project.ddl("other", "CREATE TABLE `other`.`card-transactions` (a INT) WITH ('connector' = 'blackhole');")
    assert plan(project, env)[1], "a namesake table could make an unqualified name ambiguous"


def descendants(root: int) -> dict[int, str]:
    """Every process below ``root``, with its command line."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                try:
                    found[pid] = (Path(f"/proc/{pid}/cmdline").read_bytes()).replace(b"\0", b" ").decode()
                except OSError:
                    continue
                frontier.append(pid)
    return found


def test_run_starts_one_jvm_which_judges_its_query_and_runs_it(demo_project: ProjectDir):
    runner = subprocess.Popen(
        [SQL_RUNNER, "run", "manifests/high-value.yaml"],
        cwd=demo_project.root,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    status = demo_project.root / ".sql-runner" / "manifests" / "status" / "high-value.json"
    try:
        wait_for(lambda: '"state": "running"' in (status.read_text() if status.exists() else ""), "the job", 120)
        below = descendants(runner.pid).values()
        assert [c for c in below if "runner/analysis/driver.py" in c], below  # judged, then released
        assert [c for c in below if "pyspark-shell" in c] == [], "no analysis JVM of the command's own"
        assert len([c for c in below if c.split(" ", 1)[0].endswith("/java")]) == 1, below
    finally:
        os.killpg(runner.pid, signal.SIGKILL)
        runner.wait(30)
