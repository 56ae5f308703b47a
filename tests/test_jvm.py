"""pyspark's internals are reached in one module (jobs/jvm.py), and a Spark outside the line they were
checked on is refused with one clear line before anything runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pyspark
import pytest

from jobs.jvm import SUPPORTED, check_spark_version
from runner.core.errors import UserError

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = {"_jvm", "_jsparkSession", "_jdf", "_jsq", "_jsc", "_gateway", "_gateway_client", "_jconf"}


def test_only_jobs_jvm_touches_pysparks_private_attributes():
    found = []
    for path in sorted(p for package in ("runner", "jobs") for p in (ROOT / package).rglob("*.py")):
        if path == ROOT / "jobs" / "jvm.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert not found, "reach pyspark's internals through jobs/jvm.py:\n" + "\n".join(found)


def test_the_installed_pyspark_is_supported():
    check_spark_version()
    assert tuple(int(p) for p in pyspark.__version__.split(".")[:2]) in SUPPORTED


@pytest.mark.parametrize("version", ["3.5.1", "4.1.0", "5.0.0", "dev"])
def test_another_spark_line_is_refused_naming_the_supported_one(version: str):
    with pytest.raises(UserError) as raised:
        check_spark_version(version)
    (problem,) = raised.value.problems
    assert problem.code == "SPARK_VERSION_UNSUPPORTED" and raised.value.exit_code == 2
    assert f"pyspark {version} is not" in problem.render() and "4.0.x" in problem.render()


# the scripts spark-submit runs, and what puts the installed pyspark first in each before pyspark is imported
ENTRY_POINTS = {
    "jobs/entry.py": "installed_pyspark_first",
    "runner/session/app.py": "installed_pyspark_first",
    "runner/analysis/driver.py": "jobs.entry",  # which calls it as it is imported
}


@pytest.mark.parametrize("script", sorted(ENTRY_POINTS))
def test_every_spark_submit_entry_point_puts_the_installed_pyspark_first_before_importing_it(script: str):
    """A project module imported before the path is mended may import pyspark from spark-submit's zip."""
    first = ENTRY_POINTS[script]
    for node in ast.parse((ROOT / script).read_text()).body:
        called = isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and node.value.func
        if getattr(called, "id", None) == first:
            return
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [f"{node.module}.{alias.name}" for alias in node.names]
        if first in modules:
            return
        mending = "jobs.pythonpath.installed_pyspark_first"
        late = [m for m in modules if m.split(".")[0] in ("pyspark", "jobs", "runner") and m != mending]
        assert not late, f"{script}:{node.lineno} imports {late[0]} before {first}"
    raise AssertionError(f"{script} never reaches {first}")


def _installed(packages: Path, *names: str) -> list[str]:
    """A pip-installed pyspark's folder layout under ``packages``, with the zips spark-submit puts on a driver's
    path; returns those zips."""
    lib = packages / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    for name in names:
        (packages / name).mkdir(exist_ok=True)
        (packages / name / "__init__.py").write_text("")
    zips = [lib / "pyspark.zip", lib / "py4j-0.10.9.9-src.zip"]
    for zipped in zips:
        zipped.write_bytes(b"")
    return [str(z) for z in zips]


def test_a_driver_imports_the_installed_pyspark_instead_of_compiling_spark_submits_zip_at_each_start(tmp_path):
    from jobs.pythonpath import installed_pyspark_first

    packages = tmp_path / "site-packages"
    zips = _installed(packages, "pyspark", "py4j")
    user = str(tmp_path / "deps.zip")  # a --py-files zip stays where spark-submit put it
    path = [*zips, user, str(tmp_path / "project"), str(packages)]
    assert installed_pyspark_first(path) == zips
    assert path == [user, str(tmp_path / "project"), str(packages), *zips]

    # the real installation: spark-submit's zips are those of the pyspark this test imports
    real = Path(pyspark.__file__).parent / "python" / "lib"
    real_zips = sorted(str(z) for z in real.glob("*.zip"))
    assert len(real_zips) == 2
    path = [*real_zips, str(Path(pyspark.__file__).parents[1])]
    assert sorted(installed_pyspark_first(path)) == real_zips and path[0] == str(Path(pyspark.__file__).parents[1])


def test_spark_submits_zips_stay_first_where_their_packages_are_not_installed_beside_them(tmp_path):
    """EMR: pyspark is Spark's own zip, not a package in the Python's folders; the same when the folder is not on
    the path, and for py4j alone when only pyspark is installed there."""
    from jobs.pythonpath import installed_pyspark_first

    packages = tmp_path / "site-packages"
    zips = _installed(packages, "pyspark")
    path = [*zips, str(tmp_path / "elsewhere")]
    assert installed_pyspark_first(path) == [] and path == [*zips, str(tmp_path / "elsewhere")]
    path = [*zips, str(packages)]
    assert installed_pyspark_first(path) == [zips[0]]
    assert path == [zips[1], str(packages), zips[0]]
