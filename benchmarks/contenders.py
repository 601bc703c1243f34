"""The contenders: one class each, with the same interface: prepare(folder, nodes, payload), run_once()."""

from __future__ import annotations

import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any


class Floor:
    """One INSERT + COMMIT per node in SQLite WAL with synchronous=FULL: the cost of durability itself."""

    name = "floor (INSERT+COMMIT, FULL)"

    def prepare(self, folder: Path, nodes: int, payload: bytes | None) -> None:
        self.nodes = nodes
        self.path = folder / "floor.db"
        self.conn = sqlite3.connect(self.path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, run TEXT, v BLOB)")
        self.row = os.urandom(64)

    def run_once(self) -> None:
        run = uuid.uuid4().hex
        for _ in range(self.nodes):
            self.conn.execute("BEGIN IMMEDIATE")
            self.conn.execute("INSERT INTO t (run, v) VALUES (?, ?)", (run, self.row))
            self.conn.execute("COMMIT")

    def files(self) -> list[Path]:
        return [self.path]


class DurableNb:
    """durable_nb: a Workflow chain on the embedded SQLite store."""

    def __init__(self, durability: str = "full") -> None:
        self.durability = durability
        self.name = f"durable_nb ({'synchronous=FULL' if durability == 'full' else 'durability=process'})"

    def prepare(self, folder: Path, nodes: int, payload: bytes | None) -> None:
        import durable_nb as dnb

        self.path = folder / f"durable_nb_{self.durability}.db"
        store = dnb.connect(f"sqlite:///{self.path}", durability=self.durability)
        self.flow = dnb.Workflow(f"chain-{self.durability}", store=store)
        previous = None
        for index in range(nodes):

            def step(state: dict[str, Any], index: int = index) -> dict[str, Any]:
                return {"step": index}

            step.__name__ = f"n{index}"
            self.flow.node(step, after=previous, retry_count=0)
            previous = step.__name__
        self.input = {"payload": payload} if payload is not None else {}

    def run_once(self) -> None:
        run = self.flow.run(self.input)
        assert run.status == "completed", run

    def files(self) -> list[Path]:
        return [self.path, Path(f"{self.path}-wal")]


class LangGraphSqlite:
    """LangGraph with its SqliteSaver, durability="sync" (a checkpoint written before each next step)."""

    name = "LangGraph SqliteSaver (sync)"

    def prepare(self, folder: Path, nodes: int, payload: bytes | None) -> None:
        from typing import TypedDict

        from langgraph.checkpoint.sqlite import SqliteSaver
        from langgraph.graph import END, START, StateGraph

        class State(TypedDict, total=False):
            step: int
            payload: bytes

        self.path = folder / "langgraph.db"
        self.conn = sqlite3.connect(self.path, check_same_thread=False)
        graph = StateGraph(State)
        previous = START
        for index in range(nodes):

            def step(state: State, index: int = index) -> dict[str, Any]:
                return {"step": index}

            graph.add_node(f"n{index}", step)
            graph.add_edge(previous, f"n{index}")
            previous = f"n{index}"
        graph.add_edge(previous, END)
        self.app = graph.compile(checkpointer=SqliteSaver(self.conn))
        self.input = {"payload": payload} if payload is not None else {"step": -1}

    def run_once(self) -> None:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        self.app.invoke(self.input, config, durability="sync")

    def files(self) -> list[Path]:
        return [self.path, Path(f"{self.path}-wal")]


class Dbos:
    """DBOS Transact with its SQLite system database: one workflow of one step per node."""

    name = "DBOS (SQLite system database)"

    def prepare(self, folder: Path, nodes: int, payload: bytes | None) -> None:
        from dbos import DBOS

        self.path = folder / "dbos.db"
        DBOS(config={"name": "bench", "system_database_url": f"sqlite:///{self.path}", "log_level": "ERROR"})

        @DBOS.step()
        def step(index: int) -> int:
            return index

        @DBOS.workflow()
        def chain(payload: Any) -> int:
            total = 0
            for index in range(nodes):
                total += step(index)
            return total

        DBOS.launch()
        self.chain = chain
        self.payload = payload

    def run_once(self) -> None:
        self.chain(self.payload)

    def files(self) -> list[Path]:
        return [self.path, Path(f"{self.path}-wal")]

    def close(self) -> None:
        from dbos import DBOS

        DBOS.destroy()


def available(smoke: bool) -> list[Any]:
    """Return the contenders whose packages are installed (the peers come with durable-nb[bench])."""
    found: list[Any] = [Floor(), DurableNb("full"), DurableNb("process")]
    if smoke:
        return found
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401

        found.append(LangGraphSqlite())
    except ImportError:
        print("(LangGraph not installed: pip install 'durable-nb[bench]')")
    try:
        import dbos  # noqa: F401

        found.append(Dbos())
    except ImportError:
        print("(DBOS not installed: pip install 'durable-nb[bench]')")
    return found
