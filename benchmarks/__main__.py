"""Run the benchmarks: ``python -m benchmarks [--smoke] [--reps N] [--json results.json]``.

Every contender runs in the same process, on the same disk, interleaved (A B C A B C …) after a
warm-up, so that machine noise hits all of them alike. Results are medians with min-max, and
ratios against durable_nb and against the floor (one INSERT + COMMIT per node).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from .agents import agents_scenario
from .agents import installed as agent_contenders
from .agents import render as render_agents
from .contenders import available, postgres_contenders
from .correctness import correctness_scenario, render_correctness
from .dask_map import dask_scenario, render_dask
from .history import history_scenario, render_history
from .notebook import dataframe_scenario, render_dataframe, render_run_all, run_all_scenario
from .realnb import realnb_scenario, render_realnb
from .saver import render_saver, saver_scenario
from .scale import installed_contenders, json_safe, render_scale, scale_scenario
from .service import main as service_main

SCENARIOS = (
    "chain",
    "large",
    "postgres",
    "history",
    "race",
    "dataframe",
    "run_all",
    "realnb",
    "scale",
    "agents",
    "service",
    "saver",
    "dask",
)


def describe_machine() -> str:
    """CPU, cores, memory, OS and Python of this machine, in one line."""
    cpu = platform.processor() or platform.machine()
    memory = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB"
                break
    except OSError:
        pass
    return (
        f"{cpu} ({platform.machine()}), {os.cpu_count()} cores{memory}, {platform.system()} {platform.release()}, "
        f"Python {sys.version.split()[0]}, SQLite {sqlite3.sqlite_version}"
    )


def versions() -> str:
    """The installed versions of durable_nb and its peers."""
    from importlib.metadata import PackageNotFoundError, version

    found = []
    packages = (
        "durable-nb",
        "langgraph",
        "langgraph-checkpoint-sqlite",
        "langgraph-checkpoint-postgres",
        "langchain-openai",
        "dbos",
        "distributed",
    )
    for package in packages:
        try:
            found.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            found.append(f"{package} (not installed)")
    return ", ".join(found)


def _size(files: list[Path]) -> int:
    """The bytes a contender's store holds: its database files once their WAL is copied into them."""
    for path in files:
        if path.suffix == ".db" and path.exists():
            with closing(sqlite3.connect(path)) as conn:
                # RESTART, not TRUNCATE: the next commits write over the WAL file as a long-lived
                # store's do. A WAL truncated before every run makes each commit of the run grow the
                # file, and each fsync then also writes the file's new size and blocks: a state a
                # store is in once, and one that costs more the more pages a commit writes.
                conn.execute("PRAGMA wal_checkpoint(RESTART)")
    return sum(p.stat().st_size for p in files if p.exists() and not p.name.endswith("-wal"))


def scenario(
    title: str, nodes: int, payload: bytes | None, reps: int, contenders: list[Any], ours: str, floor: str
) -> dict[str, Any]:
    """Time every contender on one chain, interleaved; return per-node figures and growth."""
    folder = Path(tempfile.mkdtemp(prefix="durable-nb-bench-"))
    for contender in contenders:
        contender.prepare(folder, nodes, payload)
        contender.run_once()  # warm-up: schema, imports, caches
    timings: dict[str, list[float]] = {c.name: [] for c in contenders}
    growth: dict[str, list[int]] = {c.name: [] for c in contenders}
    for _ in range(reps):
        for contender in contenders:
            before = _size(contender.files())
            started = time.perf_counter()
            contender.run_once()
            timings[contender.name].append((time.perf_counter() - started) / nodes * 1000)
            growth[contender.name].append(_size(contender.files()) - before)
    for contender in contenders:
        close = getattr(contender, "close", None)
        if close:
            close()
    ours_ms = statistics.median(timings[ours])
    floor_ms = statistics.median(timings[floor])
    rows = []
    for name, values in timings.items():
        median = statistics.median(values)
        rows.append(
            {
                "contender": name,
                "ms_per_node": round(median, 4),
                "min": round(min(values), 4),
                "max": round(max(values), 4),
                "vs_durable_nb": round(median / ours_ms, 2),
                "vs_floor": round(median / floor_ms, 2),
                "growth_bytes_per_run": int(statistics.median(growth[name])),
            }
        )
    return {"scenario": title, "nodes": nodes, "reps": reps, "rows": rows}


