"""Scale: how cost grows with run size. Chains and maps of 10 to 10,000 nodes for durable_nb, LangGraph and
DBOS, and a notebook of 300 durable cells: ``python -m benchmarks.scale [--sizes 10,100,1000,10000] [--json PATH]``.

Every run is a child process of its own, in a folder and database of its own: a warm-up run in that
database first (schema, imports, caches), then the measured run, then the listings. Every node or item
body records ``time.perf_counter()`` when it starts; the gap between consecutive starts is the cost of a
node (its body, its commit and the engine's work before the next one starts). Runs are interleaved across
contenders (A B C A B C ...). A run that passes its time budget stops at its next node and is reported as
skipped, and so are the larger sizes of that contender and shape.
"""

from __future__ import annotations

import argparse
import json
import math
import operator
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path
from typing import Annotated, Any, TypedDict

CONTENDERS = ("durable_nb", "langgraph", "dbos")
SHAPES = ("chain", "map")
LABELS = {
    "durable_nb": "durable_nb (synchronous=FULL)",
    "langgraph": "LangGraph SqliteSaver (sync)",
    "dbos": "DBOS (SQLite system database)",
}
WARM_UP = 3  # nodes or items of the warm-up run in each database
ROOT = Path(__file__).resolve().parent.parent


def installed_contenders() -> tuple[str, ...]:
    """The contenders whose packages are installed here (durable_nb always)."""
    from importlib.util import find_spec

    return ("durable_nb", *(name for name in CONTENDERS[1:] if find_spec(name) is not None))


class BudgetExceeded(RuntimeError):
    """Raised by a node that starts after its run's time budget has run out."""


class Clock:
    """The start time of every measured node, and the run's deadline."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.deadline = math.inf
        self.exceeded = False

    def arm(self, budget: float) -> None:
        """Forget the warm-up's times and start the budget now."""
        self.starts.clear()
        self.deadline = time.perf_counter() + budget

    def tick(self) -> None:
        """Record a node's start; refuse to start it past the deadline."""
        now = time.perf_counter()
        self.starts.append(now)  # list.append is atomic: map items on threads may call it at once
        if now > self.deadline:
            self.exceeded = True
            raise BudgetExceeded("the run's time budget ran out")


class ScaleState(TypedDict, total=False):
    """The state of LangGraph's chain and map graphs."""

    step: int
    count: int
    documents: list[str]
    summaries: Annotated[list[str], operator.add]


def _documents(count: int) -> list[str]:
    return [f"document {index}" for index in range(count)]


def _median_of(call: Callable[[], Any], times: int) -> tuple[float, Any]:
    """Time ``call`` ``times`` times; return the median in seconds and the last result."""
    seconds, result = [], None
    for _ in range(times):
        started = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), result


# -- contenders: setup, warm-up, the measured run, listings -----------------------------------


