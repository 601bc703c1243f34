"""What a LangGraph step and a checkpoint of a long thread cost each SQLite checkpointer, counted.

``python -m benchmarks.saver_counts [--runs N] [--checkpoints N]``

Nothing here is timed: each figure is a count, the same on a loaded machine. LangGraph's
SqliteSaver and DurableSaver (SQLite, ``synchronous=FULL``), on the benchmark's 50-node chain
(per step) and on one thread of ``--checkpoints`` checkpoints (per checkpoint):

- Python calls per ``put`` and per ``put_writes``: cProfile's count of function calls, built-ins
  included, in the thread that made the call;
- SQL statements per call (BEGIN and COMMIT included), counted in the thread that ran them;
- SQLite opcodes per call: the length of each statement's program (``EXPLAIN``), summed: what
  SQLite runs for the call, loops aside (these statements have none);
- WAL frames written per step or checkpoint (both calls together: LangGraph makes them from two
  threads at once): the -wal file's growth over a page and its header, checkpoints held off;
- Python calls per checkpoint listed by ``list(saver.list(config))``.

CPU instructions (what these calls stand for) are counted with callgrind: run a script making
N and then 3N steps under ``valgrind --tool=callgrind`` and divide the difference by 2N.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import tempfile
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from .saver import DURABLE_SQLITE, SQLITE_SAVER, _installed, _release, chain_graph, counter_graph, open_saver

NODES = 50
CALLS = ("put", "put_writes")


class Counts:
    """Calls, Python calls and statements of a checkpointer's put and put_writes, and WAL frames."""

    def __init__(self) -> None:
        self.rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        self.statements: dict[str, list[str]] = defaultdict(list)
        self.opcodes: dict[str, int] = {}
        self.frames = 0
        self._active: dict[int, str] = {}
        self._lock = threading.Lock()

    def _statement(self, sql: str) -> None:
        name = self._active.get(threading.get_ident())
        if name is not None:
            with self._lock:
                self.rows[name][2] += 1
                self.statements[name].append(sql)

    @contextmanager
    def counting(self, saver: Any) -> Iterator[None]:
        """Count the saver's calls while the block runs (its class's methods wrapped)."""
        conn, path = _connection(saver)
        conn.execute("PRAGMA wal_autocheckpoint=0")  # the -wal file only grows: its growth is what was written
        frame = conn.execute("PRAGMA page_size").fetchone()[0] + 24
        wal = Path(f"{path}-wal")
        before = wal.stat().st_size if wal.exists() else 0
        conn.set_trace_callback(self._statement)
        owner = type(saver)
        originals = {name: getattr(owner, name) for name in CALLS}
        for name, original in originals.items():
            setattr(owner, name, self._wrapped(name, original))
        try:
            yield
        finally:
            for name, original in originals.items():
                setattr(owner, name, original)
            conn.set_trace_callback(None)
            self.frames += ((wal.stat().st_size if wal.exists() else 0) - before) // frame
            self.opcodes = {name: _opcodes(path, texts) for name, texts in self.statements.items()}

    def _wrapped(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        # LangGraph reads put_writes' signature (does it take task_path?): kept by wraps().
        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self._active[threading.get_ident()] = name
            profile = cProfile.Profile()
            profile.enable()
            try:
                return original(*args, **kwargs)
            finally:
                profile.disable()
                self._active.pop(threading.get_ident(), None)
                with self._lock:
                    row = self.rows[name]
                    row[0] += 1
                    row[1] += pstats.Stats(profile).total_calls  # type: ignore[attr-defined]

        return counted

    def per(self, units: int) -> dict[str, float]:
        """The counts per call of each method, and WAL frames per ``units`` (steps or checkpoints)."""
        found: dict[str, float] = {}
        for name in CALLS:
            calls, python, statements = self.rows[name]
            found[f"{name} Python calls"] = round(python / max(calls, 1), 1)
            found[f"{name} statements"] = round(statements / max(calls, 1), 2)
            found[f"{name} SQLite opcodes"] = round(self.opcodes.get(name, 0) / max(calls, 1), 1)
        found["WAL frames"] = round(self.frames / units, 2)
        return found


def _opcodes(path: str, statements: list[str]) -> int:
    """The opcodes of the programs SQLite compiles the statements (as traced: values written in) to."""
    import sqlite3

    conn = sqlite3.connect(path)
    conn.text_factory = bytes  # a program's operands hold values as stored: not always text
    try:
        return sum(len(conn.execute(f"EXPLAIN {sql}").fetchall()) for sql in statements)
    finally:
        conn.close()


def _connection(saver: Any) -> tuple[Any, str]:
    """The checkpointer's sqlite3 connection (opened if need be) and its file."""
    store = getattr(saver, "store", None)
    if store is None:  # LangGraph's SqliteSaver holds the connection it was given
        return saver.conn, saver.conn.execute("PRAGMA database_list").fetchone()[2]
    store._call(lambda conn: None)
    return store._conn, store.path


def per_step(folder: Path, name: str, runs: int) -> dict[str, float]:
    """Counts per step of the 50-node chain run ``runs`` times (after one run to warm up)."""
    app = chain_graph(open_saver(name, str(folder)), NODES)

    def run() -> None:
        app.invoke({"step": -1}, {"configurable": {"thread_id": uuid.uuid4().hex}}, durability="sync")

    run()
    counts = Counts()
    with counts.counting(app.checkpointer):
        for _ in range(runs):
            run()
    _release([app.checkpointer])
    return counts.per(runs * NODES)


def per_checkpoint(folder: Path, name: str, checkpoints: int) -> dict[str, float]:
    """Counts per checkpoint of one thread of ``checkpoints`` checkpoints, built then listed."""
    saver = open_saver(name, str(folder))
    app = counter_graph(saver, checkpoints)
    config = {"configurable": {"thread_id": "long"}, "recursion_limit": checkpoints + 10}
    counts = Counts()
    with counts.counting(saver):
        app.invoke({"count": 0}, config, durability="sync")
    found = counts.per(checkpoints)
    listed = len(list(saver.list(config)))  # warm-up
    profile = cProfile.Profile()
    profile.enable()
    list(saver.list(config))
    profile.disable()
    found["list Python calls per checkpoint"] = round(pstats.Stats(profile).total_calls / listed, 1)  # type: ignore[attr-defined]
    _release([saver])
    return found


def main() -> None:
    """Print the counts of each checkpointer side by side."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.saver_counts", description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="chain runs counted (default 3)")
    parser.add_argument("--checkpoints", type=int, default=1000, help="checkpoints of the long thread (default 1000)")
    args = parser.parse_args()
    names = [
        name
        for name in (SQLITE_SAVER, DURABLE_SQLITE)
        if name != SQLITE_SAVER or _installed("langgraph.checkpoint.sqlite")
    ]
    with tempfile.TemporaryDirectory(prefix="durable-nb-saver-counts-") as temp:
        for title, measure, size in (
            (f"per step ({NODES}-node chain, {args.runs} runs)", per_step, args.runs),
            (f"per checkpoint (a thread of {args.checkpoints:,})", per_checkpoint, args.checkpoints),
        ):
            columns = {}
            for index, name in enumerate(names):
                folder = Path(temp) / f"{measure.__name__}-{index}"
                folder.mkdir()
                columns[name] = measure(folder, name, size)
            print(f"**Counted {title}**\n")
            print("| count | " + " | ".join(columns) + " |")
            print("|---|" + "---:|" * len(columns))
            for key in next(iter(columns.values())):
                print(f"| {key} | " + " | ".join(str(found[key]) for found in columns.values()) + " |")
            print()


if __name__ == "__main__":
    main()
