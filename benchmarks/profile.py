"""Where the time of one workflow node and of one LangGraph step with DurableSaver goes.

``python -m benchmarks.profile [--runs N] [--postgres URL]``

Two subjects, each a 50-node chain with a small state on a new SQLite store (``synchronous=FULL``;
with ``--postgres`` the saver step on PostgreSQL too):

- one node: durable_nb's own workflow engine (the chain of ``benchmarks.contenders.DurableNb``);
- one saver step: a LangGraph chain compiled with DurableSaver, run with ``durability="sync"``.

Two tables each, per node or step. Phases: timers around the saver's calls and each store
operation, in whatever thread runs them (CPU time of that thread, and wall time), without a
profiler; a store operation's time is part of the call that made it. Areas: cProfile's own time
of every function, summed by where the function lives (an extra run, every thread of the saver's
calls and the engine thread of the workflow's runs profiled; the profiler slows Python, so read
these as shares, not absolute times).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

NODES = 50


class Phases:
    """Calls, thread CPU time and wall time of wrapped functions, from any thread."""

    def __init__(self) -> None:
        self.rows: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
        self.profiles: list[cProfile.Profile] = []
        self.profiling = False
        # The wrapped functions profiled (in the thread that calls them) while ``profiling``.
        self.profiled = frozenset({"put", "put_writes"})
        self._lock = threading.Lock()

    @contextmanager
    def wrapping(self, owner: type, attr: str, label: Callable[..., str]) -> Iterator[None]:
        """Time ``owner.attr`` (labelled by ``label(*args)``) while the block runs."""
        original = getattr(owner, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            profile = cProfile.Profile(time.thread_time) if self.profiling and attr in self.profiled else None
            cpu, wall = time.thread_time(), time.perf_counter()
            if profile is not None:
                profile.enable()
            try:
                return original(*args, **kwargs)
            finally:
                if profile is not None:
                    profile.disable()
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                with self._lock:
                    row = self.rows[label(*args)]
                    row[0] += 1
                    row[1] += cpu
                    row[2] += wall
                    if profile is not None:
                        self.profiles.append(profile)

        setattr(owner, attr, timed)
        try:
            yield
        finally:
            setattr(owner, attr, original)


def _engine_label(*_: Any) -> str:
    return "  engine thread (the run's waves)"


def _store_label(_store: Any, fn: Callable[..., Any], *_: Any) -> str:
    return f"  store: {fn.__name__.lstrip('_')}"


# Where a function lives, by the first fragment of its file (or built-in's name) that matches.
_AREAS = (
    ("durable_nb/langgraph", "durable_nb saver (langgraph/)"),
    ("durable_nb/engine", "durable_nb engine"),
    ("durable_nb/store/codec", "value codec (serialize, sign)"),
    ("durable_nb/store", "durable_nb store (Python)"),
    ("durable_nb/_loop", "sync driver + asyncio"),
    ("asyncio", "sync driver + asyncio"),
    ("selectors", "sync driver + asyncio"),
    ("sqlite3", "SQLite (C: statements, commit)"),
    ("psycopg", "psycopg"),
    ("json", "json / hmac / pickle"),
    ("hmac", "json / hmac / pickle"),
    ("pickle", "json / hmac / pickle"),
    ("_hashlib", "json / hmac / pickle"),
    ("langgraph", "LangGraph"),
    ("langchain", "LangGraph"),
    ("concurrent/futures", "threads and futures"),
    ("threading", "threads and futures"),
    ("_thread", "threads and futures"),
    ("durable_nb", "durable_nb (other)"),
    ("<string>", "dataclass __init__ (records)"),
    ("~", "Python built-ins (dict, isinstance, …)"),
)


def _area(filename: str, name: str) -> str:
    where = f"{filename} {name}"
    return next((area for fragment, area in _AREAS if fragment in where), "other")


def _areas(stats: pstats.Stats, per: int) -> list[tuple[str, float]]:
    totals: dict[str, float] = defaultdict(float)
    for (filename, _line, name), (_cc, _nc, own, _cum, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        totals[_area(filename, name)] += own
    return sorted(((area, seconds / per * 1e6) for area, seconds in totals.items()), key=lambda item: -item[1])


def _table(title: str, phases: Phases, per: int, unit: str, areas: list[tuple[str, float]]) -> str:
    lines = [title, "", f"| phase | calls/{unit} | CPU µs/{unit} | wall µs/{unit} |", "|---|---:|---:|---:|"]
    for label, (calls, cpu, wall) in phases.rows.items():
        lines.append(f"| {label} | {calls / per:.2f} | {cpu / per * 1e6:.0f} | {wall / per * 1e6:.0f} |")
    total = sum(seconds for _, seconds in areas) or 1.0
    lines += ["", f"| area (cProfile own CPU time) | µs/{unit} | share |", "|---|---:|---:|"]
    lines += [f"| {area} | {us:.0f} | {us / total:.0%} |" for area, us in areas if us / total >= 0.005]
    return "\n".join(lines)


def profile_node(folder: Path, runs: int) -> str:
    """Profile durable_nb's workflow engine running the 50-node chain; return the tables."""
    from durable_nb.engine.workflows import engine_thread
    from durable_nb.store.sqlite import SQLiteStore

    from .contenders import DurableNb

    chain = DurableNb()
    chain.prepare(folder, NODES, None)
    chain.run_once()  # warm-up: schema, imports, caches
    phases = Phases()
    # A run's waves go to an engine thread: timed, and profiled, in that thread.
    with (
        phases.wrapping(engine_thread, "run_on_engine_loop", _engine_label),
        phases.wrapping(SQLiteStore, "_call", _store_label),
    ):
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(runs):
            chain.run_once()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    phases.rows = {"node (whole process)": [runs * NODES, cpu, wall], **phases.rows}
    timed = Phases()
    timed.profiling, timed.profiled = True, frozenset({"run_on_engine_loop"})
    with timed.wrapping(engine_thread, "run_on_engine_loop", _engine_label):
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        for _ in range(runs):
            chain.run_once()
        profiler.disable()
    stats = pstats.Stats(profiler)
    for profile in timed.profiles:
        stats.add(profile)
    per = runs * NODES
    title = f"**One workflow node** (durable_nb engine, {NODES}-node chain, SQLite FULL, {runs} runs)"
    return _table(title, phases, per, "node", _areas(stats, per))