class DurableNbScale:
    """durable_nb: a Workflow chain or map on the embedded SQLite store, default durability."""

    def setup(self, folder: Path, shape: str, size: int, clock: Clock) -> None:
        """Build the workflow (and a small one for the warm-up) on a store in ``folder``."""
        # dnb.history returns a DataFrame: its first call in a process also imports pandas (about
        # 0.3 s here), a cost of the process, not of the run, so it is paid before any timing.
        import pandas  # noqa: F401

        import durable_nb as dnb

        self.dnb, self.shape, self.size = dnb, shape, size
        self.commit_times: list[float] = []  # filled from the history
        self.store = dnb.connect(f"sqlite:///{folder}/runs.db")
        self.flow = self._workflow(f"scale-{shape}", size, clock)
        self.warm_flow = self._workflow("warm-up", WARM_UP, clock) if shape == "chain" else self.flow

    def _workflow(self, name: str, size: int, clock: Clock) -> Any:
        import durable_nb as dnb

        flow = dnb.Workflow(name, store=self.store)
        if self.shape == "chain":
            previous = None
            for index in range(size):

                def step(state: dict[str, Any], index: int = index) -> dict[str, Any]:
                    clock.tick()
                    return {"step": index}

                step.__name__ = f"n{index}"
                flow.node(step, after=previous, retry_count=0)
                previous = step.__name__
            return flow

        @flow.node(retry_count=0)
        def load(state: dict[str, Any]) -> dict[str, Any]:
            return {"documents": _documents(state["count"])}

        @flow.map(after="load", items="documents", into="summaries", retry_count=0)
        def summarize_one(state: dict[str, Any], document: str) -> str:
            clock.tick()
            return document.upper()

        return flow

    def warm(self) -> None:
        """Run the warm-up workflow once."""
        run = self.warm_flow.run({"count": WARM_UP})
        assert run.status == "completed", run

    def run(self) -> None:
        """The measured run (a node past the budget fails it)."""
        run = self.flow.run({"count": self.size} if self.shape == "map" else {})
        self.run_id = run.id
        self.failed = None if run.status == "completed" else f"{run.status}: {run.error}"

    status_call, history_call = "dnb.status", "dnb.history"
    # Where the values (and only they) are kept: the blobs table and its index (and files
    # beside the database for values of 4 MB or more, none here).
    value_tables = ("blobs", "sqlite_autoindex_blobs_1")

    def status(self) -> None:
        """The run's status, as ``dnb.status`` gives it."""
        self.dnb.status(self.run_id, store=self.store)

    def history(self) -> int:
        """The run's history DataFrame, kept for its commit times (read after the timing). Returns its rows."""
        self.frame = self.dnb.history(self.run_id, store=self.store)
        return len(self.frame)

    def extra(self) -> dict[str, Any]:
        """Nothing beyond the listings; the ``after:`` checkpoints' commit times are taken from the history."""
        frame = self.frame
        measured = frame[(frame["step"].astype(str).str.startswith("after:")) & (frame["node_id"] != "load")]
        self.commit_times = list(measured.sort_values("seq")["created_at"].astype("int64") / 1e9)
        return {}

    def close(self) -> None:
        """Nothing to release: the child process ends."""


class LangGraphScale:
    """LangGraph: a linear StateGraph, or a Send fan-out to a worker node, with SqliteSaver, durability="sync"."""

    def setup(self, folder: Path, shape: str, size: int, clock: Clock) -> None:
        """Build the graph (and a small chain for the warm-up) on a SqliteSaver in ``folder``."""
        from langgraph.checkpoint.sqlite import SqliteSaver

        commits: list[float] = []
        self.commit_times = commits

        class TimedSaver(SqliteSaver):
            """SqliteSaver recording when each checkpoint or worker write is committed."""

            def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
                result = super().put(config, checkpoint, metadata, new_versions)
                if shape == "chain":
                    commits.append(time.perf_counter())
                return result

            def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
                super().put_writes(config, writes, task_id, task_path)
                if shape == "map" and any(channel == "summaries" for channel, _ in writes):
                    commits.append(time.perf_counter())

        self.shape, self.size = shape, size
        self.path = folder / "langgraph.db"
        self.saver = TimedSaver(sqlite3.connect(self.path, check_same_thread=False))
        self.app = self._graph(size, clock)
        self.warm_app = self._graph(WARM_UP, clock) if shape == "chain" else self.app

    def _graph(self, size: int, clock: Clock) -> Any:
        from langgraph.graph import END, START, StateGraph
        from langgraph.types import Send

        graph = StateGraph(ScaleState)
        if self.shape == "chain":
            previous = START
            for index in range(size):

                def step(state: ScaleState, index: int = index) -> dict[str, Any]:
                    clock.tick()
                    return {"step": index}

                graph.add_node(f"n{index}", step)
                graph.add_edge(previous, f"n{index}")
                previous = f"n{index}"
            graph.add_edge(previous, END)
        else:

            def load(state: ScaleState) -> dict[str, Any]:
                return {"documents": _documents(state["count"])}

            def fan_out(state: ScaleState) -> list[Any]:
                return [Send("summarize_one", {"document": document}) for document in state["documents"]]

            def summarize_one(task: dict[str, Any]) -> dict[str, Any]:
                clock.tick()
                return {"summaries": [task["document"].upper()]}

            graph.add_node("load", load)
            graph.add_node("summarize_one", summarize_one)
            graph.add_edge(START, "load")
            graph.add_conditional_edges("load", fan_out, ["summarize_one"])
            graph.add_edge("summarize_one", END)
        return graph.compile(checkpointer=self.saver)

    def _invoke(self, app: Any, size: int) -> dict[str, Any]:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}, "recursion_limit": size + 10}
        state = {"count": size} if self.shape == "map" else {"step": -1}
        app.invoke(state, config, durability="sync")
        return config

    def warm(self) -> None:
        """Run the warm-up graph once."""
        self._invoke(self.warm_app, WARM_UP)

    def run(self) -> None:
        """The measured run (a node past the budget raises BudgetExceeded)."""
        self.failed = None
        self.commit_times.clear()
        self.config = self._invoke(self.app, self.size)

    status_call, history_call = "get_state", "list(get_state_history)"

    def status(self) -> None:
        """The thread's latest state snapshot."""
        self.app.get_state(self.config)

    def history(self) -> int:
        """Every state snapshot of the thread, as a list; returns its length."""
        return len(list(self.app.get_state_history(self.config)))

    def extra(self) -> dict[str, Any]:
        """How many checkpoint rows and write rows the run stored."""
        with sqlite3.connect(self.path) as conn:
            thread = self.config["configurable"]["thread_id"]
            checkpoints = conn.execute("SELECT count(*) FROM checkpoints WHERE thread_id = ?", (thread,)).fetchone()
            writes = conn.execute("SELECT count(*) FROM writes WHERE thread_id = ?", (thread,)).fetchone()
        return {"checkpoint_rows": checkpoints[0], "write_rows": writes[0]}

    def close(self) -> None:
        """Close the saver's connection."""
        self.saver.conn.close()


