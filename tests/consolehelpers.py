"""``sql-runner console`` as its own process, and calls to its HTTP API as a bearer client makes them."""

from __future__ import annotations

import json
import queue
import re
import subprocess
import threading
import urllib.error
import urllib.request
from pathlib import Path

from tests.clihelpers import SQL_RUNNER, cli_env


class ConsoleProcess:
    """``sql-runner console`` as its own process; its address is the first line it prints."""

    def __init__(self, author: Path, state: Path, *options: str):
        self.process = subprocess.Popen(
            [SQL_RUNNER, "console", "--port", "0", "--project", str(author), "--state", str(state), *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=cli_env(),
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(line) for line in self.process.stdout], daemon=True).start()
        first = lines.get(timeout=60)
        match = re.search(r"console on (http://127\.0\.0\.1:\d+)/", first)
        assert match, first
        self.url = match.group(1)
        self.output = lines

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def call(url: str, token: str | None = None, *, method: str = "GET", body: dict | None = None, scheme="Bearer"):
    """(status, headers, body text) of one request."""
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"{scheme} {token}"
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    request = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()
