"""durable_nb: durable notebooks and workflows.

Every finished node commits a checkpoint; a crash loses at most the node in flight; gates
wait for a person's decision without a live process; any checkpoint can be forked.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

from ._lazy import lazy_names as _lazy_names
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
    InvalidReplay,
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
from .store.offload import use_offload as _use_offload

if _TYPE_CHECKING:
    from .engine.agents import AgentResult, Tool, aagent, afork_agent, agent, fork_agent, tool, worker
    from .engine.execution.idempotent import idempotent
    from .engine.execution.item_map import amap_items, map_items
    from .engine.gates.gate import gate, interrupt
    from .engine.gates.resume import Resume
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
    from .model import Decision, EventType, PruneReport, RunStatus
    from .notebook.replays import replay
    from .service import Client
    from .store import Store, connect
    from .views import (
        acompare,
        acompare_cells,
        aevents,
        aforks,
        ahistory,
        aruns,
        compare,
        compare_cells,
        events,
        forks,
        history,
        runs,
    )

# Everything else is imported on first use: `%load_ext durable_nb` in a kernel, or a script that
# only needs a store, must not pay for the agents, the views and the service client.
_LAZY: dict[str, str] = {
    "AgentResult": ".engine.agents",
    "Tool": ".engine.agents",
    "aagent": ".engine.agents",
    "afork_agent": ".engine.agents",
    "agent": ".engine.agents",
    "fork_agent": ".engine.agents",
    "tool": ".engine.agents",
    "worker": ".engine.agents",
    "idempotent": ".engine.execution.idempotent",
    "amap_items": ".engine.execution.item_map",
    "map_items": ".engine.execution.item_map",
    "Resume": ".engine.gates.resume",
    "gate": ".engine.gates.gate",
    "interrupt": ".engine.gates.gate",
    "aapprove": ".engine.runs.calls",
    "acancel": ".engine.runs.calls",
    "afork": ".engine.runs.calls",
    "aget_run": ".engine.runs.calls",
    "approve": ".engine.runs.calls",
    "aprune": ".engine.runs.calls",
    "areject": ".engine.runs.calls",
    "astatus": ".engine.runs.calls",
    "cancel": ".engine.runs.calls",
    "fork": ".engine.runs.calls",
    "get_run": ".engine.runs.calls",
    "prune": ".engine.runs.calls",
    "reject": ".engine.runs.calls",
    "status": ".engine.runs.calls",
    "RecoveryReport": ".engine.runs.recovery",
    "arecover": ".engine.runs.recovery",
    "recover": ".engine.runs.recovery",
    "Run": ".engine.runs.run",
    "Workflow": ".engine.workflows.workflow",
    "replay": ".notebook.replays",
    "Decision": ".model",
    "EventType": ".model",
    "PruneReport": ".model",
    "RunStatus": ".model",
    "Client": ".service",
    "Store": ".store",
    "connect": ".store",
    "acompare": ".views",
    "acompare_cells": ".views",
    "aevents": ".views",
    "aforks": ".views",
    "ahistory": ".views",
    "aruns": ".views",
    "compare": ".views",
    "compare_cells": ".views",
    "events": ".views",
    "forks": ".views",
    "history": ".views",
    "runs": ".views",
}

__version__ = "0.1.0"


def _run_blocking(call: _Any) -> _Any:
    """Run a store's blocking call where the sync driver says, installing the driver's own policy."""
    from ._loop import run_blocking

    _use_offload(run_blocking)  # later calls go straight to it
    return run_blocking(call)


# The sync driver decides where the stores' blocking work runs (the store does not know it).
_use_offload(_run_blocking)


def inspect(run: object = None, *, store: object = None) -> object:
    """Return the fork inspector for a run or a LangGraph config (default: this kernel's run, else the latest).

    The inspector is a widget over the run's fork tree: pick a run and one of its checkpoints,
    set values, and fork there.

    Args:
        run: A run id, a run handle, or a LangGraph config (``{"configurable": {"thread_id": …}}``).
        store: The store's URL or a Store (default: this kernel's, else ``$DURABLE_NB_STORE``).

    Returns:
        The inspector widget (displayed when it is a cell's last expression).

    Raises:
        DurableError: No run was given, none is attached and the store has none yet.
        StoreNotFound: The store named does not exist.
    """
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


__getattr__, __dir__ = _lazy_names(__name__, _LAZY)


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
    "InvalidReplay",
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
    "acompare_cells",
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
    "compare_cells",
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
    "replay",
    "runs",
    "status",
    "tool",
    "worker",
]
