"""moto's server on loopback, for the runner's and the jobs' own processes to reach as AWS (tests and bench/)."""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer


@contextmanager
def moto_server(region: str = "us-east-1") -> Iterator[dict[str, str]]:
    """Start moto's server on a free port; yields the environment that points boto3 at it (fake credentials)."""
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # it logs every request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": region,
    }
    # moto's backends live in this process, across servers and in-process mocks: start from none
    urllib.request.urlopen(urllib.request.Request(f"{env['AWS_ENDPOINT_URL']}/moto-api/reset", method="POST"))
    try:
        yield env
    finally:
        server.stop()
