"""Durable maps on a Dask cluster, against Dask alone and against one process (issue 20 item 6).

One map of N items, each committed by the run's owner as it finishes, measured side by side in
this process against a 2-worker ``LocalCluster(n_workers=2, threads_per_worker=1, processes=True)``
started once (its startup reported apart, never timed with a run):

- CPU-bound items: 1,000 items of about 50 ms of pure-Python work each (a busy loop calibrated
  here, not a sleep), run by durable_nb in this process one at a time (``max_concurrency=1``)
  and eight at a time (the default, on threads that share the GIL), by durable_nb on the
  cluster, and by Dask alone (``client.map`` then ``as_completed``, the same function, nothing
  stored); items/s, and time against Dask alone;
- trivial items (2,000 that return at once, so the store and the per-item machinery are all
  there is): ms per item for durable_nb on the cluster, per task for Dask alone, and for
  durable_nb in this process (its commits alone); and how fast the owner commits on SQLite with
  ``synchronous=FULL`` and on PostgreSQL: items committed per second, from the commit times of
  the items' checkpoints.

After every durable run its history is read back and the ``after:work`` checkpoints counted per
item index: every item should be committed exactly once. That count is reported, not asserted.
Everything is interleaved (A B C A B C …) after a warm-up; times are medians.

``python -m benchmarks --only dask [--reps N] [--postgres URL]`` (``--smoke``: 20 items of 1 ms, SQLite only).
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

WORKERS = 2
# The reference: like durable_nb's owner, it takes each result as it arrives.
DASK_ALONE = "Dask alone (client.map + as_completed)"
DASK_GATHER = "Dask alone (client.map + gather)"
WARM_UP = 4  # items of each contender's untimed first run


def burn(loops: int) -> int:
    """Spin a pure-Python loop ``loops`` times (CPU work that holds the GIL); return a checksum."""
    total = 0
    for index in range(loops):
        total ^= index
    return total


def _seconds_of(loops: int) -> float:
    started = time.perf_counter()
    burn(loops)
    return time.perf_counter() - started


def calibrate(item_ms: float) -> tuple[int, float]:
    """Return the loops ``burn`` needs for about ``item_ms`` ms here, and the ms they measured."""
    # The guess is measured at its own length and corrected a few times (a loop's cost per turn
    # varies with its length); the fastest of five is the one least disturbed by other processes.
    loops = 100_000
    for _ in range(4):
        took = min(_seconds_of(loops) for _ in range(5))
        loops = max(1, round(loops * item_ms / 1000 / took))
    return loops, statistics.median(_seconds_of(loops) for _ in range(7)) * 1000


@dataclass
class Measured:
    """One timed run: its seconds and, for durable_nb, what its history says was committed."""

    seconds: float
    committed: dict[str, Any] | None = None


def committed_items(store: Any, run_id: str, count: int) -> dict[str, Any]:
    """Count a run's ``after:work`` checkpoints per item index, and the rate at which they were committed."""
    import durable_nb as dnb

    frame = dnb.history(run_id, store=store)
    items = frame[frame["step"] == "after:work"]
    indexes = items["item_index"].dropna().astype(int)
    per_item = indexes.value_counts()
    expected = set(range(count))
    times = sorted(items["created_at"].astype("int64") / 1e9)
    span = times[-1] - times[0] if len(times) > 1 else 0.0
    return {
        "checkpoints": len(items),
        "duplicated": int((per_item > 1).sum()),
        "missing": len(expected - set(per_item.index)),
        "unexpected": int(len(items) - len(indexes) + len(set(per_item.index) - expected)),
        "commits_per_s": (len(times) - 1) / span if span > 0 else None,
    }


class DurableMap:
    """durable_nb: a ``load`` node, then ``work`` mapped over its items, each committed by this process."""

    def __init__(self, name: str, store_url: str, executor: Any = None, max_concurrency: int | None = None) -> None:
        import durable_nb as dnb

        self.name = name
        self.store = dnb.connect(store_url)
        self.flow = dnb.Workflow(f"dask-bench-{uuid.uuid4().hex[:8]}", store=self.store)

        @self.flow.node(retry_count=0)
        def load(state: dict[str, Any]) -> dict[str, Any]:
            return {"docs": [state["loops"]] * state["count"]}

        @self.flow.map(
            after="load",
            items="docs",
            into="out",
            executor=executor,
            max_concurrency=max_concurrency,
            retry_count=0,
        )
        def work(state: dict[str, Any], loops: int) -> int:
            return burn(loops)

    def run(self, count: int, loops: int) -> Measured:
        """Run the workflow once over ``count`` items; read its history back after the timing."""
        started = time.perf_counter()
        run = self.flow.run({"count": count, "loops": loops})
        seconds = time.perf_counter() - started
        if run.status != "completed":
            raise RuntimeError(f"{self.name}: the run ended {run.status}: {run.error}")
        return Measured(seconds, committed_items(self.store, run.id, count))


