"""Every error durable_nb raises, one class per failure mode.

    DurableError
     ├── ConfigurationError       a workflow definition that cannot run
     ├── InvalidInput             bad argument from the caller (also a ValueError)
     │    ├── InvalidState        state or node updates that are not a dict of str keys
     │    ├── InvalidDecision     an approval/rejection that cannot be recorded
     │    ├── IdempotencyKeyReused  a key already used for a run with other input
     │    ├── InvalidNotebookRun    a notebook, run name or parameters run-notebook cannot use
     │    ├── InvalidReplay         a replay that cannot be made (unknown cell, changed type, empty sweep)
     │    └── AmbiguousRunId        a shortened run id that matches several runs (also a LookupError)
     ├── RunNotFound              no run with that id (also a LookupError)
     ├── UnknownGate              no gate waits at that node (also a LookupError)
     ├── WorkflowNotFound         a service serves no workflow of that name
     ├── CheckpointNotFound       no checkpoint with that id in that run
     ├── AlreadyResumed           someone else already decided / resumed / completed it
     ├── NotResumable             the run is in a state resume cannot continue from
     ├── NotCancellable           the run already finished
     ├── RunOwnedElsewhere        a live process owns the run
     ├── RunCancelled             the run was cancelled while this process worked on it
     ├── WorkflowMismatch         resuming a run with a workflow that does not fit it
     ├── NoActiveNode             gate()/interrupt() called outside a durable node
     ├── GatePending              a notebook cell paused at a gate, waiting for a decision
     ├── AgentFailed              an agent's loop cannot go on (too many turns, an unreadable reply)
     ├── NodeFailed               a node failed after its retries
     │    └── NodeTimeout         an attempt overran timeout_seconds
     ├── KeyFileError             the signing key file is unsafe, empty or unreadable
     └── StoreError               the store cannot do what was asked
          ├── StoreUnavailable    bad URL, missing driver, unreachable database
          │    └── StoreNotFound  no store at the URL, and the call only reads (it creates none)
          ├── StoreFailed         an operation failed: disk full, read-only, I/O error, lost connection
          ├── SchemaMismatch      the store was written by a newer durable_nb
          ├── SerializationError  a value cannot be serialized
          └── TamperedValueError  a stored value failed its signature check

Errors are stored in checkpoints and cross process boundaries, so each one pickles
with its arguments intact.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentFailed",
    "AlreadyResumed",
    "AmbiguousRunId",
    "CheckpointNotFound",
    "ConfigurationError",
    "DurableError",
    "GatePending",
    "IdempotencyKeyReused",
    "InvalidDecision",
    "InvalidInput",
    "InvalidNotebookRun",
    "InvalidReplay",
    "InvalidState",
    "KeyFileError",
    "NoActiveNode",
    "NodeFailed",
    "NodeTimeout",
    "NotCancellable",
    "NotResumable",
    "OutputInUse",
    "RunCancelled",
    "RunNotFound",
    "RunOwnedElsewhere",
    "SchemaMismatch",
    "SerializationError",
    "StoreError",
    "StoreFailed",
    "StoreNotFound",
    "StoreUnavailable",
    "TamperedValueError",
    "UnknownGate",
    "WorkflowMismatch",
    "WorkflowNotFound",
]


class DurableError(Exception):
    """Base class of every durable_nb error."""

    def __reduce__(self) -> tuple[Any, ...]:
        # Subclasses with keyword fields keep them in __dict__; restore both.
        return (_rebuild, (type(self), self.args, self.__dict__))


def _rebuild(cls: type[DurableError], args: tuple[Any, ...], state: dict[str, Any]) -> DurableError:
    # cls.__new__, not Exception.__new__: an error that is also an OSError needs its own.
    error = cls.__new__(cls, *args)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ConfigurationError(DurableError):
    """A workflow definition that cannot run (unknown dependency, cycle, duplicate node)."""


class InvalidInput(DurableError, ValueError):
    """An argument from the caller that durable_nb cannot accept."""


class InvalidState(InvalidInput, TypeError):
    """Run input or node updates that are not a dict with string keys."""


class InvalidDecision(InvalidInput):
    """An approval or rejection whose fields cannot be recorded."""


class IdempotencyKeyReused(InvalidInput):
    """An idempotency key already names a run started with other input; nothing was started."""


class InvalidNotebookRun(InvalidInput):
    """A notebook path, run name or parameters a headless run cannot use: refused before any kernel starts."""


class InvalidReplay(InvalidInput):
    """A replay that cannot be made: an unknown cell, a value of another type, an empty sweep, no cells."""


class AmbiguousRunId(InvalidInput, LookupError):
    """A shortened run id matches more than one run."""


class RunNotFound(DurableError, LookupError):
    """No run with the given id exists in the store."""

    def __init__(self, run_id: str, store: str = "") -> None:
        where = f" in {store}" if store else ""
        super().__init__(
            f"No run with id {run_id!r}{where}. List runs with durable_nb.runs() "
            "or `durable-nb runs`, and check the store URL."
        )
        self.run_id = run_id


class UnknownGate(DurableError, LookupError):
    """A decision names a node at which the run has no gate waiting; nothing was decided."""


class WorkflowNotFound(DurableError, LookupError):
    """The service serves no workflow of that name."""


class CheckpointNotFound(DurableError, LookupError):
    """No checkpoint with the given id exists in the run."""

    def __init__(self, checkpoint_id: str, run_id: str) -> None:
        super().__init__(
            f"Run {run_id!r} has no checkpoint {checkpoint_id!r}. List its checkpoints with durable_nb.history(run_id)."
        )
        self.checkpoint_id = checkpoint_id
        self.run_id = run_id


class AlreadyResumed(DurableError):
    """The run was already resumed, decided or completed by someone else."""


class NotResumable(DurableError):
    """The run's status does not allow resume (e.g. it is paused at a gate)."""


