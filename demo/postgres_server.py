"""A real PostgreSQL server on 127.0.0.1, for the tests, the demo and the benchmarks.

    python -m demo.postgres_server [--port 5432]      # one throwaway cluster until Ctrl-C

Debian's ``postgresql-15`` server (``make postgres`` installs it where it is missing), a
cluster made with ``initdb`` in a temporary folder and removed when it stops. PostgreSQL
refuses to run as root: as root, the cluster belongs to the ``postgres`` user and runs as
it. It listens on 127.0.0.1 only (its socket in the cluster's folder), and asks for a
password (scram-sha-256) like a production database: the runner's user is ``runner``,
with :attr:`PostgresServer.password`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from demo.kafka_broker import free_port

BIN_DIRS = ("/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")
USER = "runner"
DATABASE = "runner"


def server_bin() -> Path | None:
    """Where PostgreSQL's server programs are (``initdb``, ``pg_ctl``), or None."""
    for folder in BIN_DIRS:
        if (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    found = shutil.which("pg_ctl")
    return Path(found).resolve().parent if found else None


class PostgresServer:
    """One throwaway PostgreSQL cluster on 127.0.0.1."""

    def __init__(self, port: int = 0, *, folder: Path | None = None, password: str | None = None):
        """A new cluster; or, given its ``folder`` and ``password``, one already started (to use or stop)."""
        self.port = port or free_port()
        self.password = password or secrets.token_urlsafe(16)
        self.folder = folder or Path(tempfile.mkdtemp(prefix="sql-runner-postgres-"))
        self.data = self.folder / "data"
        self.bin = server_bin()
        self.as_root = os.geteuid() == 0

    @property
    def url(self) -> str:
        """The JDBC URL a jdbc table declares."""
        return f"jdbc:postgresql://127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, *command: str, input: str | None = None) -> subprocess.CompletedProcess:
        if self.as_root:
            command = ("runuser", "-u", "postgres", "--", *command)
        return subprocess.run(command, input=input, capture_output=True, text=True, check=True, timeout=120)

    def start(self) -> PostgresServer:
        if self.bin is None:
            raise RuntimeError("PostgreSQL's server is not installed: run `make postgres` (Debian's postgresql-15)")
        if self.as_root:
            shutil.chown(self.folder, "postgres", "postgres")
        password_file = self.folder / "password"
        password_file.write_text(self.password + "\n")
        if self.as_root:
            shutil.chown(password_file, "postgres", "postgres")
        password_file.chmod(0o600)
        self._run(
            str(self.bin / "initdb"),
            "-D",
            str(self.data),
            "-U",
            USER,
            "--pwfile",
            str(password_file),
            "--auth",
            "scram-sha-256",
            "-E",
            "UTF8",
            "--no-sync",
        )
        password_file.unlink()
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off -c max_connections=50"
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "log"), "-o", options, "-w", "start"
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                with self.connect(dbname="postgres") as conn:
                    conn.execute(f"CREATE DATABASE {DATABASE}")
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        return self

    def connect(self, dbname: str = DATABASE, **settings):  # psycopg.Connection
        import psycopg

        return psycopg.connect(
            host="127.0.0.1",
            port=self.port,
            dbname=dbname,
            user=USER,
            password=self.password,
            autocommit=True,
            **settings,
        )

    def execute(self, sql: str, params: tuple = ()) -> list[tuple]:
        """Run one statement; its rows (none for a statement that returns none)."""
        with self.connect() as conn:
            cursor = conn.execute(sql, params)
            return cursor.fetchall() if cursor.description else []

    def stop(self) -> None:
        if self.data.exists() and self.bin is not None:
            with contextlib.suppress(subprocess.CalledProcessError):
                self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)

    def pause(self) -> None:
        """Stop the server (the cluster stays): a database that is down."""
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder} -c fsync=off -c max_connections=50"
        self._run(
            str(self.bin / "pg_ctl"), "-D", str(self.data), "-l", str(self.folder / "log"), "-o", options, "-w", "start"
        )

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m demo.postgres_server", description=__doc__)
    parser.add_argument("--port", type=int, default=5432)
    args = parser.parse_args()
    with PostgresServer(args.port) as server:
        secret = server.folder / "runner-password"
        secret.touch(mode=0o600)
        secret.write_text(server.password + "\n")
        print(f"PostgreSQL on {server.url} (user {USER}, its password in {secret}); Ctrl-C stops it")
        with contextlib.suppress(KeyboardInterrupt):
            signal.pause()


if __name__ == "__main__":
    main()