class DaskAlone:
    """Dask without durable_nb: the same function over the same items, nothing stored."""

    def __init__(self, client: Any, gather: bool = False) -> None:
        self.client = client
        self.gather = gather
        self.name = DASK_GATHER if gather else DASK_ALONE

    def run(self, count: int, loops: int) -> Measured:
        """Map ``burn`` over ``count`` items; take every result as it arrives (or all at once with ``gather``)."""
        from distributed import as_completed

        started = time.perf_counter()
        futures = self.client.map(burn, [loops] * count, pure=False)
        if self.gather:
            received = len(self.client.gather(futures))
        else:
            received = sum(1 for _future, _result in as_completed(futures, with_results=True))
        seconds = time.perf_counter() - started
        if received != count:
            raise RuntimeError(f"{self.name}: {received} results for {count} items")
        return Measured(seconds)


def _interleaved(contenders: list[Any], count: int, loops: int, reps: int) -> dict[str, list[Measured]]:
    """Warm every contender up, then time ``reps`` runs of each, interleaved."""
    for contender in contenders:
        contender.run(WARM_UP, loops)  # worker imports, the store's schema, caches
    measured: dict[str, list[Measured]] = {c.name: [] for c in contenders}
    for rep in range(reps):
        for contender in contenders:
            measured[contender.name].append(contender.run(count, loops))
            took = measured[contender.name][-1].seconds
            print(f"  {contender.name}, {count:,} items #{rep + 1}: {took:.1f} s", file=sys.stderr, flush=True)
    return measured


def _rows(measured: dict[str, list[Measured]], count: int) -> list[dict[str, Any]]:
    """Medians, ratios against Dask alone, and the commit checks of every contender."""
    reference = statistics.median(m.seconds for m in measured[DASK_ALONE])
    rows = []
    for name, runs in measured.items():
        seconds = [m.seconds for m in runs]
        median = statistics.median(seconds)
        row: dict[str, Any] = {
            "contender": name,
            "s_per_run": round(median, 4),
            "min": round(min(seconds), 4),
            "max": round(max(seconds), 4),
            "items_per_s": round(count / median, 1),
            "ms_per_item": round(median / count * 1000, 4),
            "vs_dask_alone": round(median / reference, 2),
            "over_dask_alone_ms_per_item": round((median - reference) / count * 1000, 4),
        }
        checks = [m.committed for m in runs if m.committed is not None]
        if checks:
            rates = [c["commits_per_s"] for c in checks if c["commits_per_s"] is not None]
            row["commits_per_s"] = round(statistics.median(rates), 1) if rates else None
            row["committed"] = {
                "runs": len(checks),
                "checkpoints_per_run": sorted({c["checkpoints"] for c in checks}),
                "duplicated": sum(c["duplicated"] for c in checks),
                "missing": sum(c["missing"] for c in checks),
                "unexpected": sum(c["unexpected"] for c in checks),
            }
        rows.append(row)
    return rows


@dataclass
class Stores:
    """Where durable_nb contenders keep their runs: SQLite files in a folder, PostgreSQL schemas."""

    folder: Path
    postgres: str | None
    schemas: list[str] = field(default_factory=list)

    def sqlite(self, label: str) -> str:
        """A new SQLite database (WAL, ``synchronous=FULL``: dnb.connect's default durability)."""
        return f"sqlite:///{self.folder / f'{label}.db'}"

    def postgresql(self, label: str) -> str:
        """A new schema of the PostgreSQL database (the store creates it)."""
        assert self.postgres is not None
        schema = f"bench_dask_{label}_{uuid.uuid4().hex[:8]}"
        self.schemas.append(schema)
        return f"{self.postgres}{'&' if '?' in self.postgres else '?'}schema={schema}"

    def release(self) -> None:
        """Close durable_nb's shared stores, then drop the schemas (the folder goes with the caller's)."""
        from durable_nb.store import disconnect

        disconnect()
        if self.schemas:
            import psycopg

            assert self.postgres is not None
            with psycopg.connect(self.postgres, autocommit=True) as conn:
                for schema in self.schemas:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def start_cluster() -> tuple[Any, Any, float]:
    """Start the 2-worker cluster and a client on it; return them and the seconds until both workers were up."""
    from distributed import Client, LocalCluster

    started = time.perf_counter()
    # The scheduler's HTTP server on a free port: another cluster on this machine may hold 8787.
    cluster = LocalCluster(
        n_workers=WORKERS,
        threads_per_worker=1,
        processes=True,
        dashboard_address="127.0.0.1:0",
        silence_logs=logging.ERROR,
    )
    client = Client(cluster)
    client.wait_for_workers(WORKERS)
    return cluster, client, time.perf_counter() - started


