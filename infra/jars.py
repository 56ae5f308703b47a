"""``make jars``: the declared JVM jar sets (``runner/core/jars.py``), fetched with ``mvn`` and checked.

    python -m infra.jars fetch             # every set into the cache; a jar already there is kept
    python -m infra.jars lock              # resolve the requirements again and rewrite jars.lock.json

``fetch`` asks Maven for exactly the locked jars (no dependency of theirs: the lock lists every
jar a set needs), with ``--strict-checksums`` so Maven refuses a download whose SHA-1 does not
match the repository's, then checks each jar's SHA-256 against the lock before it enters the
cache. A set already in the cache (every jar present, with its locked size) costs no ``mvn``.

``fetch`` also builds the runner's own jar (``jars.engine_jar``) from ``jobs/java/engine/`` with javac,
when the cache lacks the jar its sources make. After ``fetch``, the Spark drivers' class-data
archive for the jar set is built if it is missing (``runner/core/classdata.py``).

``lock`` resolves each set's requirements with their dependencies, drops what pyspark ships
itself, and records each jar's SHA-256 and which features need it (one resolution per feature,
its versions held to the whole set's).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path
from xml.sax.saxutils import escape

from runner.core import classdata, jars
from runner.core.jars import Jar, Requirement

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.8.1"
MVN_TIMEOUT = 1800


class FetchFailed(Exception):
    """The jars could not be fetched or checked; the cache holds only jars that passed."""


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _dependency(coordinate: str, exclusions: Iterable[str], *, scope: str | None = None) -> str:
    group, artifact, *rest = coordinate.split(":")
    version = f"<version>{escape(rest[0])}</version>" if rest else ""
    if len(rest) > 1:
        version += f"<classifier>{escape(rest[1])}</classifier>"
    excluded = "".join(
        f"<exclusion><groupId>{escape(g)}</groupId><artifactId>{escape(a)}</artifactId></exclusion>"
        for g, a in (e.split(":") for e in exclusions)
    )
    return (
        f"<dependency><groupId>{escape(group)}</groupId><artifactId>{escape(artifact)}</artifactId>{version}"
        + (f"<type>pom</type><scope>{scope}</scope>" if scope else "")
        + (f"<exclusions>{excluded}</exclusions>" if excluded else "")
        + "</dependency>"
    )


def pom(dependencies: Iterable[str], managed: Iterable[str] = ()) -> str:
    """A throw-away project whose dependencies are ``dependencies`` (rendered ``<dependency>`` elements)."""
    return (
        '<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>'
        "<groupId>local.sql-runner</groupId><artifactId>jars</artifactId><version>1</version>"
        f"<dependencyManagement><dependencies>{''.join(managed)}</dependencies></dependencyManagement>"
        f"<dependencies>{''.join(dependencies)}</dependencies></project>"
    )


def mvn(project: Path, goal: list[str], what: str) -> None:
    """Run ``mvn`` in ``project``; its output only when it fails."""
    if shutil.which("mvn") is None:
        raise FetchFailed(f"{what}: mvn is not installed (Maven's client fetches the jars from Maven Central)")
    args = ["mvn", "-B", "-q", "-ntp", "--strict-checksums", "-f", str(project / "pom.xml"), *goal]
    result = subprocess.run(args, capture_output=True, text=True, timeout=MVN_TIMEOUT, check=False)
    if result.returncode != 0:
        lines = [line for line in (result.stdout + result.stderr).splitlines() if "ERROR" in line][:8]
        raise FetchFailed(f"{what}: mvn failed (exit {result.returncode}):\n" + "\n".join(lines))


def to_fetch(set_name: str, folder: Path) -> list[Jar]:
    """The set's jars that are not in ``folder`` with their locked size."""
    return [
        jar
        for jar in jars.locked(set_name)
        if not (folder / jar.file).is_file() or (folder / jar.file).stat().st_size != jar.size
    ]


def fetch(set_name: str, folder: Path | None = None) -> list[Path]:
    """Make ``folder`` (default: the set's cache) hold exactly the set's locked jars, checked."""
    folder = folder or jars.cache_dir(set_name)
    wanted = {jar.file for jar in jars.locked(set_name)}
    for stray in folder.glob("*.jar") if folder.is_dir() else ():
        if stray.name not in wanted:
            stray.unlink()  # an older version's jar: it must not reach a classpath
    needed = to_fetch(set_name, folder)
    if needed:
        print(f"==> fetching {len(needed)} of the {set_name} set's jars with mvn into {folder}", flush=True)
        with tempfile.TemporaryDirectory(prefix="sql-runner-jars-") as tmp:
            project = Path(tmp)
            # every jar of the set is listed, so none of their dependencies is asked for
            (project / "pom.xml").write_text(pom(_dependency(jar.coordinate, ("*:*",)) for jar in needed))
            out = project / "out"
            mvn(
                project,
                [f"{DEPENDENCY_PLUGIN}:copy-dependencies", f"-DoutputDirectory={out}"],
                f"fetching the {set_name} jar set",
            )
            folder.mkdir(parents=True, exist_ok=True)
            for jar in needed:
                got = out / jar.file
                if not got.is_file():
                    raise FetchFailed(f"mvn did not deliver {jar.coordinate}")
                if sha256(got) != jar.sha256:
                    raise FetchFailed(
                        f"{jar.file}: its SHA-256 is not the one in {jars.LOCK.name} ({jar.sha256}); nothing kept"
                    )
                shutil.move(str(got), folder / jar.file)
    return [folder / jar.file for jar in jars.locked(set_name)]


def _requirement(requirement: Requirement) -> str:
    return _dependency(requirement.coordinate, requirement.exclude)


