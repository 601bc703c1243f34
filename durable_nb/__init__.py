"""durable_nb: durable notebooks and workflows.

Every finished node commits a checkpoint; a crash loses at most the node in flight; gates
wait for a person's decision without a live process; any checkpoint can be forked.
"""

from ._loop import run_blocking as _run_blocking
from .engine.agents import AgentResult, Tool, aagent, afork_agent, agent, fork_agent, tool, worker
from .engine.execution.idempotent import idempotent
from .engine.execution.item_map import amap_items, map_items
from .engine.gates.gate import Resume, gate, interrupt
from .engine.runs.calls import (
    aapprove,
    acancel,
    afork,
    aget_run,
    approve,
    aprune,
    areject,
    astatus,
    cancel,
    fork,
    get_run,
    prune,
    reject,
    status,
)
from .engine.runs.recovery import RecoveryReport, arecover, recover
from .engine.runs.run import Run
from .engine.workflows.workflow import Workflow
from .errors import (
    AgentFailed,
    AlreadyResumed,
    AmbiguousRunId,
    CheckpointNotFound,
    ConfigurationError,
    DurableError,
    GatePending,
    IdempotencyKeyReused,
    InvalidDecision,
    InvalidInput,
    InvalidNotebookRun,
    InvalidState,
    KeyFileError,
    NoActiveNode,
    NodeFailed,
    NodeTimeout,
    NotCancellable,
    NotResumable,
    RunCancelled,
    RunNotFound,
    RunOwnedElsewhere,
    SchemaMismatch,
    SerializationError,
    StoreError,
    StoreFailed,
    StoreNotFound,
    StoreUnavailable,
    TamperedValueError,
    UnknownGate,
    WorkflowMismatch,
    WorkflowNotFound,
)
from .model import Decision, EventType, PruneReport, RunStatus
from .service import Client
from .store import Store, connect
from .store.offload import use_offload as _use_offload
from .views import acompare, aevents, aforks, ahistory, aruns, compare, events, forks, history, runs

__version__ = "0.1.0"

# The sync driver decides where the stores' blocking work runs (the store does not know it).
_use_offload(_run_blocking)


def inspect(run: object = None, *, store: object = None) -> object:
    """Return the fork inspector for a run or a LangGraph config (default: this kernel's run, else the latest)."""
    from ._loop import run_sync
    from .views.threads import find_thread, is_thread_config
    from .widgets.inspector import Inspector

    session = None
    try:
        from IPython import get_ipython

        shell = get_ipython()
        if shell is not None:
            from .notebook.session import session_for

            session = session_for(shell)
    except ImportError:
        pass
    if is_thread_config(run):
        # A thread is read where it is (a saver's store of this process unless store= is given).
        store, thread = run_sync(find_thread(run, store))
        run = thread.run_id
    elif store is None and session is not None:
        store = session.store
    return Inspector(run, store=store, link=session)


def load_ipython_extension(ip: object) -> None:
    """Register %durable and %%durable in IPython: ``%load_ext durable_nb``."""
    from .notebook import load_ipython_extension as load

    load(ip)


__all__ = [
    "AgentFailed",
    "AgentResult",
    "AlreadyResumed",
    "AmbiguousRunId",
    "CheckpointNotFound",
    "Client",
    "ConfigurationError",
    "Decision",
    "DurableError",
    "EventType",
    "GatePending",
    "IdempotencyKeyReused",
    "InvalidDecision",
    "InvalidInput",
    "InvalidNotebookRun",
    "InvalidState",
    "KeyFileError",
    "NoActiveNode",
    "NodeFailed",
    "NodeTimeout",
    "NotCancellable",
    "NotResumable",
    "PruneReport",
    "RecoveryReport",
    "Resume",
    "Run",
    "RunCancelled",
    "RunNotFound",
    "RunOwnedElsewhere",
    "RunStatus",
    "SchemaMismatch",
    "SerializationError",
    "Store",
    "StoreError",
    "StoreFailed",
    "StoreNotFound",
    "StoreUnavailable",
    "TamperedValueError",
    "Tool",
    "UnknownGate",
    "Workflow",
    "WorkflowMismatch",
    "WorkflowNotFound",
    "__version__",
    "aagent",
    "aapprove",
    "acancel",
    "acompare",
    "aevents",
    "afork",
    "afork_agent",
    "aforks",
    "agent",
    "aget_run",
    "ahistory",
    "amap_items",
    "approve",
    "aprune",
    "arecover",
    "areject",
    "aruns",
    "astatus",
    "cancel",
    "compare",
    "connect",
    "events",
    "fork",
    "fork_agent",
    "forks",
    "gate",
    "get_run",
    "history",
    "idempotent",
    "inspect",
    "interrupt",
    "load_ipython_extension",
    "map_items",
    "prune",
    "recover",
    "reject",
    "runs",
    "status",
    "tool",
    "worker",
]
