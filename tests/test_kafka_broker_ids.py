"""demo/kafka_broker.py's cluster ids: Kafka's format tool takes one as an argument, so none may look like an option."""

from __future__ import annotations

import re
import uuid

from demo import kafka_broker


def test_a_cluster_id_never_begins_with_a_dash_which_the_format_tool_would_read_as_an_option(monkeypatch):
    # the first UUID drawn encodes to "-AAAA...": one in 64 random ones does, and made `make run` fail that often
    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=b"\x10" + bytes(15))])
    monkeypatch.setattr(kafka_broker.uuid, "uuid4", lambda: next(drawn))
    assert kafka_broker._cluster_id() == "EAAAAAAAAAAAAAAAAAAAAA"


def test_cluster_ids_are_kafkas_22_url_safe_characters():
    ids = {kafka_broker._cluster_id() for _ in range(2000)}
    assert len(ids) == 2000 and all(re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", i) for i in ids)