def dask_scenario(
    cpu_items: int, item_ms: float, trivial_items: int, reps: int, postgres: str | None
) -> dict[str, Any] | None:
    """Run both measures on one cluster; return their figures (None without ``distributed``)."""
    from importlib.util import find_spec

    if find_spec("distributed") is None:
        print("(Dask's distributed not installed: pip install 'durable-nb[dask]')")
        return None
    # dnb.history returns a DataFrame: pandas is imported before any timing (about 0.3 s here).
    import pandas  # noqa: F401

    loops, measured_ms = calibrate(item_ms)
    cluster, client, startup = start_cluster()
    try:
        with tempfile.TemporaryDirectory(prefix="durable-nb-dask-") as temp:
            stores = Stores(Path(temp), postgres)
            try:
                cpu = [
                    DurableMap("durable_nb in 1 process, max_concurrency=1", stores.sqlite("cpu-one"), None, 1),
                    DurableMap("durable_nb in 1 process, 8 threads (default)", stores.sqlite("cpu-eight")),
                    DurableMap(f"durable_nb on Dask, {WORKERS} workers", stores.sqlite("cpu-dask"), client),
                    DaskAlone(client),
                ]
                cpu_rows = _rows(_interleaved(cpu, cpu_items, loops, reps), cpu_items)
                trivial = [
                    DurableMap("durable_nb on Dask, SQLite FULL", stores.sqlite("trivial-dask"), client),
                    DurableMap("durable_nb in 1 process, SQLite FULL", stores.sqlite("trivial-local")),
                ]
                if postgres:
                    trivial.insert(1, DurableMap("durable_nb on Dask, PostgreSQL", stores.postgresql("dask"), client))
                    trivial.append(DurableMap("durable_nb in 1 process, PostgreSQL", stores.postgresql("local")))
                middle = len(trivial) // 2
                trivial[middle:middle] = [DaskAlone(client), DaskAlone(client, gather=True)]
                trivial_rows = _rows(_interleaved(trivial, trivial_items, 0, reps), trivial_items)
            finally:
                stores.release()
    finally:
        client.close()
        cluster.close()
    return {
        "workers": WORKERS,
        "startup_s": round(startup, 3),
        "item_ms": item_ms,
        "loops": loops,
        "measured_item_ms": round(measured_ms, 3),
        "reps": reps,
        "cpu": {"items": cpu_items, "rows": cpu_rows},
        "trivial": {"items": trivial_items, "rows": trivial_rows},
    }


def _committed(row: dict[str, Any]) -> str:
    """Whether every item of every run was committed exactly once, from the history."""
    check = row.get("committed")
    if check is None:
        return "(nothing stored)"
    per_run = "/".join(f"{count:,}" for count in check["checkpoints_per_run"])
    wrong = [f"{check[key]} {key}" for key in ("duplicated", "missing", "unexpected") if check[key]]
    verdict = "each once" if not wrong else ", ".join(wrong)
    return f"{per_run} per run, {check['runs']} runs: {verdict}"


def _rate(value: float | None) -> str:
    return "" if value is None else f"{value:,.0f}"


def render_dask(result: dict[str, Any]) -> str:
    """Format the scenario as Markdown tables."""
    workers, reps = result["workers"], result["reps"]
    cpu, trivial = result["cpu"], result["trivial"]
    lines = [
        f"**A map on a {workers}-worker Dask LocalCluster** (processes, 1 thread each; started once in "
        f"{result['startup_s']:.2f} s, not timed with the runs). {reps} interleaved runs each, medians; "
        "durable_nb commits every item in the owner process (SQLite WAL, synchronous=FULL unless named); "
        "items committed = `after:work` checkpoints per item index in each run's history",
        "",
        f"*CPU-bound items*: {cpu['items']:,} items of a pure-Python loop calibrated to {result['item_ms']:g} ms "
        f"({result['loops']:,} loops, {result['measured_item_ms']:.1f} ms measured here)",
        "",
        "| contender | s/run | min-max | items/s | x Dask alone | items committed |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for row in cpu["rows"]:
        lines.append(
            f"| {row['contender']} | {row['s_per_run']:.2f} | {row['min']:.2f}-{row['max']:.2f} | "
            f"{row['items_per_s']:,.1f} | {row['vs_dask_alone']:.2f} | {_committed(row)} |"
        )
    lines += [
        "",
        f"*Trivial items*: {trivial['items']:,} items that return at once (the store and the per-item "
        "machinery are all there is); commits/s = items committed per second by the owner, from the "
        "commit times of the first and last item",
        "",
        "| contender | ms/item | min-max | items/s | x Dask alone | ms/item over Dask alone | commits/s "
        "| items committed |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    count = trivial["items"]
    for row in trivial["rows"]:
        lines.append(
            f"| {row['contender']} | {row['ms_per_item']:.3f} | {row['min'] / count * 1000:.3f}-"
            f"{row['max'] / count * 1000:.3f} | {row['items_per_s']:,.0f} | {row['vs_dask_alone']:.2f} | "
            f"{row['over_dask_alone_ms_per_item']:+.3f} | {_rate(row.get('commits_per_s'))} | {_committed(row)} |"
        )
    return "\n".join(lines)