def profile_step(folder: Path, runs: int, postgres: str | None) -> str:
    """Profile a LangGraph chain with DurableSaver (durability="sync"); return the tables."""
    from durable_nb.langgraph import DurableSaver
    from durable_nb.store.postgres import PostgresStore
    from durable_nb.store.sqlite import SQLiteStore

    from .saver import DURABLE_POSTGRES, DURABLE_SQLITE, _release, chain_graph, open_saver

    name, target = (DURABLE_POSTGRES, f"profile_{uuid.uuid4().hex[:8]}") if postgres else (DURABLE_SQLITE, str(folder))
    app = chain_graph(open_saver(name, target, postgres), NODES)

    def run() -> None:
        app.invoke({"step": -1}, {"configurable": {"thread_id": uuid.uuid4().hex}}, durability="sync")

    run()  # warm-up
    phases = Phases()
    store_class = PostgresStore if postgres else SQLiteStore
    with (
        phases.wrapping(DurableSaver, "get_tuple", lambda *_: "saver.get_tuple"),
        phases.wrapping(DurableSaver, "put", lambda *_: "saver.put"),
        phases.wrapping(DurableSaver, "put_writes", lambda *_: "saver.put_writes"),
        # Every PostgreSQL operation, commits included, takes its connection in _call_once.
        phases.wrapping(store_class, "_call_once" if postgres else "_call", _store_label),
    ):
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(runs):
            run()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        rows = dict(phases.rows)
        phases.rows = {"step (whole process)": [runs * NODES, cpu, wall], **rows}
        # The areas: the saver's calls profiled in the threads that make them, and the main thread.
        timed = Phases()
        timed.profiling = True
    with (
        timed.wrapping(DurableSaver, "put", lambda *_: "put"),
        timed.wrapping(DurableSaver, "put_writes", lambda *_: "put_writes"),
    ):
        profiler = cProfile.Profile(time.thread_time)
        profiler.enable()
        for _ in range(runs):
            run()
        profiler.disable()
    stats = pstats.Stats(profiler)
    for profile in timed.profiles:
        stats.add(profile)
    _release([app.checkpointer])
    if postgres:
        from .saver import Contender

        Contender(name, target, postgres).close()
    per = runs * NODES
    where = "PostgreSQL" if postgres else "SQLite FULL"
    title = f"**One LangGraph step with DurableSaver** ({NODES}-node chain, {where}, durability=sync, {runs} runs)"
    return _table(title, phases, per, "step", _areas(stats, per))


def main() -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="chain runs per subject (default 10)")
    parser.add_argument("--postgres", help="also profile the saver step on this PostgreSQL URL")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="durable-nb-profile-") as temp:
        root = Path(temp)
        (root / "node").mkdir()
        (root / "step").mkdir()
        print(profile_node(root / "node", args.runs), end="\n\n")
        print(profile_step(root / "step", args.runs, None))
        if args.postgres:
            print()
            print(profile_step(root / "step", args.runs, args.postgres))


if __name__ == "__main__":
    main()
