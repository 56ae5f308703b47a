"""moto's server on loopback, for the runner's and the jobs' own processes to reach as AWS (tests and bench/)."""

from __future__ import annotations

import logging
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from unittest import mock

from moto.server import ThreadedMotoServer

from infra.localaws import answer_continue_once
from tests import tiers


class MotoServer:
    """moto's server on a free port of 127.0.0.1. Its buckets live in this process, so the server can be
    stopped for a while (an S3 outage, as its clients see it) and started again on the same port with them."""

    def __init__(self, region: str = "us-east-1"):
        tiers.require("s3", "moto's server")
        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # it logs every request
        answer_continue_once()  # S3A's uploads of local files (RocksDB's state) expect one 100 Continue
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, self.port = self.server.get_host_and_port()
        self.env = {
            "AWS_ENDPOINT_URL": f"http://{host}:{self.port}",
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": region,
        }
        # moto's backends live in this process, across servers and in-process mocks: start from none
        urllib.request.urlopen(urllib.request.Request(f"{self.env['AWS_ENDPOINT_URL']}/moto-api/reset", method="POST"))

    def stop(self) -> None:
        self.server.stop()

    def start_again(self) -> None:
        """Serve again on the same port, with the buckets as they were."""
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()


@contextmanager
def moto_server(region: str = "us-east-1") -> Iterator[dict[str, str]]:
    """Start moto's server on a free port; yields the environment that points boto3 at it (fake credentials)."""
    with moto(region) as server:
        yield server.env


@contextmanager
def moto(region: str = "us-east-1") -> Iterator[MotoServer]:
    """moto's server for the duration of the block."""
    server = MotoServer(region)
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def atomic_conditional_writes() -> Iterator[None]:
    """A named fake for S3's atomic conditional writes, in moto's in-process mock and its server alike.

    Real S3 decides ``If-None-Match: *`` and ``If-Match`` atomically; moto checks the key and then
    stores (or deletes) it in two steps, so racing writers can both get past the check (a lease
    taken twice). One lock around moto's PUT and DELETE handlers gives them S3's guarantee."""
    from moto.s3.responses import S3Response

    guard = threading.Lock()

    def serialised(handler):
        def handle(self):
            with guard:
                return handler(self)

        return handle

    with ExitStack() as patches:
        for name in ("put_object", "delete_object"):
            patches.enter_context(mock.patch.object(S3Response, name, serialised(getattr(S3Response, name))))
        yield
