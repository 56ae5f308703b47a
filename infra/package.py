"""``make package`` / ``make package-lambda`` / ``make push-artifacts TEAM=x``.

    python -m infra.package all            # dist/: runner wheel, Lambda zip, bootstrap script, jars
    python -m infra.package lambda         # dist/deploy-lambda.zip only
    python -m infra.package push --team x  # upload dist/ to the team's artifacts bucket

The Lambda zip holds what the deploy Lambda imports (``runner/aws``, ``runner/authoring``
and ``runner/core``: no Spark, no CLI) and the manifest validation's dependencies
(pydantic, PyYAML) built for the Lambda runtime (Linux x86_64, CPython 3.11); boto3 comes
with the runtime.

EMR's jobs need Spark's Kafka connector (and its dependencies) and the MSK IAM auth
library: the team's MSK accepts IAM authentication only. ``all`` fetches each pinned jar
missing from ``dist/jars/``: the connector's from Maven Central, checked against the
``.sha1`` Maven Central publishes beside it; aws-msk-iam-auth's self-contained ``-all`` jar
from its GitHub release, checked to hold the IAM login classes. Where neither is
reachable, put the jars in ``dist/jars/`` by hand; ``push`` refuses to upload without them.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import shutil
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path

from jobs.kafka import CONNECTOR_JARS

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
LAMBDA_ZIP = DIST / "deploy-lambda.zip"
LAMBDA_REQUIREMENTS = ["pydantic==2.14.3", "pyyaml==6.0.3"]
LAMBDA_PACKAGES = ("core", "authoring", "aws")  # runner/<package>: what the deploy Lambda imports
BOOTSTRAP = Path(__file__).parent / "bootstrap" / "install-runner.sh"
JARS = DIST / "jars"
MAVEN_CENTRAL = "https://repo1.maven.org/maven2"
GITHUB = "https://github.com"
MSK_IAM_VERSION = "2.3.5"
MSK_IAM_CLASS = "software/amazon/msk/auth/iam/IAMClientCallbackHandler.class"


@dataclass(frozen=True)
class Jar:
    file: str
    path: str  # under the repository's base URL
    checked_by: str  # "sha1": Maven Central's checksum file; "class": the jar holds MSK_IAM_CLASS

    def url(self, base: str) -> str:
        return f"{base.rstrip('/')}/{self.path}"


def _maven(group: str, artifact: str, version: str) -> Jar:
    file = f"{artifact}-{version}.jar"
    return Jar(file, f"{group.replace('.', '/')}/{artifact}/{version}/{file}", "sha1")


# The connector's jars as spark.jars.packages would resolve them (jobs/kafka.py), and aws-msk-iam-auth.
REQUIRED_JARS = (
    _maven("org.apache.spark", "spark-sql-kafka-0-10_2.13", "4.0.5"),
    _maven("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", "4.0.5"),
    _maven("org.apache.kafka", "kafka-clients", "3.9.0"),
    _maven("org.apache.commons", "commons-pool2", "2.12.0"),
    Jar(
        f"aws-msk-iam-auth-{MSK_IAM_VERSION}-all.jar",
        f"aws/aws-msk-iam-auth/releases/download/v{MSK_IAM_VERSION}/aws-msk-iam-auth-{MSK_IAM_VERSION}-all.jar",
        "class",
    ),
)
assert {j.file for j in REQUIRED_JARS[:4]} == set(CONNECTOR_JARS), "the same connector jars as jobs/kafka.py"


class JarRefused(Exception):
    """A downloaded jar failed its check; nothing was kept."""


def fetch_jar(jar: Jar, into: Path, *, maven: str = MAVEN_CENTRAL, github: str = GITHUB) -> Path:
    """Download ``jar`` into ``into`` and check it (raises JarRefused or an URLError; writes nothing then)."""
    base = maven if jar.checked_by == "sha1" else github
    with urllib.request.urlopen(jar.url(base), timeout=60) as response:
        data = response.read()
    if jar.checked_by == "sha1":
        with urllib.request.urlopen(jar.url(base) + ".sha1", timeout=60) as response:
            expected = response.read().decode().split()[0].strip().lower()
        if hashlib.sha1(data).hexdigest() != expected:  # noqa: S324 - Maven Central's published checksum
            raise JarRefused(f"{jar.file}: its SHA-1 does not match {jar.url(base)}.sha1")
    else:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                holds = MSK_IAM_CLASS in archive.namelist()
        except zipfile.BadZipFile:
            holds = False
        if not holds:
            raise JarRefused(f"{jar.file}: not a jar holding {MSK_IAM_CLASS}")
    into.mkdir(parents=True, exist_ok=True)
    target = into / jar.file
    partial = target.with_suffix(".part")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def jars(into: Path = JARS, **bases: str) -> list[str]:
    """Fetch the required jars missing from ``into``; what could not be fetched, with why."""
    problems = []
    for jar in REQUIRED_JARS:
        if (into / jar.file).exists():
            continue
        try:
            fetch_jar(jar, into, **bases)
            print(f"fetched jars/{jar.file}")
        except (urllib.error.URLError, OSError, JarRefused) as error:
            problems.append(f"{jar.file} ({getattr(error, 'reason', error)})")
    return problems


def run(args: list[str]) -> None:
    print("+ " + " ".join(args), flush=True)
    subprocess.run(args, check=True)


def wheel() -> Path:
    DIST.mkdir(exist_ok=True)
    for old in DIST.glob("spark_sql_runner-*.whl"):
        old.unlink()
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(DIST), str(ROOT)])
    return next(DIST.glob("spark_sql_runner-*.whl"))


def lambda_zip() -> Path:
    DIST.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="deploy-lambda-") as tmp:
        target = Path(tmp)
        run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--target",
                str(target),
                "--platform",
                "manylinux2014_x86_64",
                "--implementation",
                "cp",
                "--python-version",
                "3.11",
                "--only-binary=:all:",
                *LAMBDA_REQUIREMENTS,
            ]
        )
        (target / "runner").mkdir()
        shutil.copy2(ROOT / "runner" / "__init__.py", target / "runner" / "__init__.py")
        for package in LAMBDA_PACKAGES:
            shutil.copytree(
                ROOT / "runner" / package,
                target / "runner" / package,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            )
        with zipfile.ZipFile(LAMBDA_ZIP, "w", zipfile.ZIP_DEFLATED) as archive:
            for path in sorted(target.rglob("*")):
                if path.is_file() and "__pycache__" not in path.parts:
                    archive.write(path, path.relative_to(target).as_posix())
    return LAMBDA_ZIP


def bootstrap() -> Path:
    DIST.mkdir(exist_ok=True)
    return Path(shutil.copy2(BOOTSTRAP, DIST / BOOTSTRAP.name))


def missing() -> list[str]:
    """What `make package` has not built (or fetched) yet."""
    wheels = sorted(DIST.glob("spark_sql_runner-*.whl"))
    return (
        [str(p.relative_to(ROOT)) for p in (LAMBDA_ZIP, DIST / BOOTSTRAP.name) if not p.exists()]
        + ([] if wheels else ["dist/spark_sql_runner-*.whl"])
        + [f"dist/jars/{jar.file}" for jar in REQUIRED_JARS if not (JARS / jar.file).exists()]
    )


def push(team_name: str) -> None:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from infra.stack import BOOTSTRAP_KEY, LAMBDA_ZIP_KEY
    from infra.teams import load_teams

    config = load_teams()
    team = config.team(team_name)
    bucket = team.bucket("artifacts", config.platform.environment)
    wheels = sorted(DIST.glob("spark_sql_runner-*.whl"))
    absent = missing()
    if absent:
        raise SystemExit(f"nothing pushed: {', '.join(absent)} missing; run `make package` first")
    uploads = [
        (wheels[-1], f"runner/{wheels[-1].name}"),
        (LAMBDA_ZIP, LAMBDA_ZIP_KEY),
        (DIST / BOOTSTRAP.name, BOOTSTRAP_KEY),
    ]
    uploads += [(jar, f"jars/{jar.name}") for jar in sorted(JARS.glob("*.jar"))]
    try:
        s3 = boto3.client("s3", region_name=team.region)
        for path, key in uploads:
            s3.upload_file(str(path), bucket, key)
            print(f"uploaded {path.relative_to(ROOT)} -> s3://{bucket}/{key}")
    except NoCredentialsError:
        raise SystemExit("nothing pushed: no AWS credentials (set AWS_PROFILE or AWS_ACCESS_KEY_ID)") from None
    except (BotoCoreError, ClientError) as error:
        raise SystemExit(f"push to s3://{bucket} failed: {error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.package", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["all", "lambda", "push"])
    parser.add_argument("--team")
    args = parser.parse_args(argv)
    if args.what == "push":
        if not args.team:
            parser.error("push needs --team")
        push(args.team)
        return 0
    built = [lambda_zip()] if args.what == "lambda" else [wheel(), lambda_zip(), bootstrap()]
    for path in built:
        print(f"built {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")
    if args.what == "all":
        unfetched = jars()
        if unfetched:
            print(
                f"could not fetch {', '.join(unfetched)}: put them in dist/jars/ by hand before "
                "`make push-artifacts` (EMR's jobs need them to reach MSK)"
            )
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
