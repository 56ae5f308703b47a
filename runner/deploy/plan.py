"""The deploy decision: ``plan(desired, deployed, observed) -> actions``, with no I/O.

Per manifest (docs/deployments.md)::

    new job (nothing deployed)              -> start with clean state, version 1
    running, config unchanged               -> nothing
    running, only fields the job does not   -> update: record the change, the job keeps running
      use changed (retention, on-query-change)
    running, config changed                 -> stop with a savepoint, then
        query changed, state incompatible   ->   start clean, version + 1
        otherwise                           ->   start from that savepoint (same version)
    not running, config changed             -> query changed incompatibly ? start clean, version + 1
                                                                          : restore the latest state
    not running, Spark refused the restored -> start clean, version + 1 (restoring again would fail
      state when the version last started       the same way)
    restarting (stopped, or to be stopped)  -> start clean, version + 1 (this release's job would
      from state whose recorded layout this     refuse it: a changelog query's incremental state kept
      release does not read                     as a later release keeps it)
    not running, config unchanged           -> restore the latest state (newest savepoint or checkpoint)
                                               none found -> error, nothing started
    manifest deleted                        -> stop with a savepoint, mark removed, keep state

How a change to each manifest field is carried out is declared on the field
(``x-on-change`` in ``runner/core/manifest.py``): ``none`` fields are recorded without a
restart, ``restart`` fields restart with the state, ``new-version`` fields (the target)
start a new version, and the query's fields are judged by Spark.

"Query changed" is judged by Spark (:class:`QueryDiff`, computed before planning): an
edit that keeps the meaning and the output columns is no change, and a change Spark can
restart across (e.g. a new filter in a stateless query) keeps the state. A version is one
line of state: it changes only when the state is discarded. When it is, the new version
continues where the previous one stopped (``on-query-change: continue``, the default) or
re-reads from each source's startup position (``reprocess``); the plan says which, per
source.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from runner.core import connectors
from runner.core.connectors import ContinueBy
from runner.core.manifest import Manifest, OnChange, on_change
from runner.core.protocol.planned import PlannedAction, SourceStart
from runner.core.querydiff import QueryDiff
from runner.core.reasons import Reason, rendered
from runner.core.starts import SourceTable
from runner.core.stateref import StateRef

ActionKind = Literal["nothing", "update", "start", "restore", "remove", "error"]


@dataclass(frozen=True)
class DesiredQuery:
    """The desired manifest's query as the plan sees it (the desired manifests' folder or bucket is
    ``runner/state/desired.py``)."""

    manifest: Manifest  # merged over the template, without meta
    sources: tuple[SourceTable, ...]
    diff: QueryDiff | None = None  # against the deployed query; None when nothing is deployed


@dataclass(frozen=True)
class Deployed:
    manifest: Manifest  # as deployed: merged, with meta
    sources: tuple[SourceTable, ...]
    removed: bool = False
    continued_from: StateRef | None = None  # where this version's sources were told to start

    @property
    def version(self) -> int:
        assert self.manifest.meta is not None
        return self.manifest.meta.query_version


@dataclass(frozen=True)
class Observed:
    running: bool = False
    running_version: int | None = None
    savepoints: tuple[StateRef, ...] = ()  # of the deployed version
    checkpoints: tuple[StateRef, ...] = ()  # of the deployed version, runs Spark has written to
    ever_ran: bool = False  # the deployed version reported progress at least once
    refused: str | None = None  # why Spark refused the restored state when the deployed run last started
    unreadable: str | None = None  # why this release cannot read the state a restore would start from (its record)
    ended: str | None = None  # how its last application ended, when its target says (YARN)


@dataclass(frozen=True)
class Action:
    name: str
    kind: ActionKind
    reasons: tuple[Reason, ...]
    version: int | None = None  # the version that will run (or runs)
    stop: bool = False  # stop the running job first, with a savepoint
    restore_from: StateRef | None = None  # restore: the state to start from
    continue_from: StateRef | None = None  # start after a change: the previous version's final state
    fresh_because: str = "query changed"  # start of a version after the first: why its state is clean
    sources: tuple[SourceStart, ...] = field(default_factory=tuple)

    def planned(self) -> PlannedAction:
        """The decision as ``plan --json``, the console and the history describe it."""
        return PlannedAction(
            name=self.name,
            decision=self.kind,
            summary=self.summary,
            version=self.version,
            reasons=list(self.reasons),
            sources=list(self.sources),
        )

    @property
    def summary(self) -> str:
        if self.kind == "nothing":
            return "no change"
        if self.kind == "update":
            return "record the change; the running job keeps running (no restart needed)"
        if self.kind == "start":
            fresh = "clean state" if self.version == 1 else f"clean state ({self.fresh_because})"
            return ("stop with savepoint, then " if self.stop else "") + f"start v{self.version} with {fresh}"
        if self.kind == "restore":
            assert self.restore_from is not None
            return (
                "stop with savepoint, then " if self.stop else ""
            ) + f"restore v{self.version} from {self.restore_from.describe()}"
        if self.kind == "remove":
            return ("stop with savepoint, " if self.stop else "") + "mark removed (state kept)"
        return "error: " + "; ".join(rendered(self.reasons))


def changed_fields(desired: Manifest, deployed: Manifest, how: OnChange) -> list[str]:
    """The manifest fields whose change is carried out ``how`` that differ, in name order."""
    wanted, current = desired.to_dict(), deployed.to_dict()
    fields = [key for key, declared in on_change().items() if declared == how]
    return sorted(key for key in fields if wanted.get(key) != current.get(key))


def latest_state(observed: Observed) -> StateRef | None:
    """Newest savepoint or checkpoint; on a tie the checkpoint (it needs no copy)."""
    candidates = [*observed.savepoints, *observed.checkpoints]
    if not candidates:
        return None
    order = {"savepoint": 0, "checkpoint": 1}
    return max(candidates, key=lambda ref: (ref.created or datetime.min, order.get(ref.kind, 0)))


def _sources_start(
    desired: DesiredQuery, deployed: Deployed | None, continue_from: StateRef | None, policy: str
) -> tuple[SourceStart, ...]:
    previous = {s.table for s in deployed.sources} if deployed else set()
    starts = []
    for source in desired.sources:
        connector = connectors.named(source.connector)
        if connector.continue_by is ContinueBy.GENERATING:
            starts.append(SourceStart(table=source.table, how="generated", detail=connector.continuation))
        elif continue_from is not None and source.table in previous and connector.continue_by is not None:
            detail = connector.continuation.format(version=continue_from.version)
            starts.append(SourceStart(table=source.table, how="continue", detail=detail))
        else:
            why = (
                "new source"
                if deployed and source.table not in previous
                else "on-query-change: reprocess"
                if policy == "reprocess" and deployed
                else "it cannot continue"
                if continue_from is not None
                else "no earlier state"
                if deployed
                else "first version"
            )
            starts.append(
                SourceStart(table=source.table, how="startup-position", detail=f"from its startup position ({why})")
            )
    return tuple(starts)


def plan_one(name: str, desired: DesiredQuery | None, deployed: Deployed | None, observed: Observed) -> Action:
    """The decision for one manifest."""
    running = observed.running
    if desired is None:
        if deployed is None or (deployed.removed and not running):
            return Action(name, "nothing", (Reason.of("NOT_DEPLOYED"),))
        if running:
            return Action(name, "remove", (Reason.of("MANIFEST_DELETED_RUNNING"),), version=deployed.version, stop=True)
        return Action(name, "remove", (Reason.of("MANIFEST_DELETED_STOPPED"),), version=deployed.version)

    if deployed is None:
        return Action(
            name,
            "start",
            (Reason.of("NEW_JOB"),),
            version=1,
            sources=_sources_start(desired, None, None, desired.manifest.on_query_change),
        )

    diff = desired.diff or QueryDiff(changed=False, state_compatible=True)
    changed_keys = changed_fields(desired.manifest, deployed.manifest, "restart")
    recorded_keys = changed_fields(desired.manifest, deployed.manifest, "none")
    new_version_keys = changed_fields(desired.manifest, deployed.manifest, "new-version")
    query_incompatible = diff.changed and not diff.state_compatible
    config_changed = bool(changed_keys)
    reasons: list[Reason] = []
    if running and observed.running_version not in (None, deployed.version):
        reasons.append(
            Reason.of("OTHER_VERSION_RUNNING", running=observed.running_version or 0, deployed=deployed.version)
        )
    if deployed.removed:
        reasons.append(Reason.of("REDEPLOY_REMOVED"))
    if diff.changed:
        reasons.extend(diff.reasons)
    elif desired.manifest.sql != deployed.manifest.sql or desired.manifest.code != deployed.manifest.code:
        reasons.append(Reason.of("LAYOUT_ONLY"))
    if config_changed:
        reasons.append(Reason.of("CONFIG_CHANGED", fields=changed_keys))
    if recorded_keys:
        reasons.append(Reason.of("CHANGED_WITHOUT_RESTART", fields=recorded_keys))
    if new_version_keys:
        reasons.append(Reason.of("NEW_VERSION_FIELDS", fields=new_version_keys))
    refused = observed.refused if not running and not deployed.removed else None
    if refused and not (query_incompatible or new_version_keys):
        reasons.append(Reason.of("RESTORE_REFUSED", version=deployed.version, refusal=refused))
    # a job left running as it is keeps its state; any other decision below starts from that state
    restarts = not running or deployed.removed or diff.changed or config_changed
    unreadable = observed.unreadable if restarts else None
    if unreadable and not (query_incompatible or new_version_keys or refused):
        reasons.append(Reason.of("STATE_UNREADABLE", version=deployed.version, why=unreadable))

    if query_incompatible or new_version_keys or refused or unreadable:
        version = deployed.version + 1
        policy = desired.manifest.on_query_change
        if policy == "continue" and any(s.changelog for s in desired.sources):
            policy = "reprocess"
            reasons.append(Reason.of("CHANGELOG_REREAD", version=deployed.version))
        stop_savepoint = StateRef(kind="stop-savepoint", version=deployed.version)
        previous_state = stop_savepoint if running else latest_state(observed)
        continue_from = previous_state if policy == "continue" else None
        reasons.append(Reason.of("STATE_NOT_CARRIED", version=deployed.version, next=version))
        if policy == "continue" and previous_state is None:
            reasons.append(Reason.of("NOTHING_TO_CONTINUE", version=deployed.version))
        if continue_from is not None and diff.held_state:
            reasons.append(Reason.of("HELD_ROWS_LOST", version=deployed.version))
        return Action(
            name,
            "start",
            tuple(reasons),
            version=version,
            stop=running,
            continue_from=continue_from,
            sources=_sources_start(desired, deployed, continue_from, policy),
            fresh_because=(
                "query changed"
                if query_incompatible or new_version_keys
                else "restore refused"
                if refused
                else "state unreadable"
            ),
        )

    if running and not deployed.removed and not diff.changed and not config_changed:
        if recorded_keys:
            return Action(name, "update", tuple(reasons), version=deployed.version)
        return Action(name, "nothing", tuple(reasons) or (Reason.of("RUNNING_UNCHANGED"),), version=deployed.version)

    if diff.changed:
        reasons.append(Reason.of("STATE_CARRIES_OVER"))
    if running:
        return Action(
            name,
            "restore",
            tuple(reasons),
            version=deployed.version,
            stop=True,
            restore_from=StateRef(kind="stop-savepoint", version=deployed.version),
        )
    latest = latest_state(observed)
    if latest is not None:
        reasons.append(Reason.of("NOT_RUNNING" if not (diff.changed or config_changed) else "NOT_RUNNING_RESTORING"))
        if observed.ended is not None:
            reasons.append(Reason.of("APPLICATION_ENDED", how=observed.ended))
        return Action(name, "restore", tuple(reasons), version=deployed.version, restore_from=latest)
    if not observed.ever_ran:
        # The version was decided but never got going (e.g. the runner stopped half-way):
        # nothing was processed, so its recorded start is still the right one.
        reasons.append(Reason.of("NEVER_STARTED", version=deployed.version))
        return Action(
            name,
            "start",
            tuple(reasons),
            version=deployed.version,
            continue_from=deployed.continued_from,
            sources=_sources_start(
                desired,
                deployed if deployed.continued_from else None,
                deployed.continued_from,
                desired.manifest.on_query_change,
            ),
        )
    reasons.append(Reason.of("NO_STATE_FOUND", version=deployed.version))
    return Action(name, "error", tuple(reasons), version=deployed.version)


def plan(
    desired: dict[str, DesiredQuery], deployed: dict[str, Deployed], observed: dict[str, Observed]
) -> list[Action]:
    """One action per manifest that is desired or deployed, in name order."""
    names = sorted(set(desired) | set(deployed))
    return [plan_one(n, desired.get(n), deployed.get(n), observed.get(n, Observed())) for n in names]
