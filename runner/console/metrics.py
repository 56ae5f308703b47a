"""``/metrics``: the overview's figures in Prometheus' text format, labelled by team, query and version.

A collector reads them when scraped (from ``Overview``, so a scrape and the pages agree and the store is
read at most once a second however many ask). Names follow Prometheus' conventions: a unit suffix,
``_total`` for counts that only grow within a run, one ``sql_runner_query_state`` series per state with
value 1 for the current one (so an alert is ``sql_runner_query_state{state="stalled"} == 1``).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from runner.console.overview import Overview

STATES = ("running", "degraded", "stalled", "failing", "parked", "failed", "stopped", "not running", "removed")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

QUERY_GAUGES = (
    # (name, help, overview field, what it is divided by for the metric's unit)
    ("sql_runner_query_input_rows_per_second", "Input rows per second of the last micro-batch.", "rows_per_second", 1),
    ("sql_runner_query_batch_duration_seconds", "Duration of the last micro-batch.", "batch_ms", 1000),
    (
        "sql_runner_query_last_batch_age_seconds",
        "Seconds since the last micro-batch was committed.",
        "last_batch_age_s",
        1,
    ),
    (
        "sql_runner_query_watermark_delay_seconds",
        "Seconds between the last micro-batch's start and its event-time watermark (no series before the query "
        "has a watermark).",
        "watermark_delay_s",
        1,
    ),
    (
        "sql_runner_query_kafka_offsets_behind",
        "Records the Kafka partition furthest behind is behind its latest offset (maxOffsetsBehindLatest).",
        "kafka_lag",
        1,
    ),
    (
        "sql_runner_query_dead_letters_last_hour",
        "Malformed records set aside in the last hour.",
        "dead_letters_hour",
        1,
    ),
    ("sql_runner_query_restarts", "Restarts of the current run after failures.", "restarts", 1),
)


class QueryCollector(Collector):
    def __init__(self, overview: Overview):
        self.overview = overview

    def collect(self) -> Iterator[Metric]:
        team = self.overview.team
        labels = ["team", "query", "version", "mode"]
        rows = self.overview.rows()
        state = GaugeMetricFamily("sql_runner_query_state", "1 for the query's state.", labels=[*labels, "state"])
        for row in rows:
            for each in STATES:
                shown = [team, row["name"], str(row["version"]), row["mode"], each]
                state.add_metric(shown, float(row["state"] == each))
        yield state
        for name, description, field, divisor in QUERY_GAUGES:
            gauge = GaugeMetricFamily(name, description, labels=labels)
            for row in rows:
                if row[field] is not None:  # no figure: no series, not a made-up zero
                    gauge.add_metric([team, row["name"], str(row["version"]), row["mode"]], row[field] / divisor)
            yield gauge
        deployed = GaugeMetricFamily("sql_runner_queries_deployed", "Queries deployed.", labels=["team"])
        deployed.add_metric([team], float(len(rows)))
        yield deployed
        session = self.overview.session()
        up = GaugeMetricFamily("sql_runner_session_up", "1 while the team's session runs.", labels=["team"])
        up.add_metric([team], float(session is not None and session["state"] == "running"))
        yield up
        if session is not None:
            uptime = GaugeMetricFamily("sql_runner_session_uptime_seconds", "The session's uptime.", labels=["team"])
            uptime.add_metric([team], float(session["uptime_s"]))
            yield uptime
            queries = GaugeMetricFamily(
                "sql_runner_session_queries", "Queries the session hosts, by state.", labels=["team", "state"]
            )
            for each in ("running", "failing", "parked", "stuck_builds"):
                queries.add_metric([team, each], float(session[each]))
            yield queries


def exposition(overview: Overview) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueryCollector(overview))
    return generate_latest(registry)