def render(result: dict[str, Any]) -> str:
    """Format one scenario as a Markdown table."""
    lines = [
        f"**{result['scenario']}** ({result['nodes']} nodes, {result['reps']} interleaved runs each, medians)",
        "",
        "| contender | ms/node | min-max | x durable_nb | x floor | store growth/run |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['contender']} | {row['ms_per_node']:.3f} | {row['min']:.3f}-{row['max']:.3f} | "
            f"{row['vs_durable_nb']:.2f} | {row['vs_floor']:.2f} | {row['growth_bytes_per_run'] / 1e6:.2f} MB |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run the scenarios and print their tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, durable_nb and the floor only (CI)")
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--json", default="benchmarks/results.json", help="where to write the results")
    parser.add_argument(
        "--postgres", default=None, help="PostgreSQL URL for its scenario (or $DURABLE_NB_TEST_POSTGRES)"
    )
    parser.add_argument(
        "--only",
        default=",".join(SCENARIOS),
        help=f"comma-separated scenarios to run (default: all of {','.join(SCENARIOS)})",
    )
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    if only - set(SCENARIOS):
        parser.error(f"unknown scenario(s) {sorted(only - set(SCENARIOS))}; choose from {', '.join(SCENARIOS)}")
    nodes = 5 if args.smoke else 50
    reps = 2 if args.smoke else args.reps
    sqlite_ours, sqlite_floor = "durable_nb (synchronous=FULL)", "floor (INSERT+COMMIT, FULL)"
    results = []
    if "chain" in only:
        small = scenario(
            "Per-node overhead, small state", nodes, None, reps, available(args.smoke), sqlite_ours, sqlite_floor
        )
        results.append(small)
    if "large" in only:
        results.append(
            scenario(
                "Unchanged 1 MB value carried through the chain",
                nodes,
                os.urandom(1_000_000),
                reps,
                available(args.smoke),
                sqlite_ours,
                sqlite_floor,
            )
        )
    postgres = args.postgres or os.environ.get("DURABLE_NB_TEST_POSTGRES")
    if postgres and not args.smoke and "postgres" in only:
        results.append(
            scenario(
                "Per-node overhead on PostgreSQL",
                nodes,
                None,
                reps,
                postgres_contenders(postgres),
                "durable_nb (PostgreSQL)",
                "floor (INSERT+COMMIT, PostgreSQL)",
            )
        )
    history = history_scenario(200 if args.smoke else 10_000, reps) if "history" in only else None
    race = correctness_scenario(5) if "race" in only and not args.smoke else None
    dataframe = dataframe_scenario(1_000 if args.smoke else 1_250_000, reps) if "dataframe" in only else None
    run_all = run_all_scenario(50) if "run_all" in only and not args.smoke else None
    # Real notebooks in real kernels: 5 interleaved runs each (about 10 minutes); the tests run
    # two of them end to end, and `python -m benchmarks.realnb --reps N` runs them alone.
    real = realnb_scenario(5) if "realnb" in only and not args.smoke else None
    # Chains and maps of 10 to 10,000 nodes and a notebook of 300 cells (about 15 minutes);
    # `python -m benchmarks.scale` runs it alone with other sizes.
    scale = None
    if "scale" in only:
        if args.smoke:
            scale = scale_scenario([10, 40], 1, contenders=("durable_nb",), notebook_cells=12, budget_s=120)
        else:
            scale = scale_scenario([10, 100, 1_000, 10_000], 3, contenders=installed_contenders())
    # A 10-turn agent killed at 20 random points, per contender (about 2 minutes);
    # `python -m benchmarks.agents` runs it alone.
    agents = None
    if "agents" in only:
        agents = agents_scenario(3, 1, ("durable_nb",)) if args.smoke else agents_scenario(20, 5, agent_contenders())
    # LangGraph's SqliteSaver (and PostgresSaver) against DurableSaver under the same graphs: per
    # step, a 10,000-checkpoint thread listed seven times (three listings swung its ratio from 0.96
    # to 1.73), and two processes resuming one interrupt (about 12 minutes with PostgreSQL); `--only
    # saver` runs it alone.
    saver = None
    if "saver" in only:
        if args.smoke:
            saver = saver_scenario(nodes, reps, 50, 1, 1, None)
        else:
            saver = saver_scenario(nodes, reps, 10_000, 7, 10, postgres)
    # A durable map on a 2-worker Dask cluster against Dask alone and against one process: CPU-bound
    # items, then trivial ones on SQLite (and PostgreSQL) with every commit checked in the history
    # (about 3 minutes a rep, most of it the 1,000 items of 50 ms run in one process, twice);
    # `--only dask` runs it alone.
    dask = None
    if "dask" in only:
        dask = dask_scenario(20, 1, 20, reps, None) if args.smoke else dask_scenario(1_000, 50, 2_000, reps, postgres)
    # The HTTP service against a DBOS + FastAPI peer (about a minute; not in the smoke run);
    # `python -m benchmarks.service` runs it alone.
    if "service" in only and not args.smoke:
        service_main([])
    machine = describe_machine()
    for result in results:
        print(render(result))
        print()
    if history is not None:
        print(render_history(history))
        print()
    if race is not None:
        print(render_correctness(race))
        print()
    if dataframe is not None:
        print(render_dataframe(dataframe))
        print()
    if run_all is not None:
        print(render_run_all(run_all))
        print()
    if real is not None:
        print(render_realnb(real))
        print()
    if scale is not None:
        print(render_scale(scale))
        print()
    if agents is not None:
        print(render_agents(agents))
        print()
    if saver is not None:
        print(render_saver(saver))
        print()
    if dask is not None:
        print(render_dask(dask))
        print()
    print(f"machine: {machine}")
    peers = versions()
    print(f"versions: {peers}")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    report = {"machine": machine, "versions": peers, "results": results, "history": history, "race": race}
    report.update(dataframe=dataframe, run_all=run_all, realnb=real, scale=json_safe(scale), agents=agents, saver=saver)
    report["dask"] = dask
    Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
