"""Before a Kafka source or sink starts: can its client settings reach its brokers at all?

Two mistakes make Kafka's client wait without saying why: a TLS client (``SSL``/``SASL_SSL``, as
MSK's IAM port wants) talking to a plaintext listener, or a plaintext client talking to a TLS one.
The client only logs that the connection was closed "during authentication" and retries until its
API timeout, so Spark's source would fail minutes later with a timeout that names nothing. Here the
driver checks first, in about a millisecond when all is well:

1. the client settings build a Kafka client, so every class they name (MSK's IAM login module and
   callback handler, from the jar set) loads: a missing one is ``KAFKA_CLIENT_CLASS_MISSING``;
2. the first bootstrap server that accepts a connection speaks the table's protocol: a TLS
   handshake for ``SSL``/``SASL_SSL``, Kafka's ApiVersions request in plaintext otherwise. A broker
   that does not is ``KAFKA_PROTOCOL_MISMATCH``, naming it and what it answered.

A broker that cannot be reached at all is not judged here: that may pass, and Spark's connector and
the restart strategy deal with it.
"""

from __future__ import annotations

import contextlib
import re
import socket
import ssl
import struct
import time
from collections.abc import Mapping

from pyspark.sql import SparkSession

from jobs.jvm import java_class, jvm_of
from runner.core import jars
from runner.core.errors import UserError
from runner.core.tables import TableDef

TLS_PROTOCOLS = ("SSL", "SASL_SSL")
CONNECT_SECONDS = 5.0
ATTEMPTS = 3  # a broker that is restarting may drop one connection; a mismatch answers the same each time


# How the Kafka client says a class its settings name is not on the classpath.
_MISSING_CLASS = ("ClassNotFoundException", "could not be found", "No LoginModule found")


class _Mismatch(Exception):
    """The broker answered, but not in the protocol the client settings ask for."""


def brokers(options: Mapping[str, str]) -> list[tuple[str, int]]:
    """``host:port`` pairs of ``properties.bootstrap.servers`` (IPv6 hosts in brackets)."""
    found = []
    for entry in options.get("properties.bootstrap.servers", "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        host, _, port = entry.rpartition(":")
        if host and port.isdigit():
            found.append((host.strip("[]"), int(port)))
    return found


def _api_versions_request() -> bytes:
    """Kafka's ApiVersions request, version 0 (every broker answers it before any authentication)."""
    client = b"sql-runner-check"
    body = struct.pack(">hhih", 18, 0, 7, len(client)) + client
    return struct.pack(">i", len(body)) + body


def _speaks_plaintext(connection: socket.socket) -> None:
    connection.sendall(_api_versions_request())
    header = b""
    while len(header) < 8:
        chunk = connection.recv(8 - len(header))
        if not chunk:
            break
        header += chunk
    if header[:2] == b"\x15\x03":  # a TLS alert record (the whole record is 7 bytes)
        raise _Mismatch("it answered with a TLS alert: it is a TLS listener")
    if len(header) < 8:
        raise _Mismatch("it closed the connection instead of answering Kafka's ApiVersions request")
    size, correlation = struct.unpack(">ii", header)
    if correlation != 7 or not 0 < size < 1 << 20:
        raise _Mismatch("its answer is not a Kafka response")


def _speaks_tls(connection: socket.socket, host: str) -> None:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only whether it speaks TLS; Kafka's client verifies the certificate
    try:
        with context.wrap_socket(connection, server_hostname=host):
            pass
    except (ssl.SSLError, ConnectionError, OSError) as error:
        reason = getattr(error, "reason", None) or str(error) or type(error).__name__
        raise _Mismatch(f"it did not complete a TLS handshake ({reason})") from None


REACHED, UNREACHABLE = "reached", "unreachable"


def probe(host: str, port: int, protocol: str) -> str:
    """``REACHED`` when ``host:port`` speaks ``protocol``, ``UNREACHABLE`` when it takes no connection, else
    what it did instead."""
    mismatch = UNREACHABLE
    for attempt in range(ATTEMPTS):
        try:
            with socket.create_connection((host, port), timeout=CONNECT_SECONDS) as connection:
                connection.settimeout(CONNECT_SECONDS)
                if protocol in TLS_PROTOCOLS:
                    _speaks_tls(connection, host)
                else:
                    _speaks_plaintext(connection)
            return REACHED
        except _Mismatch as error:
            mismatch = str(error)
        except OSError:
            return UNREACHABLE  # not a question of settings: the connector and the restart strategy deal with it
        if attempt + 1 < ATTEMPTS:
            time.sleep(1.0)
    return mismatch


_CLASS_NAME = re.compile(r"(?:[A-Za-z_$][\w$]*\.)+[A-Z][\w$]*")


def _names_classes(options: Mapping[str, str]) -> bool:
    """The client settings name classes of their own (a JAAS login module, a callback handler, ...)."""
    return any(key == "properties.sasl.jaas.config" or key.endswith(".class") for key in options)


def _client_classes(spark: SparkSession, table: TableDef, options: Mapping[str, str]) -> None:
    """Build (and close) a Kafka admin client with the table's client settings: every class they name loads."""
    if not _names_classes(options):
        return
    jvm = jvm_of(spark)
    properties = java_class(jvm, "java.util.Properties")()
    for key, value in options.items():
        if key.startswith("properties."):
            properties.put(key[len("properties.") :], value)
    properties.put("bootstrap.servers", options.get("properties.bootstrap.servers", ""))
    try:
        admin = java_class(jvm, "org.apache.kafka.clients.admin.Admin").create(properties)
    except Exception as error:  # noqa: BLE001 - py4j wraps the client's KafkaException
        text = str(error)
        line = next((line for line in text.splitlines() if any(m in line for m in _MISSING_CLASS)), None)
        if line is None:
            raise
        names = [name for name in _CLASS_NAME.findall(line) if not name.startswith(("java.", "javax.", "org.apache."))]
        raise UserError.of(
            "KAFKA_CLIENT_CLASS_MISSING",
            file=table.file,
            line=table.line,
            table=table.name,
            detail=names[-1] if names else "a class its properties.* name",
            fetch=jars.FETCH_COMMAND,
            jars=jars.summary("msk-iam"),
        ) from None
    with contextlib.suppress(Exception):
        admin.close(java_class(jvm, "java.time.Duration").ZERO)


def check(spark: SparkSession, table: TableDef, options: Mapping[str, str]) -> None:
    """Raise a clear error when the table's Kafka client settings cannot work with its brokers."""
    _client_classes(spark, table, options)
    protocol = options.get("properties.security.protocol", "PLAINTEXT").upper()
    for host, port in brokers(options):
        why = probe(host, port, protocol)
        if why == REACHED:
            return
        if why != UNREACHABLE:
            raise UserError.of(
                "KAFKA_PROTOCOL_MISMATCH",
                file=table.file,
                line=table.line,
                table=table.name,
                broker=f"{host}:{port}",
                protocol=protocol,
                reason=why,
            )
