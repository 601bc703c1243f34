"""Runs, history, forks, events and comparisons as pandas DataFrames with real dtypes.

Each view costs one store query for its rows (comparisons add one for the values): never a
query per row. Times are UTC datetimes, durations timedeltas, statuses categoricals.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .._loop import blocking
from ..engine.gates.decisions import current_run, expire_gates
from ..engine.runs.status import NODE_STATUSES, describe
from ..engine.state.values import ValueCodec
from ..errors import InvalidInput
from ..model import CheckpointStatus, EventType, RunStatus
from ..store import resolve_store
from ..store.protocol import Store
from ..store.rules import check_run_id
from ..store.secret import load_secret
from .render import OPEN_GATES
from .threads import META, decode_values, find_thread, is_thread_config

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "acompare",
    "aevents",
    "aforks",
    "ahistory",
    "aruns",
    "astatus",
    "compare",
    "events",
    "forks",
    "history",
    "runs",
    "status",
]

RUN_STATUSES = [s.value for s in RunStatus]
CHECKPOINT_STATUSES = [s.value for s in CheckpointStatus]
EVENT_TYPES = [t.value for t in EventType]


def _pd() -> Any:
    import pandas as pd

    return pd


def _times(values: list[float | None]) -> Any:
    pd = _pd()
    # pandas picks a resolution from the data; pin nanoseconds so every view has one dtype.
    return pd.to_datetime(pd.Series(values, dtype="float64"), unit="s", utc=True).astype("datetime64[ns, UTC]")


def _durations(values: list[float | None]) -> Any:
    pd = _pd()
    return pd.to_timedelta(pd.Series(values, dtype="float64"), unit="s").astype("timedelta64[ns]")


def _text(values: list[Any]) -> Any:
    return _pd().Series(values, dtype="string")


async def _run_id(run: Any, store: Store) -> str:
    # A Run object, its id as text, or a LangGraph config naming a thread: anything else is
    # refused, never turned into text.
    if is_thread_config(run):
        return (await find_thread(run, store))[1].run_id
    run_id = getattr(run, "id", run)
    check_run_id(run_id)
    return str(run_id)


async def _store_for(run: Any, store: Any) -> Store:
    """Return the store to read ``run`` from: ``store``, or for a LangGraph config given without
    one, the store holding its thread (a saver's of this process, else the default store)."""
    if store is None and is_thread_config(run):
        return (await find_thread(run))[0]
    return resolve_store(store, existing=True)


# -- runs -------------------------------------------------------------------------------------


async def aruns(name: str | None = None, *, store: Any = None) -> pd.DataFrame:
    """Return one row per run, newest first: ids, name, kind, status, times, checkpoints, error, fork parent.

    Args:
        name: Only the runs of this name (a workflow's, a notebook's, ``agent:<name>``); None for all.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        A DataFrame with columns ``run_id``, ``name``, ``kind`` and ``status`` (categoricals),
        ``created_at`` and ``updated_at`` (UTC datetimes), ``elapsed`` (timedelta),
        ``checkpoints``, ``error``, ``parent_run_id``, ``parent_checkpoint_id`` and
        ``idempotency_key``. One query, whatever the number of runs.

    Raises:
        InvalidInput: ``name`` is not text.
        StoreNotFound: No store exists at the URL.

    Example:
        >>> dnb.runs("support-triage").status.value_counts()
    """
    if name is not None and not isinstance(name, str):
        raise InvalidInput(
            f"runs() takes a run name (text) or None for every run, not {type(name).__name__}: {name!r}."
        )
    pd = _pd()
    resolved = resolve_store(store, existing=True)
    await expire_gates(resolved)  # a listing must not show a run paused past its deadline
    records = await resolved.list_runs(name)
    return pd.DataFrame(
        {
            "run_id": _text([r.run_id for r in records]),
            "name": _text([r.name for r in records]),
            "kind": pd.Categorical([r.kind.value for r in records], categories=["notebook", "workflow"]),
            "status": pd.Categorical([r.status.value for r in records], categories=RUN_STATUSES),
            "created_at": _times([r.created_at for r in records]),
            "updated_at": _times([r.updated_at for r in records]),
            "elapsed": _durations([r.updated_at - r.created_at for r in records]),
            "checkpoints": pd.Series([r.head_seq for r in records], dtype="int64"),
            "error": _text([r.error for r in records]),
            "parent_run_id": _text([r.parent_run_id for r in records]),
            "parent_checkpoint_id": _text([r.parent_checkpoint_id for r in records]),
            "idempotency_key": _text([r.idempotency_key for r in records]),
        }
    )


runs = blocking(aruns)


# -- history ----------------------------------------------------------------------------------


async def ahistory(run: Any, *, store: Any = None) -> pd.DataFrame:
    """Return one row per checkpoint of a run, in order: step, status, time, duration, what changed, bytes.

    Args:
        run: A run id (or a start of one no other run shares), a Run, or a LangGraph config
            (``{"configurable": {"thread_id": …}}``), found in the store of the saver that wrote it.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        A DataFrame with one row per checkpoint (``seq``, ``step``, ``status``, times and durations,
        attempts, the names each checkpoint set, ``bytes_written``, and for agents ``agent_path``
        and ``step_type``). In a notebook it renders with readable durations and local times.

    Raises:
        RunNotFound: No run (or thread) matches.
        AmbiguousRunId: A shortened id matches several runs.

    Example:
        >>> dnb.history(run.id)[["seq", "step", "status"]]
    """
    pd = _pd()
    resolved = await _store_for(run, store)
    run_id = await _run_id(run, resolved)
    record = await current_run(resolved, run_id)
    rows = await resolved.history_rows(run_id)
    columns = list(zip(*rows, strict=True)) if rows else [()] * 17
    statuses = list(columns[4])
    waiting: set[str] = set()
    if record.status is RunStatus.PAUSED:
        waiting = {p.checkpoint_id for p in await resolved.pending_interrupts(run_id)}
    if META in record.meta and waiting:
        # A LangGraph checkpoint is written before its tasks run: the one a task stopped at
        # with interrupt() reads as interrupted while the interrupt waits.
        interrupted = CheckpointStatus.INTERRUPTED.value
        statuses = [interrupted if c in waiting else s for c, s in zip(columns[1], statuses, strict=True)]
    frame = pd.DataFrame(
        {
            "seq": pd.Series(columns[0], dtype="int64"),
            "checkpoint_id": _text(list(columns[1])),
            "node_id": _text(list(columns[2])),
            "step": _text(list(columns[3])),
            "status": pd.Categorical(statuses, categories=CHECKPOINT_STATUSES),
            "created_at": _times(list(columns[5])),
            "duration": _durations(list(columns[6])),
            "attempts": pd.Series(list(columns[7]), dtype="Int64"),
            "error": _text(list(columns[8])),
            "error_type": _text(list(columns[9])),
            "changed": pd.Series([sorted(json.loads(v)) if v else [] for v in columns[10]], dtype="object"),
            "bytes_written": pd.Series(list(columns[16]), dtype="int64"),
            "iteration": pd.Series(list(columns[11]), dtype="Int64"),
            "item_index": pd.Series(list(columns[12]), dtype="Int64"),
            "branch_key": _text(list(columns[13])),
            "parent_checkpoint_id": _text(list(columns[14])),
            "agent_path": _text(list(columns[15])),
            "step_type": pd.Categorical([_step_type(s) for s in columns[3]], categories=STEP_TYPES),
        }
    )
    # Which gate checkpoints still wait, for the labels people read (views.render); no column changes.
    frame.attrs[OPEN_GATES] = sorted(waiting)
    return frame


STEP_TYPES = ["node", "llm_call", "tool_call", "map_item"]


def _step_type(step: str) -> str:
    """An agent's checkpoints are model calls (``turn:N``) and tool calls (``turn:N/tool:x``), map_items'
    are items (``item:N``); the rest, nodes."""
    if step.startswith("item:"):
        return "map_item"
    if not step.startswith("turn:"):
        return "node"
    return "tool_call" if "/tool:" in step else "llm_call"


history = blocking(ahistory)


# -- forks --------------------------------------------------------------------------------------


async def aforks(run: Any, *, store: Any = None) -> pd.DataFrame:
    """Return the whole fork tree holding a run, from its root: name, parent, fork point, overrides, status.

    Args:
        run: A run id (or a start of one no other run shares), a Run, or a LangGraph config.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        A DataFrame with one row per run of the tree (``run_id``, ``parent_run_id``, ``depth``, the
        fork point, the overrides with their values, ``status``), whichever run of it was given.

    Raises:
        RunNotFound: No run matches.
    """
    pd = _pd()
    resolved = await _store_for(run, store)
    run_id = await _run_id(run, resolved)
    await resolved.get_run(run_id)
    tree = await resolved.fork_tree(run_id)
    wanted = {h for _, detail in tree for h in detail["overrides"].values()}
    loaded: dict[str, Any] = {}
    if wanted:
        loaded = await ValueCodec(resolved, load_secret()).load({h: h for h in wanted})
    depth: dict[str, int] = {}
    for record, _ in tree:  # ids sort by creation, so a parent comes before its forks
        depth[record.run_id] = depth.get(record.parent_run_id or "", -1) + 1 if record.parent_run_id else 0
    return pd.DataFrame(
        {
            "run_id": _text([r.run_id for r, _ in tree]),
            "name": _text([r.name for r, _ in tree]),
            "parent_run_id": _text([r.parent_run_id for r, _ in tree]),
            "depth": pd.Series([depth[r.run_id] for r, _ in tree], dtype="int64"),
            "fork_step": _text([d["fork_step"] for _, d in tree]),
            "fork_seq": pd.Series([d["fork_seq"] for _, d in tree], dtype="Int64"),
            "parent_checkpoint_id": _text([r.parent_checkpoint_id for r, _ in tree]),
            "overrides": pd.Series(
                [{k: loaded.get(h) for k, h in d["overrides"].items()} for _, d in tree], dtype="object"
            ),
            "status": pd.Categorical([r.status.value for r, _ in tree], categories=RUN_STATUSES),
            "created_at": _times([r.created_at for r, _ in tree]),
            "checkpoints": pd.Series([r.head_seq for r, _ in tree], dtype="int64"),
        }
    )


forks = blocking(aforks)


# -- events -------------------------------------------------------------------------------------


async def aevents(run: Any, *, store: Any = None) -> pd.DataFrame:
    """Return a run's event log: seq, type, node, time, details.

    Args:
        run: A run id (or a start of one no other run shares), a Run, or a LangGraph config.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        A DataFrame with one row per event, in order (run started, node started, gate opened,
        decision, failure, …; see :class:`EventType`).

    Raises:
        RunNotFound: No run matches.
    """
    pd = _pd()
    resolved = await _store_for(run, store)
    run_id = await _run_id(run, resolved)
    await resolved.get_run(run_id)
    found = await resolved.list_events(run_id)
    return pd.DataFrame(
        {
            "seq": pd.Series([e.seq for e in found], dtype="int64"),
            "type": pd.Categorical([e.type for e in found], categories=EVENT_TYPES),
            "node_id": _text([e.node_id for e in found]),
            "at": _times([e.at for e in found]),
            "data": pd.Series([e.data for e in found], dtype="object"),
        }
    )


events = blocking(aevents)


# -- compare ------------------------------------------------------------------------------------


async def acompare(run_ids: Any, names: Any = None, *, store: Any = None) -> pd.DataFrame:
    """Return one row per run and one column per chosen state value (all when ``names`` is None).

    Args:
        run_ids: A run id, a list of them, or a LangGraph config.
        names: The state values to show (default: every one).
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        A DataFrame indexed by run id, with each run's status, parent and fork point, then one
        column per value.

    Raises:
        InvalidInput: ``run_ids`` is neither an id nor a list of them.
        RunNotFound: A run does not exist.

    Example:
        >>> dnb.compare([run.id, fork.id], ["category"])
    """
    pd = _pd()
    if not isinstance(run_ids, str | Iterable):
        raise InvalidInput(f"compare takes a run id or a list of run ids, not {type(run_ids).__name__}.")
    single = isinstance(run_ids, str) or is_thread_config(run_ids)
    given = [run_ids] if single else list(run_ids)
    # The first run says where to read (a thread's store, for a LangGraph config); the others are read there.
    resolved = await _store_for(given[0] if given else None, store)
    ids = [await _run_id(r, resolved) for r in given]
    records = {r.run_id: r for r in await resolved.list_runs() if r.run_id in set(ids)}
    missing = [i for i in ids if i not in records]
    if missing:
        from ..errors import RunNotFound

        raise RunNotFound(missing[0], resolved.url)
    manifests = {i: state.manifest for i, state in (await resolved.latest_states(ids)).items()}
    known = sorted({n for m in manifests.values() for n in m if not n.startswith("__")})
    if names is not None and not isinstance(names, str | Iterable):
        raise InvalidInput(f"compare takes a value name or a list of names, not {type(names).__name__}.")
    chosen = known if names is None else [names] if isinstance(names, str) else list(names)
    unknown = [n for n in chosen if not any(n in m for m in manifests.values())]
    if unknown:
        raise InvalidInput(f"None of these runs has a value named {unknown[0]!r}; the names they have: {known[:20]}.")
    # Each run's values are loaded together: a notebook's variables come in groups.
    loader = ValueCodec(resolved, load_secret())
    loaded = await loader.load_many({i: {n: m[n] for n in chosen if n in m} for i, m in manifests.items()})
    loaded = {i: decode_values(records[i], values) for i, values in loaded.items()}
    data: dict[str, Any] = {
        "run_id": _text(ids),
        "status": pd.Categorical([records[i].status.value for i in ids], categories=RUN_STATUSES),
        "parent_run_id": _text([records[i].parent_run_id for i in ids]),
        "fork_point": _text([records[i].parent_checkpoint_id for i in ids]),
    }
    for name in chosen:
        data[name] = pd.Series([loaded[i].get(name) for i in ids], dtype="object").infer_objects()
    return pd.DataFrame(data).set_index("run_id")


compare = blocking(acompare)


# -- a one-row status ---------------------------------------------------------------------------


async def astatus(run: Any, *, store: Any = None) -> pd.DataFrame:
    """Return a run's status as a one-row DataFrame (``durable_nb.status`` gives it as a dict)."""
    pd = _pd()
    resolved = await _store_for(run, store)
    run_id = await _run_id(run, resolved)
    record = await current_run(resolved, run_id)
    summary = describe(record, await resolved.status_rows(run_id))
    row: dict[str, Any] = {
        "run_id": _text([record.run_id]),
        "name": _text([record.name]),
        "status": pd.Categorical([record.status.value], categories=RUN_STATUSES),
        "checkpoints": pd.Series([record.head_seq], dtype="int64"),
    }
    for key in NODE_STATUSES:
        row[key] = pd.Series([summary["node_counts"][key]], dtype="int64")
    row["created_at"] = _times([record.created_at])
    row["updated_at"] = _times([record.updated_at])
    row["error"] = _text([record.error])
    return pd.DataFrame(row)


status = blocking(astatus)