_LISTED = re.compile(r"^\s*([^:\s]+):([^:\s]+):jar:(?:([^:\s]+):)?([^:\s]+):(compile|runtime):(\S+?)(?:\s.*)?$")


def versioned(key: str, version: str) -> str:
    """The coordinate of a resolved jar: its key (``group:artifact``, ``group:artifact::classifier``) with its
    version, ``group:artifact:version[:classifier]``."""
    name, _, classifier = key.partition("::")
    return f"{name}:{version}" + (f":{classifier}" if classifier else "")


def resolve(requirements: Iterable[Requirement], managed: Iterable[str]) -> dict[str, tuple[str, Path]]:
    """group:artifact -> (version, local file) of the requirements and their runtime dependencies."""
    with tempfile.TemporaryDirectory(prefix="sql-runner-lock-") as tmp:
        project = Path(tmp)
        (project / "pom.xml").write_text(pom(map(_requirement, requirements), managed))
        listing = project / "list.txt"
        mvn(
            project,
            [
                f"{DEPENDENCY_PLUGIN}:list",
                "-DincludeScope=runtime",
                "-DoutputAbsoluteArtifactFilename=true",
                f"-DoutputFile={listing}",
            ],
            "resolving the requirements",
        )
        found: dict[str, tuple[str, Path]] = {}
        for line in listing.read_text().splitlines():
            match = _LISTED.match(line)
            if match is None:
                continue
            group, artifact, classifier, version, _scope, path = match.groups()
            found[f"{group}:{artifact}" + (f"::{classifier}" if classifier else "")] = (version, Path(path))
        return found


def shipped_by_pyspark() -> set[str]:
    """artifactIds of the jars inside the installed pyspark (e.g. ``netty-common``)."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(spec.submodule_search_locations[0]) / "jars"
    return {re.sub(r"-\d.*$", "", jar.name) for jar in folder.glob("*.jar")}


def lock() -> dict:
    """Resolve every set and return the lock file's content."""
    sets: dict[str, list[dict]] = {}
    for set_name, requirements in jars.REQUIREMENTS.items():
        managed = [_dependency(bom, (), scope="import") for bom in jars.MANAGED[set_name]]
        whole = resolve(requirements, managed)
        if set_name == jars.SPARK:
            provided = shipped_by_pyspark()
            whole = {
                key: value
                for key, value in whole.items()
                if key.split(":")[1] not in provided and key not in jars.PROVIDED_ELSEWHERE
            }
        held = managed + [_dependency(versioned(key, version), ()) for key, (version, _) in whole.items()]
        features: dict[str, set[str]] = {key: set() for key in whole}
        for feature in sorted({r.feature for r in requirements}):
            for key in resolve([r for r in requirements if r.feature == feature], held):
                if key in features:
                    features[key].add(feature)
        sets[set_name] = [
            {
                "coordinate": versioned(key, version),
                "sha256": sha256(path),
                "size": path.stat().st_size,
                "features": sorted(features[key]),
            }
            for key, (version, path) in sorted(whole.items())
        ]
    return {
        "comment": "Written by `python -m infra.jars lock` from runner/core/jars.py's requirements; do not edit.",
        "sets": sets,
    }


def build_engine() -> Path:
    """The runner's own jar, compiled from ``jobs/java/engine/`` against the installed pyspark's jars unless the
    cache has it already; older builds of it go."""
    target = jars.engine_jar()
    if target.is_file():
        return target
    javac = shutil.which("javac")
    if javac is None:
        raise FetchFailed("javac (Java 17's JDK) is needed to build the runner's jar from jobs/java/engine/")
    import pyspark  # the jars it ships are what the classes run against

    spark_jars = Path(pyspark.__file__).parent / "jars"
    print(f"==> compiling the runner's jar from jobs/java/engine/ (javac, about 10 s): {target.name}", flush=True)
    with tempfile.TemporaryDirectory(prefix="sql-runner-engine-") as work:
        classes = Path(work) / "classes"
        compiled = subprocess.run(
            [javac, "-proc:none", "-nowarn", "-Xlint:none", "--release", "17", "-d", str(classes)]
            + ["-cp", f"{spark_jars}/*", *map(str, jars.engine_sources())],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if compiled.returncode != 0:
            raise FetchFailed(f"javac could not compile jobs/java/engine/:\n{compiled.stderr.strip()}")
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f"{target.name}.{os.getpid()}.partial")  # another build may be writing too
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: sql-runner\n\n")
            for path in sorted(classes.rglob("*.class")):
                jar.write(path, path.relative_to(classes).as_posix())
        os.replace(partial, target)
    for old in target.parent.glob("sql-runner-engine-*.jar"):
        if old != target:
            old.unlink()
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.jars", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["fetch", "lock"])
    parser.add_argument("--set", dest="sets", action="append", choices=sorted(jars.REQUIREMENTS))
    args = parser.parse_args(argv)
    try:
        if args.what == "lock":
            jars.LOCK.write_text(json.dumps(lock(), indent=1) + "\n", encoding="utf-8")
            jars.locked.cache_clear()
            print(f"wrote {jars.LOCK}")
            return 0
        for set_name in args.sets or sorted(jars.REQUIREMENTS):
            paths = fetch(set_name)
            size = sum(p.stat().st_size for p in paths) / 2**20
            print(f"==> {set_name} jars ready: {len(paths)} jars, {size:.0f} MiB in {jars.cache_dir(set_name)}")
        if jars.SPARK in (args.sets or jars.REQUIREMENTS):
            print(f"==> the runner's jar ready: {build_engine()}")
            built = classdata.build(say=lambda line: print(f"==> {line}", flush=True))
            if built is not None:
                print(f"==> drivers' class-data archive ready: {built}")
    except FetchFailed as error:
        print(f"jars: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