class DbosScale:
    """DBOS: a workflow running one step per node (chain) or per item (map), SQLite system database."""

    def setup(self, folder: Path, shape: str, size: int, clock: Clock) -> None:
        """Register the workflows and launch DBOS on a system database in ``folder``."""
        from dbos import DBOS

        self.shape, self.size = shape, size
        self.commit_times: list[float] = []
        url = f"sqlite:///{folder}/dbos.db"
        DBOS(config={"name": "scale", "system_database_url": url, "log_level": "ERROR"})

        @DBOS.step()
        def step(index: int) -> int:
            clock.tick()
            return index

        @DBOS.workflow()
        def chain(count: int) -> int:
            for index in range(count):
                step(index)
            return count

        @DBOS.step()
        def summarize_one(document: str) -> str:
            clock.tick()
            return document.upper()

        @DBOS.workflow()
        def map_documents(documents: list[str]) -> list[str]:
            return [summarize_one(document) for document in documents]

        DBOS.launch()
        self.workflow = chain if shape == "chain" else map_documents

    def _call(self, size: int) -> str:
        from dbos import SetWorkflowID

        workflow_id = uuid.uuid4().hex
        with SetWorkflowID(workflow_id):
            self.workflow(size if self.shape == "chain" else _documents(size))
        return workflow_id

    def warm(self) -> None:
        """Run the workflow once with a few nodes."""
        self._call(WARM_UP)

    def run(self) -> None:
        """The measured run (a step past the budget raises BudgetExceeded)."""
        self.failed = None
        self.workflow_id = self._call(self.size)

    status_call, history_call = "DBOS.get_workflow_status", "DBOS.list_workflow_steps"

    def status(self) -> None:
        """The workflow's status row."""
        from dbos import DBOS

        DBOS.get_workflow_status(self.workflow_id)

    def history(self) -> int:
        """Every step of the workflow, with its output; returns how many."""
        from dbos import DBOS

        return len(DBOS.list_workflow_steps(self.workflow_id))

    def extra(self) -> dict[str, Any]:
        """Nothing beyond the listings."""
        return {}

    def close(self) -> None:
        """Shut DBOS down."""
        from dbos import DBOS

        DBOS.destroy()


