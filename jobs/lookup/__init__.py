"""Lookup tables in a running query: snapshots of reference data, reloaded while the query runs.

A query joins a stream with a lookup table (``runner/core/lookup.py``) as Spark joins a stream with
a static table, but the static side is never read by the micro-batch itself. The query's plan holds
a *marker* in its place: an empty relation of the table's columns (``rule.marker``). Every plan
Spark optimises, each micro-batch's included, passes through one optimizer rule (``rule.py``) that
puts the table's current snapshot where the marker is: rows loaded once per reload interval and
held cached on the executors (``load.py``), joined by broadcast. A reload (``refresh.py``) loads a
new snapshot beside the old one and swaps them between two micro-batches: a batch sees one
snapshot whole, never half of two, and never an empty stand-in.
"""
