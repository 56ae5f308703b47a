"""``make package`` / ``make package-lambda`` / ``make push-artifacts TEAM=x``.

    python -m infra.package all            # dist/: runner wheel, Lambda zip, bootstrap script, jars
    python -m infra.package lambda         # dist/deploy-lambda.zip only
    python -m infra.package push --team x  # upload dist/ to the team's artifacts bucket

The Lambda zip holds what the deploy Lambda imports (``runner/aws``, ``runner/authoring``
and ``runner/core``: no Spark, no CLI) and the manifest validation's dependencies
(pydantic, PyYAML) built for the Lambda runtime (Linux x86_64, CPython 3.11); boto3 comes
with the runtime.

EMR's jobs need Spark's Kafka connector, spark-avro and the MSK IAM auth library (the team's MSK
accepts IAM authentication only): ``all`` copies the declared ``spark`` jar set (``runner/core/jars.py``,
fetched and checked by ``make jars``) into ``dist/jars/``, less the jars only S3A needs (EMR reads
``s3://`` through EMRFS), each checked against its locked SHA-256, with a ``SHA256SUMS`` file the EMR
bootstrap verifies them by.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from infra.jars import FetchFailed, fetch, sha256
from runner.core import jars
from runner.core.jars import Jar

ROOT = Path(__file__).resolve().parents[1]
DIST = ROOT / "dist"
LAMBDA_ZIP = DIST / "deploy-lambda.zip"
LAMBDA_REQUIREMENTS = ["pydantic==2.14.3", "pyyaml==6.0.3"]
LAMBDA_PACKAGES = ("core", "authoring", "aws")  # runner/<package>: what the deploy Lambda imports
BOOTSTRAP = Path(__file__).parent / "bootstrap" / "install-runner.sh"
JARS = DIST / "jars"
SUMS = "SHA256SUMS"
# where the stack (infra/stack.py) has EMR and Lambda find what `push` uploads into the artifacts bucket
LAMBDA_ZIP_KEY = "lambda/deploy-lambda.zip"
BOOTSTRAP_KEY = "bootstrap/install-runner.sh"


class JarRefused(Exception):
    """A jar in the cache is not the one locked; nothing was copied."""


def emr_jars() -> list[Jar]:
    """The spark set as EMR needs it: every jar but those only S3A needs (EMRFS reads s3:// there)."""
    return [jar for jar in jars.locked(jars.SPARK) if set(jar.features) != {"s3"}]


def copy_jars(into: Path = JARS, cache: Path | None = None, engine: Path | None = None) -> list[Path]:
    """Copy EMR's jars from the cache (``make jars`` fetches it) into ``into``, checked, with SHA256SUMS; and
    the runner's own jar (``engine``: the one ``make jars`` built from this checkout's sources), which changelog
    queries run their incremental operators from."""
    cache = cache or jars.cache_dir(jars.SPARK)
    engine = engine or jars.engine_jar()
    wanted = emr_jars()
    for jar in wanted:
        source = cache / jar.file
        if not source.is_file():
            raise JarRefused(f"{jar.file} is not in {cache}: run `{jars.FETCH_COMMAND}` first")
        if sha256(source) != jar.sha256:
            raise JarRefused(f"{source}: its SHA-256 is not the one in {jars.LOCK.name}; run `{jars.FETCH_COMMAND}`")
    if not engine.is_file():
        raise JarRefused(f"the runner's jar {engine.name} is not built from these sources: run `{jars.FETCH_COMMAND}`")
    into.mkdir(parents=True, exist_ok=True)
    for stray in into.glob("*.jar"):
        if stray.name not in {jar.file for jar in wanted} | {engine.name}:
            stray.unlink()
    copied = [Path(shutil.copy2(cache / jar.file, into / jar.file)) for jar in wanted]
    copied.append(Path(shutil.copy2(engine, into / engine.name)))
    sums = [(jar.sha256, jar.file) for jar in wanted] + [(sha256(engine), engine.name)]
    (into / SUMS).write_text("".join(f"{digest}  {name}\n" for digest, name in sums))
    return copied


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
        + [
            f"dist/jars/{name}"
            for name in [SUMS, *(jar.file for jar in emr_jars()), jars.engine_jar().name]
            if not (JARS / name).exists()
        ]
    )


def push(team_name: str, teams_file: Path | None = None) -> None:
    """The built artifacts into the artifacts bucket of ``team_name``, as ``teams_file`` (the project's
    ``infra/teams.yaml`` unless given) names it."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    from infra.teams import TEAMS_FILE, load_teams

    config = load_teams(teams_file or TEAMS_FILE)
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
    uploads += [(jar, f"jars/{jar.name}") for jar in sorted(JARS.glob("*.jar"))] + [(JARS / SUMS, f"jars/{SUMS}")]
    try:
        s3 = boto3.client("s3", region_name=team.region)
        for path, key in uploads:
            s3.upload_file(str(path), bucket, key)
            print(f"uploaded {path.relative_to(ROOT)} -> s3://{bucket}/{key}")
        # what the bootstrap checks the wheel against before installing it, as it checks the jars
        digest = hashlib.sha256(wheels[-1].read_bytes()).hexdigest()
        s3.put_object(Bucket=bucket, Key=f"runner/{SUMS}", Body=f"{digest}  {wheels[-1].name}\n".encode())
        print(f"uploaded the wheel's checksum -> s3://{bucket}/runner/{SUMS}")
    except NoCredentialsError:
        raise SystemExit("nothing pushed: no AWS credentials (set AWS_PROFILE or AWS_ACCESS_KEY_ID)") from None
    except (BotoCoreError, ClientError) as error:
        raise SystemExit(f"push to s3://{bucket} failed: {error}") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.package", description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["all", "lambda", "push"])
    parser.add_argument("--team")
    parser.add_argument("--teams", type=Path, help="the teams file (default: infra/teams.yaml)")
    args = parser.parse_args(argv)
    if args.what == "push":
        if not args.team:
            parser.error("push needs --team")
        push(args.team, args.teams)
        return 0
    built = [lambda_zip()] if args.what == "lambda" else [wheel(), lambda_zip(), bootstrap()]
    for path in built:
        print(f"built {path.relative_to(ROOT)} ({path.stat().st_size // 1024} KiB)")
    if args.what == "all":
        try:
            fetch(jars.SPARK)
            copied = copy_jars()
        except (FetchFailed, JarRefused) as error:
            print(f"dist/jars/ not built: {error} (EMR's jobs need these jars to reach MSK)")
            return 1
        print(f"copied {len(copied)} jars into dist/jars/ with {SUMS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
