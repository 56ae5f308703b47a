"""What carrying out a decision takes: ``steps(action) -> steps``, with no I/O.

The plan (``runner/deploy/plan.py``) says *what* should happen to a job; this says in
which order the store and the target are touched to get there. The order is what makes a
runner that dies half-way safe: the job is stopped and its savepoint taken before the
deployed record changes, and the record is written before the new job starts (a version
recorded but never started is started as planned by the next deploy).

    error     refuse (nothing is touched)
    nothing   -
    update    rewrite the record (same version and run), apply retention
    remove    [stop with savepoint], mark removed
    restore   [stop with savepoint], restore the savepoint into a new run folder
              (or resume a checkpoint run folder), write the record, start, apply retention
    start     [stop with savepoint], a new run folder (sources continue from the previous
              version's final state, or start at their startup position), write the record,
              start, apply retention
"""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.reasons import Reason
from runner.core.stateref import StateRef
from runner.deploy.plan import Action


@dataclass(frozen=True)
class Refuse:
    """The plan found no state to restore: raise, touching nothing."""

    reasons: tuple[Reason, ...]


@dataclass(frozen=True)
class StopWithSavepoint:
    """Stop the running job at a micro-batch boundary (kill after the timeout) and snapshot its checkpoint."""


@dataclass(frozen=True)
class MarkRemoved:
    """Keep the deployed record and the state, marked removed."""


@dataclass(frozen=True)
class RecordUpdate:
    """Rewrite the deployed record with the desired manifest; version, run and job stay."""


@dataclass(frozen=True)
class RestoreSavepoint:
    """Copy a savepoint into a new run folder (``stop-savepoint``: the one the stop step took)."""

    ref: StateRef


@dataclass(frozen=True)
class ResumeCheckpoint:
    """Run on in an existing checkpoint run folder."""

    ref: StateRef


@dataclass(frozen=True)
class FreshCheckpoint:
    """A new, empty run folder; ``continue_from``: the previous version's state the sources continue after."""

    continue_from: StateRef | None


@dataclass(frozen=True)
class WriteRecord:
    """Write the deployed record for the run about to start (conditional on the record read when deciding)."""


@dataclass(frozen=True)
class StartJob:
    """Hand the job to the target."""


@dataclass(frozen=True)
class ApplyRetention:
    """Delete the version's savepoints and run folders beyond its retention."""


Step = (
    Refuse
    | StopWithSavepoint
    | MarkRemoved
    | RecordUpdate
    | RestoreSavepoint
    | ResumeCheckpoint
    | FreshCheckpoint
    | WriteRecord
    | StartJob
    | ApplyRetention
)


def steps(action: Action) -> tuple[Step, ...]:
    """The steps that carry ``action`` out, in order."""
    if action.kind == "error":
        return (Refuse(action.reasons),)
    if action.kind == "nothing":
        return ()
    if action.kind == "update":
        return (RecordUpdate(), ApplyRetention())
    stop: tuple[Step, ...] = (StopWithSavepoint(),) if action.stop else ()
    if action.kind == "remove":
        return (*stop, MarkRemoved())
    state: Step
    if action.kind == "restore":
        ref = action.restore_from
        assert ref is not None, "a restore names its state"
        state = ResumeCheckpoint(ref) if ref.kind == "checkpoint" else RestoreSavepoint(ref)
    else:
        state = FreshCheckpoint(action.continue_from)
    return (*stop, state, WriteRecord(), StartJob(), ApplyRetention())