class NotCancellable(DurableError):
    """The run has already finished and cannot be cancelled."""


class RunOwnedElsewhere(DurableError):
    """A live process owns the run; it is never taken over."""


class OutputInUse(RunOwnedElsewhere):
    """Another live process writes the same output notebook; nothing was started."""


class RunCancelled(DurableError):
    """The run was cancelled while this process was working on it."""


class WorkflowMismatch(DurableError):
    """The run does not belong to this workflow, or names nodes it does not have."""


class NoActiveNode(DurableError, RuntimeError):
    """gate(), interrupt() or a run-scoped call made outside a durable node."""


class GatePending(DurableError):
    """A notebook cell paused at a gate: Run All stops here, without a traceback."""

    def __init__(self, message: str, *, run_id: str = "", node_id: str = "") -> None:
        super().__init__(message)
        self.run_id = run_id
        self.node_id = node_id


class AgentFailed(DurableError):
    """An agent's loop cannot go on: it ran out of turns, or a model reply cannot be read."""


class NodeFailed(DurableError):
    """A node failed after all its attempts."""

    def __init__(
        self,
        message: str,
        *,
        node_id: str = "",
        error_type: str = "",
        traceback: str = "",
    ) -> None:
        super().__init__(message)
        self.node_id = node_id
        self.error_type = error_type
        self.traceback = traceback


class NodeTimeout(NodeFailed):
    """An attempt of a node ran longer than its timeout_seconds."""


class KeyFileError(DurableError, PermissionError):
    """The key file that signs stored values is unsafe (readable by others, a symlink), empty,
    or cannot be read or created."""


class StoreError(DurableError):
    """The store cannot do what was asked."""


class StoreUnavailable(StoreError):
    """The store URL is malformed, its driver is missing or the database is unreachable."""


class StoreNotFound(StoreUnavailable):
    """No durable_nb store exists at the URL, and the call only reads (it never creates one)."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(
            f"No durable_nb store at {where} ({why}); nothing was created. Check the store URL (--store, "
            "$DURABLE_NB_STORE or store=), or start a run with that URL to create the store."
        )
        self.store = where


class StoreFailed(StoreError):
    """A store operation failed (disk full, read-only file, I/O error, connection lost past its
    retries); the driver's exception is chained. Nothing half-written is kept."""

    def __init__(self, message: str, *, store: str = "", operation: str = "") -> None:
        super().__init__(message)
        self.store = store
        self.operation = operation


class SchemaMismatch(StoreError):
    """The store's schema was written by a newer durable_nb than this one."""


class SerializationError(StoreError):
    """A value cannot be serialized; nothing of the commit was written."""

    def __init__(self, message: str, *, name: str = "", type_name: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.type_name = type_name


class TamperedValueError(StoreError):
    """A stored value's signature does not verify; it was not loaded."""
