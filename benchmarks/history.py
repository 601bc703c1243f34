"""History at scale: durable_nb's history DataFrame of a 10,000-checkpoint run, and LangGraph's
``get_state_history`` over the same number of checkpoints."""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict


class Counter(TypedDict):
    """The state of LangGraph's history graph."""

    count: int


def _ours(folder: Path, checkpoints: int) -> Any:
    import durable_nb as dnb
    from durable_nb._ids import new_id
    from durable_nb.model import CheckpointDraft, CheckpointStatus, Commit, NewRun, RunKind, RunStatus

    store = dnb.connect(f"sqlite:///{folder}/history.db", durability="process")

    async def build() -> str:
        run_id = new_id()
        await store.create_run(NewRun(run_id, "history", RunKind.WORKFLOW, RunStatus.RUNNING, {}))
        for start in range(0, checkpoints, 1000):
            drafts = [
                CheckpointDraft(new_id(), f"after:n{i}", f"n{i}", CheckpointStatus.OK, {}, [], [], duration=0.001)
                for i in range(start, min(start + 1000, checkpoints))
            ]
            await store.commit(Commit(run_id=run_id, checkpoints=drafts))
        return run_id

    run_id = asyncio.run(build())
    return lambda: dnb.history(run_id, store=store)


def _langgraph(folder: Path, checkpoints: int) -> Any:
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver
    from langgraph.graph import END, START, StateGraph

    def step(state):
        return {"count": state["count"] + 1}

    def route(state):
        return "step" if state["count"] < checkpoints - 2 else END

    graph = StateGraph(Counter)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", route)
    saver = SqliteSaver(sqlite3.connect(folder / "langgraph-history.db", check_same_thread=False))
    app = graph.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": checkpoints + 10}
    app.invoke({"count": 0}, config, durability="async")  # every step checkpointed, in the background
    return lambda: list(app.get_state_history(config))


def history_scenario(checkpoints: int, reps: int) -> dict[str, Any]:
    """Time building each contender's history listing, interleaved."""
    folder = Path(tempfile.mkdtemp(prefix="durable-nb-history-"))
    contenders = {"durable_nb history DataFrame": _ours(folder, checkpoints)}
    try:
        contenders["LangGraph get_state_history"] = _langgraph(folder, checkpoints)
    except ImportError:
        pass
    times: dict[str, list[float]] = {name: [] for name in contenders}
    sizes: dict[str, int] = {}
    for name, build in contenders.items():
        sizes[name] = len(build())  # warm-up, and the number of rows listed
    for _ in range(reps):
        for name, build in contenders.items():
            started = time.perf_counter()
            build()
            times[name].append(time.perf_counter() - started)
    ours = statistics.median(times["durable_nb history DataFrame"])
    rows = [
        {
            "contender": name,
            "seconds": round(statistics.median(values), 4),
            "rows": sizes[name],
            "vs_durable_nb": round(statistics.median(values) / ours, 2),
        }
        for name, values in times.items()
    ]
    return {"scenario": f"History of {checkpoints:,} checkpoints", "rows": rows}


def render_history(result: dict[str, Any]) -> str:
    """Format the history scenario as a Markdown table."""
    lines = [
        f"**{result['scenario']}** (medians)",
        "",
        "| listing | rows | seconds | x durable_nb |",
        "|---|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(f"| {row['contender']} | {row['rows']:,} | {row['seconds']:.3f} | {row['vs_durable_nb']:.2f} |")
    return "\n".join(lines)
