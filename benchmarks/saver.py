"""LangGraph with its own checkpointers against DurableSaver, in one run (issue 19 item 4).

The same LangGraph graphs, compiled once per checkpointer, measured side by side in one process:

- per step: a chain of N nodes (50) run to completion with ``durability="sync"``, with a small
  state and with a 1 MB value no node changes (a new random value each run, so that every
  checkpointer stores it at least once); ms per step, and the database's growth per run (SQLite:
  its files, WAL included, after a checkpoint; PostgreSQL: the sizes of its relations);
- history: building one thread of 10,000 checkpoints, then listing it (``saver.list(config)``
  and ``graph.get_state_history(config)``);
- the double-resume race: a thread paused at ``interrupt()``; two processes, released together
  by a barrier file once both are ready, each resume it with ``Command(resume=…)`` (and, for
  DurableSaver, also with ``durable_nb.langgraph.resume()``); the node after the interrupt
  appends a line to a file. How many lines per race (1 is correct)?

Checkpointers: LangGraph's SqliteSaver and DurableSaver on SQLite; with a PostgreSQL URL also
DurableSaver on PostgreSQL and LangGraph's PostgresSaver. Everything is interleaved (A B C A B
C …) after a warm-up; ratios are against SqliteSaver (against DurableSaver when LangGraph's
SQLite saver is not installed).

``python -m benchmarks --only saver [--reps N] [--postgres URL]`` (``--smoke``: tiny sizes, SQLite only).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

ROOT = Path(__file__).resolve().parent.parent
SQLITE_SAVER = "LangGraph SqliteSaver"
DURABLE_SQLITE = "DurableSaver (SQLite)"
DURABLE_POSTGRES = "DurableSaver (PostgreSQL)"
POSTGRES_SAVER = "LangGraph PostgresSaver"


class Chain(TypedDict, total=False):
    """The state of the chain: the last step, and the value no node changes."""

    step: int
    payload: bytes


class Counter(TypedDict):
    """The state of the history graph."""

    count: int


class Review(TypedDict, total=False):
    """The state of the race graph."""

    sent: bool


@dataclass
class Contender:
    """One checkpointer over its own database: a folder (SQLite) or a schema (PostgreSQL)."""

    name: str
    target: str
    postgres: str | None = None

    def open(self) -> Any:
        """Return a new checkpointer over this contender's database."""
        return open_saver(self.name, self.target, self.postgres)

    def size(self) -> int:
        """Bytes the database takes now."""
        if self.postgres is None:
            return _folder_size(Path(self.target))
        return _schema_size(self.postgres, self.target)

    def close(self) -> None:
        """Forget the database (drop the schema; the temporary folder goes with its parent)."""
        if self.postgres is not None:
            import psycopg

            with psycopg.connect(self.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.target}" CASCADE')


def open_saver(name: str, target: str, postgres: str | None = None) -> Any:
    """Return the checkpointer ``name`` over a folder (SQLite) or a schema of ``postgres``."""
    if name == SQLITE_SAVER:
        from langgraph.checkpoint.sqlite import SqliteSaver

        saver = SqliteSaver(sqlite3.connect(Path(target) / "langgraph.db", check_same_thread=False))
        saver.setup()
        return saver
    from durable_nb.langgraph import DurableSaver

    if name == DURABLE_SQLITE:
        return DurableSaver.from_url(f"sqlite:///{Path(target) / 'runs.db'}")
    assert postgres is not None, name
    if name == DURABLE_POSTGRES:
        return DurableSaver.from_url(f"{postgres}{'&' if '?' in postgres else '?'}schema={target}")
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{target}"')
    connection = psycopg.connect(
        postgres, autocommit=True, prepare_threshold=0, row_factory=dict_row, options=f"-c search_path={target}"
    )
    saver = PostgresSaver(connection)
    saver.setup()
    return saver


def _folder_size(folder: Path) -> int:
    for db in folder.glob("*.db"):
        with closing(sqlite3.connect(db)) as conn:
            # RESTART, not TRUNCATE: later commits write over the WAL file, as a long-lived store's do
            # (see benchmarks.__main__._size); the WAL file itself is not counted.
            conn.execute("PRAGMA wal_checkpoint(RESTART)")
    return sum(
        path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.name.endswith(("-wal", "-shm"))
    )


