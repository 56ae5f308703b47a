"""Each connector is one object in two halves: the Spark-free one the control plane decides by
(``runner/core/connectors/``) and the Spark one a job reads and writes with (``jobs/connectors/``).
The halves must agree: the same names, and a Spark builder for every role the core half declares
and none for a role it does not."""

from __future__ import annotations

import pytest

from jobs.connectors import SPARK_CONNECTORS, SparkConnector
from jobs.connectors.base import RoleNotDeclared
from runner.core import connectors, lookup
from runner.core.connectors import CONNECTORS, Connector
from runner.core.connectors import lookups as lookup_options

# Options with which a target of any connector could take changes, when its connector ever takes them.
TAKES_CHANGES = {"format": "debezium-json", "value.format": "debezium-json"}


def overrides(connector: SparkConnector, method: str) -> bool:
    return getattr(type(connector), method) is not getattr(SparkConnector, method)


def test_both_halves_register_the_same_connectors_in_the_same_order():
    assert list(SPARK_CONNECTORS) == list(CONNECTORS)
    assert all(c.name == name for name, c in CONNECTORS.items())


@pytest.mark.parametrize("name", list(CONNECTORS))
def test_the_spark_half_builds_exactly_the_roles_the_core_half_declares(name: str):
    core, spark = CONNECTORS[name], SPARK_CONNECTORS[name]
    assert overrides(spark, "source") == core.stream, "a stream source has a reader, and only one"
    assert overrides(spark, "sink") == core.sink, "a sink has a writer, and only one"
    takes_changes = core.sink and core.changes_refused(TAKES_CHANGES, keyed=True) is None
    assert overrides(spark, "change_sink") == takes_changes, "a sink that takes changes has a writer of them"
    assert overrides(spark, "lookup") == bool(core.lookup_caches), "a lookup table's rows have a reader"
    if not core.stream:  # asked anyway, it is a defect that names the connector, not a stub
        with pytest.raises(RoleNotDeclared, match=f"connector '{name}' has no stream source"):
            spark.source(None, None, None, None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", list(CONNECTORS))
def test_a_connector_that_continues_says_how_in_the_plan(name: str):
    connector = CONNECTORS[name]
    assert bool(connector.continuation) == (connector.continue_by is not None)
    if connector.continue_by is not None:
        assert connector.stream, "only a stream source is continued"


def test_an_unknown_connector_is_named_with_those_there_are():
    assert connectors.find("nope") is None and connectors.find(None) is None
    with pytest.raises(KeyError, match="filesystem, datagen, blackhole, print, kafka, upsert-kafka, jdbc"):
        connectors.named("nope")


def test_every_lookup_option_declares_how_a_change_to_it_is_carried_out():
    assert set(lookup.ON_CHANGE) == lookup_options.OPTIONS


def test_the_defaults_are_a_connector_that_declares_nothing():
    """What a new connector gets without saying otherwise: no role, no format, no changes, no lookups, and a
    new version of a query reading it starts from its startup position."""

    class Nothing(Connector):
        name = "nothing"

    nothing = Nothing()
    assert not (nothing.stream or nothing.sink or nothing.lookup_caches or nothing.formats)
    assert nothing.continue_by is None and nothing.path_option is None
    assert nothing.changelog({}) is None and nothing.lookup_cache({"lookup.cache": "FULL"}) is None
    assert nothing.delivery(keyed=True) == "-"
    found: list[str] = []
    nothing.problems({"connector": "nothing", "path": "/x"}, ["a"], (), lambda code, **params: found.append(code))
    assert found == ["DDL_UNKNOWN_CONNECTOR_OPTION"]