MAKERS: dict[str, Callable[[], Any]] = {"durable_nb": DurableNbScale, "langgraph": LangGraphScale, "dbos": DbosScale}


# -- measuring one run (in a child process) ----------------------------------------------------


def settled_bytes(folder: Path) -> int:
    """Checkpoint every SQLite WAL in ``folder`` into its database; return the bytes of everything kept there.

    That is the databases, what is left in their WALs and any ``*-blobs`` folder; SQLite's ``-shm``
    index of the WAL is not data and is left out.
    """
    for path in folder.glob("*.db"):
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.name.endswith("-shm"))


def table_bytes(folder: Path, names: tuple[str, ...]) -> int:
    """Bytes of the pages of the named tables and indexes in the SQLite databases of ``folder``."""
    if not names:
        return 0
    marks = ", ".join("?" for _ in names)
    total = 0
    for path in folder.glob("*.db"):
        with sqlite3.connect(path) as conn:
            found = conn.execute(f"SELECT COALESCE(SUM(pgsize), 0) FROM dbstat WHERE name IN ({marks})", names)
            total += found.fetchone()[0]
    return total


def per_node_ms(times: list[float], mean: bool = False) -> tuple[float, float]:
    """Milliseconds per node near the start and near the end of a run, from consecutive node times.

    Each window is the first or last tenth of the gaps (at least 5); the figure is the window's
    median gap, or with ``mean`` its span divided by its gaps (for items that start concurrently).
    """
    ordered = sorted(times)
    gaps = [later - earlier for earlier, later in pairwise(ordered)]
    if not gaps:
        return math.nan, math.nan
    window = min(len(gaps), max(5, len(gaps) // 10))
    if mean:
        return statistics.fmean(gaps[:window]) * 1000, statistics.fmean(gaps[-window:]) * 1000
    return statistics.median(gaps[:window]) * 1000, statistics.median(gaps[-window:]) * 1000


def _listings(runner: Any, times: int) -> dict[str, Any]:
    """Median seconds of the contender's status and history calls; a listing that runs out of memory is noted."""
    found: dict[str, Any] = {"status": runner.status_call, "history": runner.history_call}
    for key, call in (("status", runner.status), ("history", runner.history)):
        try:
            found[f"{key}_s"], rows = _median_of(call, times)
        except MemoryError:
            found[f"{key}_s"], rows = math.nan, None
            found["listing_error"] = f"{runner.history_call if key == 'history' else runner.status_call}: MemoryError"
        if key == "history":
            found["history_rows"] = rows
    found.update(runner.extra())
    return found


def measure_run(contender: str, shape: str, size: int, folder: Path, budget: float) -> dict[str, Any]:
    """Set up one contender in ``folder``, warm it up, time one run of ``size`` nodes and its listings."""
    folder.mkdir(parents=True, exist_ok=True)
    clock = Clock()
    runner = MAKERS[contender]()
    runner.setup(folder, shape, size, clock)
    runner.warm()
    before = settled_bytes(folder)
    value_tables = getattr(runner, "value_tables", ())
    values_before = table_bytes(folder, value_tables)
    clock.arm(budget)
    started = time.perf_counter()
    try:
        runner.run()
    except BudgetExceeded:
        pass
    seconds = time.perf_counter() - started
    if clock.exceeded:
        runner.close()
        done = len(clock.starts) - 1
        return {"skipped": f"skipped: over the {budget:g} s budget after {done:,} of {size:,} nodes"}
    if runner.failed:
        raise RuntimeError(f"{contender} {shape} {size} did not complete: {runner.failed}")
    assert len(clock.starts) == size, (len(clock.starts), size)
    start_ms, end_ms = per_node_ms(clock.starts, mean=shape == "map")
    after = settled_bytes(folder)
    value_bytes = (table_bytes(folder, value_tables) - values_before) / size if value_tables else math.nan
    listings = _listings(runner, 3 if size <= 1000 else 1)
    commit_start_ms, commit_end_ms = per_node_ms(runner.commit_times, mean=shape == "map")
    runner.close()
    return {
        "run_s": seconds,
        "first_node_s": min(clock.starts) - started,
        "overall_ms_per_node": seconds / size * 1000,
        "start_ms": start_ms,
        "end_ms": end_ms,
        "commit_start_ms": commit_start_ms,
        "commit_end_ms": commit_end_ms,
        "bytes_per_checkpoint": (after - before) / size,
        "value_bytes_per_checkpoint": value_bytes,
        **listings,
    }


# -- the notebook (in a child process) ---------------------------------------------------------


def notebook_cell(index: int) -> str:
    """Cell ``index``: a small new variable made from three earlier ones."""
    if index == 0:
        return "%%durable c0\nv0 = [0, 0, 0]\n"
    body = f"v{index} = [{index}, v{index - 1}[0] + v{index // 2}[1], len(v{index // 3})]"
    return f"%%durable c{index}\n{body}\n"


def _shell(store: str) -> Any:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell()
    shell.run_line_magic("load_ext", "durable_nb")
    shell.run_line_magic("durable", f"run scale-notebook --store {store}")
    return shell


def _run_cells(shell: Any, cells: int, deadline: float) -> list[float] | None:
    """Run every cell in order; return each one's seconds, or None past the deadline."""
    seconds = []
    for index in range(cells):
        started = time.perf_counter()
        result = shell.run_cell(notebook_cell(index))
        seconds.append(time.perf_counter() - started)
        assert result.success, (index, result.error_in_exec)
        if time.perf_counter() > deadline:
            return None
    return seconds


def _around(seconds: list[float], index: int, width: int = 21) -> float:
    """Median milliseconds of the ``width`` cells around ``index`` (one slow cell moves it little)."""
    width = min(width, len(seconds))
    low = max(0, min(index - width // 2, len(seconds) - width))
    return statistics.median(seconds[low : low + width]) * 1000


def measure_notebook(cells: int, folder: Path, budget: float) -> dict[str, Any]:
    """Run ``cells`` durable cells in an in-process IPython shell, then again in a new one (restoring them)."""
    import durable_nb as dnb

    folder.mkdir(parents=True, exist_ok=True)
    store = f"sqlite:///{folder}/notebook.db"
    shell = _shell(store)
    deadline = time.perf_counter() + budget
    commit = _run_cells(shell, cells, deadline)
    if commit is None:
        return {"skipped": f"skipped: over the {budget:g} s budget while committing"}
    before = dnb.runs(store=store)[["run_id", "checkpoints"]].to_dict("records")
    stored = settled_bytes(folder)
    restorer = _shell(store)
    restore = _run_cells(restorer, cells, deadline)
    if restore is None:
        return {"skipped": f"skipped: over the {budget:g} s budget while restoring"}
    after = dnb.runs(store=store)[["run_id", "checkpoints"]].to_dict("records")
    assert after == before, f"restoring wrote to the store: {before} -> {after}"
    last = f"v{cells - 1}"
    assert restorer.user_ns[last] == shell.user_ns[last], "restored values differ"
    early, late = min(10, cells - 1), max(0, cells - 10)
    return {
        "cells": cells,
        "early_cell": early,
        "late_cell": late,
        "commit_early_ms": _around(commit, early),
        "commit_late_ms": _around(commit, late),
        "restore_early_ms": _around(restore, early),
        "restore_late_ms": _around(restore, late),
        "commit_total_s": sum(commit),
        "restore_total_s": sum(restore),
        "bytes_per_cell": stored / cells,
    }


def _child(spec: dict[str, Any]) -> None:
    """Measure what ``spec`` names and write the result to ``spec['result']`` as JSON."""
    limit = int(spec["memory_gb"] * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))  # a runaway run fails here, not the machine
    folder = Path(spec["folder"])
    if spec["contender"] == "notebook":
        result = measure_notebook(spec["size"], folder, spec["budget"])
    else:
        result = measure_run(spec["contender"], spec["shape"], spec["size"], folder, spec["budget"])
    Path(spec["result"]).write_text(json.dumps(result))


# -- the scenario (parent process) -------------------------------------------------------------


def _spawn(spec: dict[str, Any], root: Path, name: str) -> dict[str, Any]:
    """Run one measurement in a child process; kill it if it outlives its budget by far."""
    spec = {**spec, "folder": str(root / name), "result": str(root / f"{name}.json")}
    log = root / f"{name}.log"
    hard_limit = spec["budget"] * 3 + 180  # setup (a 10,000-node graph) and listings come on top of the run
    with log.open("w") as output:
        child = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.scale", "--child", json.dumps(spec)],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            code = child.wait(timeout=hard_limit)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            code = None
    shutil.rmtree(root / name, ignore_errors=True)
    if code is None:
        return {"skipped": f"skipped: killed after {hard_limit:.0f} s (setup, run and listings)"}
    if code != 0 or not Path(spec["result"]).exists():
        tail = log.read_text().strip().splitlines()[-3:]
        return {"skipped": f"failed (exit {code}): {' / '.join(tail)[-300:]}"}
    return json.loads(Path(spec["result"]).read_text())


def _median_row(measured: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the numeric fields of several runs; text fields from the first."""
    row: dict[str, Any] = {"runs": len(measured)}
    for key, value in measured[0].items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values = [m[key] for m in measured if isinstance(m.get(key), (int, float)) and not math.isnan(m[key])]
            middle = statistics.median(values) if values else math.nan
            # Counts stay counts: the median of equal integers is that integer.
            whole = values and all(isinstance(v, int) for v in values) and middle == int(middle)
            row[key] = int(middle) if whole else middle
        else:
            row[key] = value
    return row


def scale_scenario(
    sizes: list[int],
    reps: int,
    *,
    budget_s: float = 600.0,
    large_reps: int = 1,
    repeat_under_s: float = 120.0,
    contenders: tuple[str, ...] = CONTENDERS,
    shapes: tuple[str, ...] = SHAPES,
    notebook_cells: int = 300,
    memory_gb: float = 12.0,
) -> dict[str, Any]:
    """Time chains and maps of every size for every contender, interleaved, and the notebook; return medians.

    Sizes of 10,000 and more run ``min(reps, large_reps)`` times, and ``reps`` times for a contender
    whose first run there took less than ``repeat_under_s`` seconds. A run over ``budget_s`` seconds is
    skipped, and so are the larger sizes of its contender and shape. ``notebook_cells=0`` leaves out
    the notebook.
    """
    root = Path(tempfile.mkdtemp(prefix="durable-nb-scale-"))
    pairs = [(contender, shape) for shape in shapes for contender in contenders]
    measured: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    skipped: dict[tuple[str, str, int], str] = {}
    over: dict[tuple[str, str], int] = {}
    first_took: dict[tuple[str, str, int], float] = {}
    for size in sorted(sizes):
        for rep in range(reps):
            for contender, shape in pairs:
                if (contender, shape) in over or (contender, shape, size) in skipped:
                    continue
                large = size >= 10_000 and rep >= large_reps
                if large and first_took.get((contender, shape, size), math.inf) >= repeat_under_s:
                    continue
                spec = {"contender": contender, "shape": shape, "size": size, "budget": budget_s}
                spec["memory_gb"] = memory_gb
                started = time.perf_counter()
                result = _spawn(spec, root, f"{contender}-{shape}-{size}-{rep}")
                first_took.setdefault((contender, shape, size), time.perf_counter() - started)
                print(
                    f"  {contender} {shape} {size:,} #{rep + 1}: {time.perf_counter() - started:.1f} s"
                    + (f" ({result['skipped']})" if "skipped" in result else ""),
                    file=sys.stderr,
                    flush=True,
                )
                if "skipped" in result:
                    skipped[(contender, shape, size)] = result["skipped"]
                    over.setdefault((contender, shape), size)
                else:
                    measured.setdefault((contender, shape, size), []).append(result)
    rows = []
    for contender, shape in pairs:
        for size in sorted(sizes):
            key = (contender, shape, size)
            row: dict[str, Any] = {"contender": LABELS[contender], "shape": shape, "size": size}
            if key in measured:
                row.update(_median_row(measured[key]))
                row["end_vs_start"] = row["end_ms"] / row["start_ms"] if row["start_ms"] else math.nan
            elif key in skipped:
                row["skipped"] = skipped[key]
            elif (contender, shape) in over:
                row["skipped"] = f"not run (size {over[(contender, shape)]:,} was skipped or failed)"
            rows.append(row)
    notebook = None
    if notebook_cells:
        runs = []
        for rep in range(reps):
            spec = {"contender": "notebook", "shape": "cells", "size": notebook_cells, "budget": budget_s}
            spec["memory_gb"] = memory_gb
            result = _spawn(spec, root, f"notebook-{rep}")
            print(f"  notebook #{rep + 1}: {result.get('skipped', 'done')}", file=sys.stderr, flush=True)
            if "skipped" in result:
                notebook = result
                break
            runs.append(result)
        else:
            notebook = _median_row(runs)
    shutil.rmtree(root, ignore_errors=True)
    return {
        "scenario": "Cost by run size",
        "sizes": sorted(sizes),
        "reps": reps,
        "large_reps": large_reps,
        "repeat_under_s": repeat_under_s,
        "budget_s": budget_s,
        "rows": rows,
        "notebook": notebook,
    }


def _number(value: float | None, digits: int) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:,.{digits}f}"


def _notebook_line(step: str, notebook: dict[str, Any], key: str) -> str:
    early, late = notebook[f"{key}_early_ms"], notebook[f"{key}_late_ms"]
    return f"| {step} | {early:.2f} | {late:.2f} | {late / early:.2f} | {notebook[f'{key}_total_s']:.2f} |"


def render_scale(result: dict[str, Any]) -> str:
    """Format the scale scenario as Markdown tables."""
    lines = [
        f"**{result['scenario']}** (medians of {result['reps']} runs; at 10,000 and more, {result['large_reps']} "
        f"for a contender whose first run there took {result['repeat_under_s']:g} s or longer; "
        f"budget {result['budget_s']:g} s per run). ms/node from the gaps between consecutive node starts: "
        "median over the first and last tenth of the run (maps: mean, their items start concurrently); "
        "overall = run time / nodes; first node = from the run call to the first node's start; "
        "bytes/node = store growth / nodes (or items), after a WAL checkpoint; beyond values = bytes/node "
        "less the pages of the rows holding the values nodes changed (durable_nb's blobs table and index; "
        "the peers keep values inside their checkpoint rows)",
        "",
        "| contender | shape | size | ms/node start | ms/node end | end/start | overall ms/node | first node s"
        " | bytes/node | beyond values | status s | history s | history rows |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        head = f"| {row['contender']} | {row['shape']} | {row['size']:,} |"
        if "skipped" in row:
            lines.append(f"{head} {row['skipped']} | | | | | | | | | |")
            continue
        lines.append(
            f"{head} {_number(row['start_ms'], 3)} | {_number(row['end_ms'], 3)} | "
            f"{_number(row['end_vs_start'], 2)} | {_number(row['overall_ms_per_node'], 3)} | "
            f"{_number(row['first_node_s'], 3)} | {_number(row['bytes_per_checkpoint'], 0)} | "
            f"{_number(row['bytes_per_checkpoint'] - row.get('value_bytes_per_checkpoint', math.nan), 0)} | "
            f"{_number(row['status_s'], 4)} | {_number(row['history_s'], 4)} | {_number(row['history_rows'], 0)} |"
        )
    listed = {row["contender"]: (row["status"], row["history"]) for row in result["rows"] if "status" in row}
    lines += ["", "Listings: " + "; ".join(f"{name}: {s} / {h}" for name, (s, h) in listed.items())]
    for row in result["rows"]:
        if row.get("listing_error"):
            lines.append(f"- {row['contender']} {row['shape']} {row['size']:,}: {row['listing_error']}")
    commit_rows = [row for row in result["rows"] if not math.isnan(row.get("commit_start_ms", math.nan))]
    if commit_rows:
        lines += [
            "",
            "Commit-time check: gaps between consecutive commits (durable_nb: `created_at` of the `after:` "
            "checkpoints in `dnb.history`; LangGraph: when the saver's `put` (chain) or a worker's `put_writes` "
            "(map) returned)",
            "",
            "| contender | shape | size | ms/commit start | ms/commit end | end/start |",
            "|---|---|---:|---:|---:|---:|",
        ]
        for row in commit_rows:
            ratio = row["commit_end_ms"] / row["commit_start_ms"] if row["commit_start_ms"] else math.nan
            lines.append(
                f"| {row['contender']} | {row['shape']} | {row['size']:,} | {_number(row['commit_start_ms'], 3)} | "
                f"{_number(row['commit_end_ms'], 3)} | {_number(ratio, 2)} |"
            )
    notebook = result.get("notebook")
    if notebook:
        lines.append("")
        if "skipped" in notebook:
            lines.append(f"**Notebook**: {notebook['skipped']}")
        else:
            early, late = notebook["early_cell"], notebook["late_cell"]
            lines += [
                f"**A notebook of {notebook['cells']} `%%durable` cells** in an in-process IPython shell "
                f"(ms per cell, median of the 21 cells around each; {notebook['bytes_per_cell']:,.0f} bytes "
                "stored per cell)",
                "",
                f"| step | cell {early} | cell {late} | ratio | whole notebook s |",
                "|---|---:|---:|---:|---:|",
                _notebook_line("execute + commit", notebook, "commit"),
                _notebook_line("restore in a new shell", notebook, "restore"),
            ]
    return "\n".join(lines)


def json_safe(value: Any) -> Any:
    """``value`` with NaN as None, for strict JSON."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [json_safe(item) for item in value]
    return value


def main(argv: list[str] | None = None) -> int:
    """Run the scale scenario and print its tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000,10000", help="comma-separated run sizes")
    parser.add_argument("--reps", type=int, default=3, help="runs per contender and size")
    parser.add_argument("--large-reps", type=int, default=1, help="runs per contender at sizes of 10,000 and more")
    parser.add_argument(
        "--repeat-under", type=float, default=120.0, help="at 10,000 and more, run --reps times below these seconds"
    )
    parser.add_argument("--budget", type=float, default=600.0, help="seconds a run may take before it is skipped")
    parser.add_argument("--contenders", default=",".join(CONTENDERS), help=f"some of {','.join(CONTENDERS)}")
    parser.add_argument("--shapes", default=",".join(SHAPES), help="chain, map or both")
    parser.add_argument("--cells", type=int, default=300, help="cells of the notebook (0: leave it out)")
    parser.add_argument("--memory-gb", type=float, default=12.0, help="address-space limit of each child process")
    parser.add_argument("--json", default=None, help="where to write the results")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(json.loads(args.child))
        return 0
    contenders = tuple(args.contenders.split(","))
    shapes = tuple(args.shapes.split(","))
    if set(contenders) - set(CONTENDERS) or set(shapes) - set(SHAPES):
        parser.error(f"contenders are {', '.join(CONTENDERS)}; shapes are {', '.join(SHAPES)}")
    sizes = [int(size) for size in args.sizes.split(",")]
    result = scale_scenario(
        sizes,
        args.reps,
        budget_s=args.budget,
        large_reps=args.large_reps,
        repeat_under_s=args.repeat_under,
        contenders=contenders,
        shapes=shapes,
        notebook_cells=args.cells,
        memory_gb=args.memory_gb,
    )
    from .__main__ import describe_machine, versions

    print(render_scale(result))
    print()
    machine, peers = describe_machine(), versions()
    print(f"machine: {machine}")
    print(f"versions: {peers}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        report = json_safe({"machine": machine, "versions": peers, "scale": result})
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
