"""``blackhole``: a target whose rows are all computed, then discarded (what Spark's noop sink does)."""

from __future__ import annotations

from runner.core.connectors.base import Connector


class Blackhole(Connector):
    name = "blackhole"
    sink = True