def _schema_size(postgres: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(postgres, autocommit=True) as conn:
        row = conn.execute(
            "SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


def contenders(root: Path, label: str, postgres: str | None) -> list[Contender]:
    """Return the installed checkpointers, each over a new database under ``root`` (or schema)."""
    names = [DURABLE_SQLITE]
    if _installed("langgraph.checkpoint.sqlite"):
        names.insert(0, SQLITE_SAVER)
    if postgres:
        names.append(DURABLE_POSTGRES)
        if _installed("langgraph.checkpoint.postgres"):
            names.append(POSTGRES_SAVER)
    found = []
    for index, name in enumerate(names):
        if name in (SQLITE_SAVER, DURABLE_SQLITE):
            folder = root / f"{label}-{index}"
            folder.mkdir()
            found.append(Contender(name, str(folder)))
        else:
            found.append(Contender(name, f"bench_{label}_{index}_{uuid.uuid4().hex[:8]}", postgres))
    return found


def _installed(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


# -- graphs ------------------------------------------------------------------------------------


def chain_graph(saver: Any, nodes: int) -> Any:
    """A chain of ``nodes`` nodes, each writing its index."""
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(Chain)
    previous = START
    for index in range(nodes):

        def step(state: Chain, index: int = index) -> Chain:
            return {"step": index}

        graph.add_node(f"n{index}", step)
        graph.add_edge(previous, f"n{index}")
        previous = f"n{index}"
    graph.add_edge(previous, END)
    return graph.compile(checkpointer=saver)


def counter_graph(saver: Any, checkpoints: int) -> Any:
    """One node looping until the thread holds ``checkpoints`` checkpoints (the input's included)."""
    from langgraph.graph import END, START, StateGraph

    def step(state: Counter) -> Counter:
        return {"count": state["count"] + 1}

    def route(state: Counter) -> str:
        return "step" if state["count"] < checkpoints - 2 else END

    graph = StateGraph(Counter)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", route)
    return graph.compile(checkpointer=saver)


def review_graph(saver: Any, effects: Path) -> Any:
    """One node that waits at ``interrupt()``, then appends a line to ``effects`` (the side effect)."""
    from langgraph.graph import END, START, StateGraph
    from langgraph.types import interrupt

    def review(state: Review) -> Review:
        interrupt("send?")
        with effects.open("a") as handle:
            handle.write(f"sent {os.getpid()}\n")
        return {"sent": True}

    graph = StateGraph(Review)
    graph.add_node("review", review)
    graph.add_edge(START, "review")
    graph.add_edge("review", END)
    return graph.compile(checkpointer=saver)


def _thread(name: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": name}}


# -- measures ----------------------------------------------------------------------------------


def per_step(root: Path, postgres: str | None, nodes: int, reps: int, payload: bool) -> dict[str, Any]:
    """Time the chain per checkpointer, interleaved; return ms per step and growth per run."""
    label = "large" if payload else "small"
    found = contenders(root, label, postgres)
    apps = {c.name: chain_graph(c.open(), nodes) for c in found}

    def run(contender: Contender) -> tuple[float, int]:
        state: Chain = {"payload": os.urandom(1_000_000)} if payload else {"step": -1}
        before = contender.size()
        started = time.perf_counter()
        apps[contender.name].invoke(state, _thread(uuid.uuid4().hex), durability="sync")
        elapsed = time.perf_counter() - started
        return elapsed / nodes * 1000, contender.size() - before

    for contender in found:
        run(contender)  # warm-up: schema, imports, caches
    times: dict[str, list[float]] = {c.name: [] for c in found}
    growth: dict[str, list[int]] = {c.name: [] for c in found}
    for _ in range(reps):
        for contender in found:
            ms, grown = run(contender)
            times[contender.name].append(ms)
            growth[contender.name].append(grown)
    _release([app.checkpointer for app in apps.values()], found)
    reference = statistics.median(times[found[0].name])
    rows = [
        {
            "checkpointer": name,
            "ms_per_step": round(statistics.median(values), 4),
            "min": round(min(values), 4),
            "max": round(max(values), 4),
            "vs_reference": round(statistics.median(values) / reference, 2),
            "growth_bytes_per_run": int(statistics.median(growth[name])),
        }
        for name, values in times.items()
    ]
    title = "1 MB value no node changes" if payload else "small state"
    return {"scenario": title, "nodes": nodes, "reps": reps, "reference": found[0].name, "rows": rows}


def history(root: Path, postgres: str | None, checkpoints: int, reps: int) -> dict[str, Any]:
    """Build a thread of ``checkpoints`` checkpoints per checkpointer, then time listing it, interleaved."""
    found = contenders(root, "history", postgres)
    apps = {c.name: counter_graph(c.open(), checkpoints) for c in found}
    config = {**_thread("history"), "recursion_limit": checkpoints + 10}
    build: dict[str, float] = {}
    for contender in found:
        started = time.perf_counter()
        apps[contender.name].invoke({"count": 0}, config, durability="sync")
        build[contender.name] = time.perf_counter() - started
    listings = {
        "list": lambda app: list(app.checkpointer.list(config)),
        "history": lambda app: list(app.get_state_history(config)),
    }
    counted = {c.name: len(listings["list"](apps[c.name])) for c in found}  # warm-up, and the count
    times: dict[tuple[str, str], list[float]] = {(c.name, k): [] for c in found for k in listings}
    for _ in range(reps):
        for contender in found:
            for kind, listing in listings.items():
                started = time.perf_counter()
                listing(apps[contender.name])
                times[contender.name, kind].append(time.perf_counter() - started)
    _release([app.checkpointer for app in apps.values()], found)
    reference = found[0].name
    rows = []
    for contender in found:
        name = contender.name
        listed = statistics.median(times[name, "list"])
        rows.append(
            {
                "checkpointer": name,
                "checkpoints": counted[name],
                "build_s": round(build[name], 3),
                "build_ms_per_checkpoint": round(build[name] / counted[name] * 1000, 3),
                "build_vs_reference": round(build[name] / build[reference], 2),
                "list_s": round(listed, 4),
                "list_vs_reference": round(listed / statistics.median(times[reference, "list"]), 2),
                "history_s": round(statistics.median(times[name, "history"]), 4),
            }
        )
    return {"checkpoints": checkpoints, "reps": reps, "reference": reference, "rows": rows}


COMMAND = "Command(resume=True)"
RESUME = "durable_nb.langgraph.resume()"

RACER = """
import json, sys, time
from pathlib import Path
from langgraph.types import Command
from benchmarks.saver import COMMAND, open_saver, review_graph

name, target, postgres, folder, thread, me, how = sys.argv[1:8]
folder = Path(folder)
app = review_graph(open_saver(name, target, postgres or None), folder / (thread + ".effects"))
config = {"configurable": {"thread_id": thread}}
(folder / (thread + "." + me + ".ready")).touch()
while not (folder / (thread + ".go")).exists():
    time.sleep(0.0005)
try:
    if how == COMMAND:
        app.invoke(Command(resume=True), config)
    else:
        from durable_nb.langgraph import resume

        resume(app, config)
    print(json.dumps({"error": None}))
except Exception as error:
    print(json.dumps({"error": type(error).__name__ + ": " + str(error)[:200]}))
"""


def race(root: Path, postgres: str | None, races: int) -> dict[str, Any]:
    """Per checkpointer, ``races`` double resumes by two processes; count side effects per race.

    Every checkpointer is resumed with ``Command(resume=True)``; DurableSaver also with
    ``durable_nb.langgraph.resume()``, which claims the interrupt before the graph runs.
    """
    found = contenders(root, "race", postgres)
    folder = root / "race"
    folder.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    ways = [(c, COMMAND) for c in found] + [(c, RESUME) for c in found if c.name.startswith("DurableSaver")]
    effects: dict[tuple[str, str], list[int]] = {(c.name, how): [] for c, how in ways}
    errors: dict[tuple[str, str], list[str]] = {(c.name, how): [] for c, how in ways}
    for trial in range(races):
        for index, (contender, how) in enumerate(ways):
            thread = f"race-{index}-{trial}"
            # The thread is started in this process and paused at its interrupt.
            saver = contender.open()
            paused = review_graph(saver, folder / f"{thread}.effects").invoke({}, _thread(thread))
            assert "__interrupt__" in paused, paused
            _release([saver])
            arguments = [contender.name, contender.target, contender.postgres or "", str(folder), thread]
            racers = [
                subprocess.Popen(
                    [sys.executable, "-c", RACER, *arguments, str(me), how],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
                for me in range(2)
            ]
            _barrier(folder, thread, racers)
            for racer in racers:
                out, err = racer.communicate(timeout=300)
                if racer.returncode != 0:
                    raise RuntimeError(f"a {contender.name} racer failed: {err[-1500:]}")
                error = json.loads(out.strip().splitlines()[-1])["error"]
                if error:
                    errors[contender.name, how].append(error)
            written = folder / f"{thread}.effects"
            effects[contender.name, how].append(len(written.read_text().splitlines()) if written.exists() else 0)
    _release([], found)
    rows = [
        {
            "checkpointer": name,
            "resumed_with": how,
            "effects_per_race": counts,
            "double_effect_races": sum(count > 1 for count in counts),
            "racers_raised": errors[name, how],
        }
        for (name, how), counts in effects.items()
    ]
    return {"races": races, "rows": rows}


def _barrier(folder: Path, thread: str, racers: list[subprocess.Popen[str]]) -> None:
    """Release the racers together once both have built their graph and wait for the go file."""
    deadline = time.monotonic() + 300
    while not all((folder / f"{thread}.{me}.ready").exists() for me in range(len(racers))):
        if any(racer.poll() is not None for racer in racers) or time.monotonic() > deadline:
            problems = [racer.communicate()[1][-1500:] for racer in racers if racer.poll() is not None]
            raise RuntimeError(f"a racer stopped before the barrier: {problems}")
        time.sleep(0.01)
    (folder / f"{thread}.go").touch()


def _release(savers: list[Any], found: tuple[Contender, ...] | list[Contender] = ()) -> None:
    """Close the checkpointers' connections (durable_nb's shared stores too), then the databases."""
    from durable_nb.store import disconnect

    for saver in savers:
        conn = getattr(saver, "conn", None)  # LangGraph's savers hold the connection they were given
        if conn is not None:
            conn.close()
    disconnect()
    for contender in found:
        contender.close()


def saver_scenario(
    nodes: int, reps: int, checkpoints: int, listing_reps: int, races: int, postgres: str | None
) -> dict[str, Any] | None:
    """Run the four measures; return their figures (None without LangGraph)."""
    if not _installed("langgraph.graph"):
        print("(LangGraph not installed: pip install 'durable-nb[bench]')")
        return None
    with tempfile.TemporaryDirectory(prefix="durable-nb-saver-") as temp:
        root = Path(temp)
        steps = [per_step(root, postgres, nodes, reps, payload) for payload in (False, True)]
        listed = history(root, postgres, checkpoints, listing_reps)
        raced = race(root, postgres, races)
    return {"per_step": steps, "history": listed, "race": raced}


def _short(name: str) -> str:
    return name.removeprefix("LangGraph ")


def render_saver(result: dict[str, Any]) -> str:
    """Format the scenario as Markdown tables."""
    lines = []
    for table in result["per_step"]:
        reference = _short(table["reference"])
        lines += [
            f"**LangGraph checkpointers, per step: {table['scenario']}** ({table['nodes']}-node chain, "
            f'durability="sync", {table["reps"]} interleaved runs each, medians)',
            "",
            f"| checkpointer | ms/step | min-max | x {reference} | database growth/run |",
            "|---|---:|---:|---:|---:|",
        ]
        for row in table["rows"]:
            lines.append(
                f"| {row['checkpointer']} | {row['ms_per_step']:.3f} | {row['min']:.3f}-{row['max']:.3f} | "
                f"{row['vs_reference']:.2f} | {row['growth_bytes_per_run'] / 1e6:.2f} MB |"
            )
        lines.append("")
    listed = result["history"]
    reference = _short(listed["reference"])
    lines += [
        f'**A thread of {listed["checkpoints"]:,} checkpoints** (built once each, durability="sync"; '
        f"listings {listed['reps']} interleaved runs each, medians)",
        "",
        f"| checkpointer | checkpoints | build s | ms/checkpoint | x {reference} | `list(config)` s | "
        f"x {reference} | `get_state_history` s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in listed["rows"]:
        lines.append(
            f"| {row['checkpointer']} | {row['checkpoints']:,} | {row['build_s']:.2f} | "
            f"{row['build_ms_per_checkpoint']:.3f} | {row['build_vs_reference']:.2f} | {row['list_s']:.3f} | "
            f"{row['list_vs_reference']:.2f} | {row['history_s']:.3f} |"
        )
    raced = result["race"]
    plural = "s" if raced["races"] != 1 else ""
    lines += [
        "",
        f"**Two processes resume the same interrupt at once** ({raced['races']} race{plural} each; "
        "1 side effect is correct)",
        "",
        "| checkpointer | resumed with | side effects per race | races with a double effect | resumers that raised |",
        "|---|---|---|---:|---|",
    ]
    for row in raced["rows"]:
        counts = ", ".join(str(count) for count in row["effects_per_race"])
        raised = sorted({error.split(":", 1)[0] for error in row["racers_raised"]})
        lines.append(
            f"| {row['checkpointer']} | `{row['resumed_with']}` | {counts} | {row['double_effect_races']} | "
            f"{len(row['racers_raised'])}{' (' + ', '.join(raised) + ')' if raised else ''} |"
        )
    return "\n".join(lines)
