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
    """durable_nb: a Workflow chain on the embedded SQLite store (or PostgreSQL with ``postgres=URL``)."""

    def __init__(self, durability: str = "full", postgres: str | None = None) -> None:
        self.durability = durability
        self.postgres = postgres
        if postgres:
            self.name = "durable_nb (PostgreSQL)"
        else:
            self.name = f"durable_nb ({'synchronous=FULL' if durability == 'full' else 'durability=process'})"

    def prepare(self, folder: Path, nodes: int, payload: bytes | None) -> None:
        import durable_nb as dnb

        self.path = folder / f"durable_nb_{self.durability}.db"
        if self.postgres:
            self.schema = f"bench_{uuid.uuid4().hex[:8]}"
            self.url = f"{self.postgres}{'&' if '?' in self.postgres else '?'}schema={self.schema}"
            store = dnb.connect(self.url)
        else:
            self.url = f"sqlite:///{self.path}"
            store = dnb.connect(self.url, durability=self.durability)
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

    def close(self) -> None:
        """Close the store; on PostgreSQL drop its schema, so that a benchmark leaves nothing behind."""
        from durable_nb.store import disconnect

        disconnect(self.url)
        if self.postgres:
            import psycopg

            with psycopg.connect(self.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')


class LangGraphSqlite:
    """LangGraph with its SqliteSaver, durability="sync" (a checkpoint written before each next step)."""

    name = "LangGraph SqliteSaver (sync)"

    def saver(self, folder: Path) -> Any:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.path = folder / "langgraph.db"
        return SqliteSaver(sqlite3.connect(self.path, check_same_thread=False))

    def prepare(self, folder: Path, nodes: int, payload: bytes | None) -> None:
        from typing import TypedDict

        from langgraph.graph import END, START, StateGraph

        class State(TypedDict, total=False):
            step: int
            payload: bytes

        graph = StateGraph(State)
        previous = START
        for index in range(nodes):

            def step(state: State, index: int = index) -> dict[str, Any]:
                return {"step": index}

            graph.add_node(f"n{index}", step)
            graph.add_edge(previous, f"n{index}")
            previous = f"n{index}"
        graph.add_edge(previous, END)
        self.app = graph.compile(checkpointer=self.saver(folder))
        self.input = {"payload": payload} if payload is not None else {"step": -1}

    def run_once(self) -> None:
        config = {"configurable": {"thread_id": uuid.uuid4().hex}}
        self.app.invoke(self.input, config, durability="sync")

    def files(self) -> list[Path]:
        return [self.path, Path(f"{self.path}-wal")]


class Dbos:
    """DBOS Transact with its SQLite system database: one workflow of one step per node."""

    name = "DBOS (SQLite system database)"

    def database_url(self, folder: Path) -> str:
        self.path = folder / "dbos.db"
        return f"sqlite:///{self.path}"

    def prepare(self, folder: Path, nodes: int, payload: bytes | None) -> None:
        from dbos import DBOS

        DBOS(config={"name": "bench", "system_database_url": self.database_url(folder), "log_level": "ERROR"})

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


class FloorPostgres:
    """One INSERT + COMMIT round trip per node on the PostgreSQL server."""

    name = "floor (INSERT+COMMIT, PostgreSQL)"

    def __init__(self, url: str) -> None:
        self.url = url

    def prepare(self, folder: Path, nodes: int, payload: bytes | None) -> None:
        import psycopg

        self.nodes = nodes
        self.conn = psycopg.connect(self.url)
        self.conn.execute("CREATE TABLE IF NOT EXISTS bench_floor (id BIGSERIAL PRIMARY KEY, run TEXT, v BYTEA)")
        self.conn.commit()
        self.row = os.urandom(64)

    def run_once(self) -> None:
        run = uuid.uuid4().hex
        for _ in range(self.nodes):
            self.conn.execute("INSERT INTO bench_floor (run, v) VALUES (%s, %s)", (run, self.row))
            self.conn.commit()

    def files(self) -> list[Path]:
        return []


class LangGraphPostgres(LangGraphSqlite):
    """LangGraph with its PostgresSaver, durability="sync"."""

    name = "LangGraph PostgresSaver (sync)"

    def __init__(self, url: str) -> None:
        self.url = url

    def saver(self, folder: Path) -> Any:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        connection = psycopg.connect(self.url, autocommit=True, prepare_threshold=0, row_factory=dict_row)
        saver = PostgresSaver(connection)
        saver.setup()
        return saver

    def files(self) -> list[Path]:
        return []


class DbosPostgres(Dbos):
    """DBOS Transact with its PostgreSQL system database."""

    name = "DBOS (PostgreSQL system database)"

    def __init__(self, url: str) -> None:
        self.url = url

    def database_url(self, folder: Path) -> str:
        return self.url

    def files(self) -> list[Path]:
        return []


def postgres_contenders(url: str) -> list[Any]:
    """Return the PostgreSQL contenders: the floor, durable_nb and the installed peers."""
    found: list[Any] = [FloorPostgres(url), DurableNb(postgres=url)]
    try:
        import langgraph.checkpoint.postgres  # noqa: F401

        found.append(LangGraphPostgres(url))
    except ImportError:
        pass
    try:
        import dbos  # noqa: F401

        found.append(DbosPostgres(url))
    except ImportError:
        pass
    return found


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
