"""Executors for nodes and map items (issue 20 item 5, functional half).

Commits per item, recovery, @idempotent calls, gates, errors, timeouts and bad executors, with
nodes and map items run away from the run's owner (README: Scaling out).

Items and nodes run on a real Dask ``LocalCluster`` (two worker processes, started once for the
module), on ``ProcessPoolExecutor``, ``ThreadPoolExecutor`` and loky, while the run's owner
commits each item as it arrives. Bodies count their own executions in append-mode files (one
line per execution, written from whichever process ran it), so "ran exactly once" is counted,
not inferred; commits are counted from the run's history. Nothing here waits on a clock: a
body that must block waits for a file the test creates, and every such wait has a cap that
only a hang would reach.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import re
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import new_store

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.execution.dask_batch import DaskBatch
from durable_nb.engine.execution.executors import read_outcome
from durable_nb.engine.execution.idempotent import call_key
from durable_nb.engine.execution.remote import ItemPart, SharedPart, pack, pack_call, run_remote, unpack_call
from durable_nb.engine.state.values import ValueCodec
from durable_nb.model import Decision
from durable_nb.store.secret import load_secret
from durable_nb.store.sqlite import SQLiteStore

try:
    # Imported after durable_nb, as a notebook that opens a Dask client after `import durable_nb`
    # does: importing it changes how exceptions pickle in this process (tblib), which the
    # executors' error paths must survive.
    import distributed
    from distributed.diagnostics.plugin import SchedulerPlugin
except ImportError:  # pragma: no cover - the Dask tests skip, the rest still run
    distributed = None

NO_DASK = "Dask tests need dask.distributed: pip install 'durable-nb[dask]' (or the dev extra)."
NO_LOKY = "loky tests need loky: pip install loky (joblib also ships it as joblib.externals.loky)."
# The most a body waits for a file the test is about to create: reached only if something hangs.
CAP_SECONDS = 60.0


# -- helpers -----------------------------------------------------------------------------


class FakeSleep:
    """An async sleep that returns at once (the retry backoff is tested elsewhere, not in this file)."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def append(path: Path, line: str) -> None:
    """Add one line to ``path``; appends of one short line are atomic across processes."""
    with open(path, "a", encoding="utf-8") as file:
        file.write(f"{line}\n")


def lines(path: Path) -> list[str]:
    """Return the lines ``append`` wrote (none if the file does not exist)."""
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def wait_for_file(path: Path, cap: float = CAP_SECONDS) -> bool:
    """Wait until ``path`` exists; return False only when ``cap`` seconds pass first."""
    deadline = time.monotonic() + cap
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def item_commits(store_url: str, run_id: str, node: str) -> Counter[int]:
    """Count the ``after:<node>`` checkpoints of a run per item index."""
    history = dnb.history(run_id, store=store_url)
    rows = history[history["step"] == f"after:{node}"]
    return Counter(int(i) for i in rows["item_index"])


def steps(store_url: str, run_id: str) -> list[str]:
    return list(dnb.history(run_id, store=store_url)["step"])


def failed_traceback(store_url: str, run_id: str) -> str:
    """Return the traceback text stored with the run's ``failed:<node>`` checkpoint."""
    records = run_sync(dnb.connect(store_url).list_checkpoints(run_id))
    return next(r.traceback or "" for r in records if r.step.startswith("failed:"))


def worker_pids(client: Any) -> set[int]:
    return set(client.run(os.getpid).values())


@pytest.fixture
def other_store(store_url: str) -> Iterator[dnb.Store]:
    """The test's store opened again with connections of its own, as another process would open it."""
    store = new_store(store_url)
    try:
        yield store
    finally:
        run_sync(store.close())


# -- executors -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def dask_client() -> Iterator[Any]:
    """A Dask client on a two-process LocalCluster, shared by the module's Dask tests."""
    if distributed is None:
        pytest.skip(NO_DASK)
    with warnings.catch_warnings():
        # No dashboard; the scheduler's plain HTTP routes fall back to another port if 8787 is taken.
        warnings.filterwarnings("ignore", message="Port .* is already in use", category=UserWarning)
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0"
        )
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


def loky_executor(workers: int) -> concurrent.futures.Executor:
    """Return loky's reusable process executor, or skip when loky is not installed."""
    try:
        import loky
    except ImportError:
        try:
            from joblib.externals import loky
        except ImportError:
            pytest.skip(NO_LOKY)
    return loky.get_reusable_executor(max_workers=workers)


def make_pool(kind: str) -> concurrent.futures.Executor:
    if kind == "process":
        return concurrent.futures.ProcessPoolExecutor(2)
    if kind == "thread":
        return concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="pool-under-test")
    return loky_executor(2)


@pytest.fixture(params=["process", "thread", "loky"])
def pool(request: pytest.FixtureRequest) -> Iterator[tuple[str, concurrent.futures.Executor]]:
    """Each concurrent.futures executor kind, shut down after its test."""
    executor = make_pool(request.param)
    try:
        yield request.param, executor
    finally:
        executor.shutdown(wait=True)


# -- 1, 2: a 100-item map ----------------------------------------------------------------------

# 100 items on two workers (or four threads) already finish out of order, their results come back
# in batches and their commits interleave; 1,000 only repeated that (tests/test_flat_cost.py checks
# that a commit's cost does not grow with the map).
ITEMS = 100


def run_big_map(store_url: str, executor: Any, ran: Path) -> dnb.Run:
    """Run a 100-item map on ``executor``; each body appends its index to ``ran``."""
    flow = dnb.Workflow("big-map", store=store_url, sleep=FakeSleep())

    @flow.map(items="docs", into="out", executor=executor)
    def work(state: dict[str, Any], doc: str) -> dict[str, Any]:
        append(ran, doc)
        return {"doc": doc, "upper": doc.upper(), "pid": os.getpid(), "thread": threading.current_thread().name}

    docs = [f"doc-{i:04d}" for i in range(ITEMS)]
    run = flow.run({"docs": docs})
    assert run.status == "completed", run.error
    assert [o["doc"] for o in run.state["out"]] == docs  # in item order, whatever order they finished in
    assert [o["upper"] for o in run.state["out"]] == [d.upper() for d in docs]
    assert item_commits(store_url, run.id, "work") == Counter(range(ITEMS))  # one commit per item
    assert Counter(lines(ran)) == Counter(docs)  # every body ran exactly once
    return run


def test_dask_map_of_100_items_commits_each_once_in_order(store_url: str, dask_client: Any, tmp_path: Path) -> None:
    """Issue 20 item 5.1: a 100-item map on a two-process Dask cluster completes; ``out`` is in
    item order; each item has exactly one ``after:work`` checkpoint; each body ran exactly once,
    and in a worker process, never in the test's."""
    run = run_big_map(store_url, dask_client, tmp_path / "ran.txt")
    pids = {o["pid"] for o in run.state["out"]}
    assert pids <= worker_pids(dask_client)
    assert os.getpid() not in pids


class GraphUpdates(SchedulerPlugin if distributed is not None else object):  # type: ignore[misc]
    """Counts, in the scheduler, the graph updates that carry tasks of a map node's items."""

    name = "durable-nb-graph-updates"

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.updates: list[int] = []
        # Keys of tasks whose result is a map's shared part (its function and state).
        self.shared: set[str] = set()

    def update_graph(self, scheduler: Any, *, tasks: list[Any], **kwargs: Any) -> None:
        items = [k for k in tasks if isinstance(k, tuple) and str(k[0]).startswith(self.prefix)]
        if items:
            self.updates.append(len(items))
        self.shared.update(k for k in tasks if isinstance(k, str) and k.startswith(f"{self.prefix}shared-"))


def _graph_updates(client: Any) -> tuple[list[int], int]:
    plugin = client.run_on_scheduler(lambda dask_scheduler: vars(dask_scheduler.plugins[GraphUpdates.name]))
    return plugin["updates"], len(plugin["shared"])


def test_dask_map_items_reach_the_scheduler_as_one_graph(store_url: str, dask_client: Any, tmp_path: Path) -> None:
    """The items a map starts together are submitted as one graph, as Dask's own client.map sends
    them, not as one scheduler message and graph update per item."""
    dask_client.register_plugin(GraphUpdates("work-"))
    try:
        run_big_map(store_url, dask_client, tmp_path / "ran.txt")
        updates, shared = _graph_updates(dask_client)
    finally:
        dask_client.unregister_scheduler_plugin(GraphUpdates.name)
    assert updates == [ITEMS]
    assert shared == 0  # a small state travels with each item


def test_dask_map_sends_a_large_state_to_the_cluster_once(store_url: str, dask_client: Any) -> None:
    """A state whose copies, one per item, would add up to megabytes (it holds the items, and more)
    goes to the cluster once, as a task the items depend on; every item still commits once."""
    flow = dnb.Workflow("big-state-map", store=store_url, sleep=FakeSleep())

    @flow.map(items="docs", into="out", executor=dask_client)
    def work(state: dict[str, Any], doc: str) -> int:
        return len(state["padding"]) + len(doc)

    docs = [f"doc-{i:04d}" for i in range(ITEMS)]
    dask_client.register_plugin(GraphUpdates("work-"))
    try:
        run = flow.run({"docs": docs, "padding": "x" * 100_000})
        updates, shared = _graph_updates(dask_client)
    finally:
        dask_client.unregister_scheduler_plugin(GraphUpdates.name)
    assert run.status == "completed", run.error
    assert run.state["out"] == [100_008] * ITEMS
    assert item_commits(store_url, run.id, "work") == Counter(range(ITEMS))
    assert updates == [ITEMS] and shared == 1


class Deliveries:
    """Counts the batches of results a Dask batch hands to the owner's loop, and the transactions
    that write item checkpoints (rows whose step starts with ``step``) on the store's connection."""

    def __init__(self, store: SQLiteStore, monkeypatch: pytest.MonkeyPatch, step: str) -> None:
        self.step = f"'{step}"
        self.batches: list[int] = []
        self.commits: list[int] = []
        self._written = 0
        deliver = DaskBatch._deliver

        def counted(batch: DaskBatch, arrived: list[Any]) -> None:
            self.batches.append(len(arrived))
            deliver(batch, arrived)

        monkeypatch.setattr(DaskBatch, "_deliver", counted)
        run_sync(store._run(lambda conn: conn.set_trace_callback(self._trace)))

    def _trace(self, sql: str) -> None:
        statement = sql.strip().upper()
        if statement.startswith("INSERT INTO CHECKPOINTS") and self.step in sql:
            self._written += 1
        elif statement == "COMMIT":
            if self._written:
                self.commits.append(self._written)
            self._written = 0


@pytest.mark.sqlite_only
@pytest.mark.parametrize("kind", ["flow.map", "map_items"])
def test_dask_items_delivered_together_share_a_commit(
    store_url: str, dask_client: Any, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """flow.map and map_items commit alike: the results a Dask batch delivers together are committed
    together (never more item transactions than deliveries), each item once."""
    store = dnb.connect(store_url)
    assert isinstance(store, SQLiteStore)
    flow = dnb.Workflow(f"grouped-{kind}", store=store, sleep=FakeSleep())
    if kind == "flow.map":
        flow.map(lambda state, i: i * i, items="xs", name="work", executor=dask_client)
    else:

        @flow.node()
        def work(state: dict[str, Any]) -> dict[str, Any]:
            return {"work": dnb.map_items(lambda i: i * i, state["xs"], executor=dask_client, name="sq")}

    flow.run({"xs": [1]})  # warm: the worker imports, the store's schema
    counts = Deliveries(store, monkeypatch, "after:work'" if kind == "flow.map" else "item:")
    run = flow.run({"xs": list(range(ITEMS))})
    assert run.status == "completed", run.error
    assert run.state["work"] == [i * i for i in range(ITEMS)]
    assert sum(counts.batches) == ITEMS and sum(counts.commits) == ITEMS
    # A map node's last item is held back for the node's own commit: one more transaction at most.
    held = 1 if kind == "flow.map" else 0
    assert len(counts.commits) <= len(counts.batches) + held, (counts.commits, counts.batches)
    history = dnb.history(run.id, store=store)
    rows = history[history["step"].str.startswith("item:" if kind == "map_items" else "after:work")]
    assert Counter(int(i) for i in rows["item_index"]) == Counter(range(ITEMS))


@pytest.mark.sqlite_only
def test_dask_results_are_released_once_read(store_url: str, dask_client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each item's result is released on the cluster once read, errors too: every item's key
    released once, and none of the map's tasks left on the scheduler."""
    scheduler = dask_client.cluster.scheduler
    handlers = scheduler.stream_handlers
    releases: list[list[Any]] = []
    release = handlers["client-releases-keys"]

    def counted(keys: Any, client: str, **kwargs: Any) -> None:
        mine = [k for k in keys if isinstance(k, tuple) and str(k[0]).startswith("released-")]
        if mine:
            releases.append(mine)
        release(keys=keys, client=client, **kwargs)

    monkeypatch.setitem(handlers, "client-releases-keys", counted)
    store = dnb.connect(store_url)
    assert isinstance(store, SQLiteStore)
    flow = dnb.Workflow("released", store=store, sleep=FakeSleep())
    flow.map(lambda state, i: i + 1, items="xs", name="released", executor=dask_client)

    def held() -> list[Any]:
        return [k for k in list(scheduler.tasks) if isinstance(k, tuple) and str(k[0]).startswith("released-")]

    def settle(count: int) -> None:
        # The releases travel on the client's loop after the run: a loaded machine is slow.
        deadline = time.monotonic() + 30
        while (held() or sum(map(len, releases)) < count) and time.monotonic() < deadline:
            time.sleep(0.05)

    flow.run({"xs": [1]})  # warm: the worker imports, the store's schema
    settle(1)
    releases.clear()
    run = flow.run({"xs": list(range(ITEMS))})
    assert run.status == "completed", run.error
    assert run.state["released"] == [i + 1 for i in range(ITEMS)]
    settle(ITEMS)
    assert not held()
    assert Counter(k for keys in releases for k in keys) == Counter({k: 1 for keys in releases for k in keys})
    assert sum(map(len, releases)) == ITEMS


def test_pool_map_of_100_items_commits_each_once_in_order(
    store_url: str, pool: tuple[str, concurrent.futures.Executor], tmp_path: Path
) -> None:
    """Issue 20 item 5.2: the same 100-item map on ProcessPoolExecutor(2), ThreadPoolExecutor and
    loky: in order, one commit per item, each body once, in the executor's processes (or threads)."""
    kind, executor = pool
    run = run_big_map(store_url, executor, tmp_path / "ran.txt")
    pids = {o["pid"] for o in run.state["out"]}
    if kind == "thread":
        assert pids == {os.getpid()}
        assert {o["thread"] for o in run.state["out"]} <= {f"pool-under-test_{i}" for i in range(4)}
    else:
        assert os.getpid() not in pids
        assert len(pids) <= 2


def test_closure_and_lambda_run_on_a_spawned_process_pool(store_url: str, tmp_path: Path) -> None:
    """Issue 20 item 5.2: functions defined inside a test (a closure over a local, a lambda) run on a
    ProcessPoolExecutor whose workers are spawned, so they share nothing with this process but
    what travelled by cloudpickle."""
    factor = 7
    ran = tmp_path / "ran.txt"
    flow = dnb.Workflow("closures", store=store_url, sleep=FakeSleep())
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as executor:

        @flow.map(items="numbers", into="scaled", executor=executor)
        def scale(state: dict[str, Any], n: int) -> list[int]:
            append(ran, str(n))
            return [n * factor * state["offset"], os.getpid()]

        flow.map(items="numbers", into="squares", after="scale", executor=executor, name="square")(
            lambda state, n: n * n + len(state["scaled"])
        )
        run = flow.run({"numbers": list(range(10)), "offset": 2})

    assert run.status == "completed", run.error
    assert [s[0] for s in run.state["scaled"]] == [n * 14 for n in range(10)]
    assert os.getpid() not in {s[1] for s in run.state["scaled"]}
    assert run.state["squares"] == [n * n + 10 for n in range(10)]
    assert sorted(lines(ran), key=int) == [str(n) for n in range(10)]


# -- 3: whole nodes remotely, the workflow-wide default, and "local" ----------------------------


def test_node_executor_and_workflow_default_with_a_local_node(store_url: str, dask_client: Any) -> None:
    """Issue 20 item 5.3: ``@flow.node(executor=client)`` runs the whole node on a worker;
    ``Workflow(executor=client)`` sends every node and map there by default, and one node with
    ``executor="local"`` runs in this process."""
    workers = worker_pids(dask_client)

    single = dnb.Workflow("one-remote-node", store=store_url, sleep=FakeSleep())

    @single.node(executor=dask_client)
    def remote(state: dict[str, Any]) -> dict[str, Any]:
        return {"remote_pid": os.getpid(), "total": sum(state["numbers"])}

    @single.node(after="remote")
    def here(state: dict[str, Any]) -> dict[str, Any]:
        return {"here_pid": os.getpid()}

    run = single.run({"numbers": [1, 2, 3]})
    assert run.status == "completed", run.error
    assert run.state["remote_pid"] in workers
    assert run.state["here_pid"] == os.getpid()
    assert run.state["total"] == 6
    assert steps(store_url, run.id) == ["after:remote", "after:here", "run_end"]

    flow = dnb.Workflow("default-executor", store=store_url, sleep=FakeSleep(), executor=dask_client)

    @flow.node()
    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"first_pid": os.getpid()}

    @flow.node(after="first", executor="local")
    def local(state: dict[str, Any]) -> dict[str, Any]:
        return {"local_pid": os.getpid()}

    @flow.map(items="numbers", into="item_pids", after="local")
    def each(state: dict[str, Any], n: int) -> int:
        return os.getpid()

    run = flow.run({"numbers": [1, 2, 3, 4]})
    assert run.status == "completed", run.error
    assert run.state["first_pid"] in workers
    assert run.state["local_pid"] == os.getpid()
    assert set(run.state["item_pids"]) <= workers


def test_recover_on_another_store_object_keeps_the_default_executor(
    store_url: str, other_store: dnb.Store, dask_client: Any
) -> None:
    """Issue 20 item 5.3: ``recover([flow], store=...)`` (as ``durable-nb serve`` and the service do)
    runs a workflow on the store it is given; the workflow-wide default executor goes with it, so
    the recovered run's node still runs on a Dask worker."""
    flow = dnb.Workflow("recovered", store=store_url, sleep=FakeSleep(), executor=dask_client)

    @flow.node()
    def where(state: dict[str, Any]) -> dict[str, Any]:
        return {"pid": os.getpid()}

    waiting = flow.start({})
    report = dnb.recover([flow], store=other_store)

    assert [r.id for r in report.resumed] == [waiting.id]
    (resumed,) = report.resumed
    assert resumed.status == "completed", resumed.error
    assert resumed.state["pid"] in worker_pids(dask_client)


# -- 4: @idempotent inside remote items --------------------------------------------------------


def make_paying_flow(
    store_url: str | dnb.Store, executor: Any, paid: Path, attempts: Path, fixed: Path, retry_count: int
) -> tuple[dnb.Workflow, Callable[..., Any]]:
    """A map whose item 2 pays (an @idempotent call counted in ``paid``) and then fails while
    ``fixed`` does not exist, on its first attempt only when ``retry_count`` allows another."""
    flow = dnb.Workflow("paying", store=store_url, sleep=FakeSleep())

    @dnb.idempotent
    def pay(order: int) -> dict[str, Any]:
        append(paid, str(order))
        return {"receipt": f"r-{order}", "pid": os.getpid()}

    @flow.map(items="orders", into="receipts", executor=executor, retry_count=retry_count)
    def settle(state: dict[str, Any], order: int) -> str:
        receipt = pay(order)
        append(attempts, str(order))
        if order == 2 and not fixed.exists() and lines(attempts).count("2") == 1:
            raise ConnectionError("the gateway dropped the reply after taking the money")
        return receipt["receipt"]

    return flow, pay


def idempotent_value(store_url: str, run_id: str, pay: Callable[..., Any], order: int) -> Any:
    """Return the stored @idempotent result of ``pay(order)`` in a run (None when there is none)."""
    store = dnb.connect(store_url)
    address = run_sync(store.get_idempotent(run_id, call_key(pay, (order,), {}, None)))
    if address is None:
        return None
    return run_sync(ValueCodec(store, load_secret()).load_one(address))


def test_idempotent_call_in_a_failed_attempt_is_not_paid_again_on_retry(
    store_url: str, dask_client: Any, tmp_path: Path
) -> None:
    """Issue 20 item 5.4, @idempotent: item 2's first attempt pays, then raises; its second attempt (on a worker,
    which never touches the store) gets the result from the owner: the paid function ran once
    across both attempts, the item committed once, and the store holds the call's result."""
    paid, attempts = tmp_path / "paid.txt", tmp_path / "attempts.txt"
    flow, pay = make_paying_flow(store_url, dask_client, paid, attempts, tmp_path / "never", retry_count=1)

    run = flow.run({"orders": [1, 2, 3]})

    assert run.status == "completed", run.error
    assert run.state["receipts"] == ["r-1", "r-2", "r-3"]
    assert Counter(lines(paid)) == Counter({"1": 1, "2": 1, "3": 1})
    assert Counter(lines(attempts)) == Counter({"1": 1, "2": 2, "3": 1})
    assert item_commits(store_url, run.id, "settle") == Counter({0: 1, 1: 1, 2: 1})
    for order in (1, 2, 3):
        stored = idempotent_value(store_url, run.id, pay, order)
        assert stored is not None and stored["receipt"] == f"r-{order}"
        assert stored["pid"] in worker_pids(dask_client)


def test_idempotent_call_of_a_failed_item_is_not_paid_again_by_a_fresh_owner(
    store_url: str, other_store: dnb.Store, dask_client: Any, tmp_path: Path
) -> None:
    """Issue 20 item 5.4, resume: with retry_count=0 item 2 pays, fails, and the run fails; after the fix,
    a fresh owner (a new workflow object on a store object of its own) resumes the run: item 2
    runs again without paying again, and the items already committed do not run again."""
    paid, attempts, fixed = tmp_path / "paid.txt", tmp_path / "attempts.txt", tmp_path / "fixed"
    flow, pay = make_paying_flow(store_url, dask_client, paid, attempts, fixed, retry_count=0)

    failed = flow.run({"orders": [1, 2, 3]})
    assert failed.status == "failed"
    assert "ConnectionError: the gateway dropped the reply" in (failed.error or "")
    assert Counter(lines(paid)) == Counter({"1": 1, "2": 1, "3": 1})
    # The failed attempt's paid result was kept although its item was not.
    assert idempotent_value(store_url, failed.id, pay, 2)["receipt"] == "r-2"
    assert item_commits(store_url, failed.id, "settle") == Counter({0: 1, 2: 1})

    fixed.touch()
    fresh, _ = make_paying_flow(other_store, dask_client, paid, attempts, fixed, retry_count=0)
    resumed = fresh.resume(failed.id)

    assert resumed.status == "completed", resumed.error
    assert resumed.state["receipts"] == ["r-1", "r-2", "r-3"]
    assert Counter(lines(paid)) == Counter({"1": 1, "2": 1, "3": 1})
    assert Counter(lines(attempts)) == Counter({"1": 1, "2": 2, "3": 1})
    assert item_commits(store_url, failed.id, "settle") == Counter({0: 1, 1: 1, 2: 1})


# -- 5: a gate inside a remote node -----------------------------------------------------------


def test_gate_in_a_remote_node_pauses_and_approval_reruns_it_on_a_worker(
    store_url: str, dask_client: Any, tmp_path: Path
) -> None:
    """Issue 20 item 5.5: ``gate()`` in a node run on a Dask worker pauses the run (gate row and
    pending interrupt); approving re-runs the node on a worker with the decision, and the run completes."""
    ran = tmp_path / "ran.txt"
    flow = dnb.Workflow("remote-gate", store=store_url, sleep=FakeSleep())

    @flow.node(executor=dask_client, retry_count=0)
    def review(state: dict[str, Any]) -> dict[str, Any]:
        append(ran, str(os.getpid()))
        decision = dnb.gate("ship it?", context={"amount": state["amount"]})
        return {"approved": decision.approved, "comment": decision.comment, "pid": os.getpid()}

    @flow.node(after="review")
    def ship(state: dict[str, Any]) -> dict[str, Any]:
        return {"shipped": state["approved"]}

    run = flow.run({"amount": 120})
    assert run.status == "paused"
    assert run.pending_interrupt is not None
    assert run.pending_interrupt["reason"] == "ship it?"
    assert run.pending_interrupt["context"] == {"amount": 120}
    assert run.pending_interrupt["node_id"] == "review"
    assert steps(store_url, run.id) == ["gate:review"]

    done = flow.approve(run.id, approved=True, comment="fine")

    assert done.status == "completed", done.error
    assert done.state["approved"] is True
    assert done.state["comment"] == "fine"
    assert done.state["shipped"] is True
    assert done.state["pid"] in worker_pids(dask_client)
    assert steps(store_url, run.id) == ["gate:review", "approved:review", "after:review", "after:ship", "run_end"]
    runs_on = [int(pid) for pid in lines(ran)]
    assert len(runs_on) == 2  # paused once, re-run once with the decision
    assert set(runs_on) <= worker_pids(dask_client)


# -- 6: what cannot travel back, and errors that can -----------------------------------------


class Unpicklable(Exception):
    """An error holding a lock, so it cannot be pickled to travel back from a worker."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.lock = threading.Lock()


class PaymentRequired(Exception):
    """An error whose constructor takes two arguments: pickled by default, it cannot be rebuilt."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"{code} {reason}")
        self.code = code


@pytest.fixture(params=["dask", "process"])
def remote(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A Dask cluster or a ProcessPoolExecutor: where an item's outcome must be pickled to come back."""
    if request.param == "dask":
        yield request.getfixturevalue("dask_client")
        return
    with concurrent.futures.ProcessPoolExecutor(2) as executor:
        yield executor


def test_unpicklable_exception_fails_the_run_with_a_clear_message(store_url: str, remote: Any) -> None:
    """Issue 20 item 5.6: an item raising an exception that cannot be pickled fails the run (no hang,
    no exception out of ``run``), and the error names the original type and message; the executor
    still works afterwards."""
    flow = dnb.Workflow("unpicklable-error", store=store_url, sleep=FakeSleep())

    @flow.map(items="docs", executor=remote, retry_count=0)
    def work(state: dict[str, Any], doc: str) -> str:
        if doc == "bad":
            raise Unpicklable("the printer caught fire")
        return doc

    run = flow.run({"docs": ["ok", "bad"]})

    assert run.status == "failed"
    assert "Unpicklable" in (run.error or "")
    assert "the printer caught fire" in (run.error or "")
    assert steps(store_url, run.id)[-2:] == ["failed:work", "run_end"]
    assert flow.resume(run.id).status == "failed"  # the executor still answers


def test_unpicklable_exception_keeps_its_type_name_and_worker_traceback(store_url: str, remote: Any) -> None:
    """Issue 20 item 5.6: an error that could not travel back still keeps its type name (the run's
    error_type) and its traceback text from the worker, with the note naming the worker."""
    flow = dnb.Workflow("unpicklable-error-type", store=store_url, sleep=FakeSleep())

    @flow.map(items="docs", executor=remote, retry_count=0)
    def work(state: dict[str, Any], doc: str) -> str:
        raise Unpicklable("the printer caught fire")

    run = flow.run({"docs": ["bad"]})

    assert run.status == "failed"
    assert run.record.error_type == "Unpicklable"
    trace = failed_traceback(store_url, run.id)
    # The worker's frame of the item function, by name and line (cloudpickle ships functions defined
    # in a test or a notebook without their file, so the worker cannot print their source line).
    assert ", in work" in trace and "Traceback on the worker" in trace
    assert "(raised on worker " in trace


def test_exception_that_cannot_be_rebuilt_keeps_its_type_and_message(store_url: str, remote: Any) -> None:
    """Issue 20 item 5.6: an exception that pickles but cannot be unpickled at the owner (its
    ``__init__`` takes two arguments, and ``Exception`` pickles only its message) fails the run
    with its own type name and message, not with the TypeError of rebuilding it."""
    flow = dnb.Workflow("unrebuildable-error", store=store_url, sleep=FakeSleep())

    @flow.map(items="docs", executor=remote, retry_count=0)
    def charge(state: dict[str, Any], doc: str) -> str:
        if doc == "bad":
            raise PaymentRequired(402, "card declined")
        return doc

    run = flow.run({"docs": ["ok", "bad"]})

    assert run.status == "failed"
    assert "PaymentRequired" in (run.error or "")
    assert "402 card declined" in (run.error or "")
    assert item_commits(store_url, run.id, "charge") == Counter({0: 1})


def test_unpicklable_result_fails_the_run_with_a_clear_message(store_url: str, remote: Any) -> None:
    """Issue 20 item 5.6: an item returning a value that cannot be pickled fails the run with an
    error saying the result could not be sent back; nothing of that item is committed."""
    flow = dnb.Workflow("unpicklable-result", store=store_url, sleep=FakeSleep())

    @flow.map(items="docs", executor=remote, retry_count=0)
    def work(state: dict[str, Any], doc: str) -> Any:
        return threading.Lock() if doc == "bad" else doc

    run = flow.run({"docs": ["ok", "bad"]})

    assert run.status == "failed"
    assert "could not be sent back" in (run.error or "")
    assert item_commits(store_url, run.id, "work") == Counter({0: 1})


def test_worker_error_keeps_its_type_and_names_the_worker(store_url: str, remote: Any) -> None:
    """Issue 20 item 5.6: a ValueError raised on a worker fails the run as a ValueError (type name in
    the error and error_type) and its stored traceback carries a note naming the worker process."""
    flow = dnb.Workflow("worker-error", store=store_url, sleep=FakeSleep())

    @flow.map(items="docs", executor=remote, retry_count=0)
    def parse(state: dict[str, Any], doc: str) -> int:
        return int(doc)

    run = flow.run({"docs": ["1", "two"]})

    assert run.status == "failed"
    assert run.error == "Node 'parse' failed: ValueError: invalid literal for int() with base 10: 'two'"
    assert run.record.error_type == "ValueError"
    trace = failed_traceback(store_url, run.id)
    note = re.search(r"\(raised on worker (\S+) pid (\d+) in 'parse'\)", trace)
    assert note is not None, trace
    pid = int(note.group(2))
    assert pid != os.getpid()
    if distributed is not None and isinstance(remote, distributed.Client):
        assert pid in worker_pids(remote)


# -- 7: bad input ------------------------------------------------------------------------------


def counts(store_url: str) -> tuple[int, int]:
    """Return how many runs and checkpoints the store holds."""
    store = dnb.connect(store_url)
    runs = run_sync(store.list_runs(None))
    return len(runs), sum(len(run_sync(store.list_checkpoints(r.run_id))) for r in runs)


@pytest.mark.parametrize(
    "bad", [42, "dask", object(), concurrent.futures.Future()], ids=["int", "dask-text", "object", "future"]
)
def test_bad_executor_is_refused_at_registration(store_url: str, bad: Any) -> None:
    """Issue 20 item 5.7: ``executor=`` that is not a Dask client, an Executor or "local" raises
    ConfigurationError naming what to pass, on a node, a map and a workflow; the workflow keeps only
    its good nodes and nothing is written to the store."""
    flow = dnb.Workflow("bad-executor", store=store_url, sleep=FakeSleep())

    @flow.node()
    def good(state: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True}

    flow.run({})
    before = counts(store_url)

    def body(state: dict[str, Any], *item: Any) -> dict[str, Any]:
        return {}

    attempts: list[Callable[[], Any]] = [
        lambda: flow.node(executor=bad)(body),
        lambda: flow.map(items="docs", executor=bad)(body),
        lambda: dnb.Workflow("bad-default", store=store_url, executor=bad),
    ]
    for attempt in attempts:
        with pytest.raises(dnb.ConfigurationError) as refused:
            attempt()
        message = str(refused.value)
        assert "dask.distributed.Client" in message
        assert "concurrent.futures.Executor" in message
        assert "'local'" in message
        assert repr(bad) in message

    assert flow.nodes == ["good"]
    assert counts(store_url) == before
    assert flow.run({}).status == "completed"


def test_max_concurrency_zero_is_still_refused_with_an_executor(store_url: str) -> None:
    """Issue 20 item 5.7: ``max_concurrency=0`` is refused on a map with an executor as without one."""
    flow = dnb.Workflow("zero", store=store_url, sleep=FakeSleep())
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        for options in ({"executor": executor}, {}):
            with pytest.raises(dnb.ConfigurationError, match="max_concurrency must be a whole number >= 1"):
                flow.map(items="docs", max_concurrency=0, **options)(lambda state, doc: doc)
    assert flow.nodes == []
    assert counts(store_url) == (0, 0)


def test_asynchronous_dask_client_is_refused(store_url: str, dask_client: Any) -> None:
    """Issue 20 item 5.7: a Dask client made with asynchronous=True is refused (on a node, a map and a
    workflow) with a message saying to pass a synchronous Client."""
    assert distributed is not None  # dask_client skipped otherwise
    flow = dnb.Workflow("async-client", store=store_url, sleep=FakeSleep())
    messages: list[str] = []

    async def define() -> None:
        async with distributed.Client(dask_client.scheduler_info()["address"], asynchronous=True) as client:
            attempts: list[Callable[[], Any]] = [
                lambda: flow.node(executor=client)(lambda state: {}),
                lambda: flow.map(items="docs", executor=client)(lambda state, doc: doc),
                lambda: dnb.Workflow("async-default", store=store_url, executor=client),
            ]
            for attempt in attempts:
                with pytest.raises(dnb.ConfigurationError) as refused:
                    attempt()
                messages.append(str(refused.value))

    asyncio.run(define())
    assert len(messages) == 3
    for message in messages:
        assert "asynchronous=True" in message
        assert "synchronous dask.distributed.Client" in message
    assert flow.nodes == []


# -- 8: a shut-down executor, then resume on a working one ------------------------------------


def make_shutdown_flow(executor: Any, store_url: str, ran: Path, fixed: Path) -> dnb.Workflow:
    """A 6-item map whose item 3 fails until ``fixed`` exists; each body appends its item to ``ran``."""
    flow = dnb.Workflow("shut-down", store=store_url, sleep=FakeSleep())

    @flow.map(items="numbers", into="doubled", executor=executor, retry_count=0)
    def double(state: dict[str, Any], n: int) -> int:
        append(ran, str(n))
        if n == 3 and not fixed.exists():
            raise RuntimeError("item 3 is not fixed yet")
        return 2 * n

    return flow


def test_shut_down_executor_fails_the_run_and_resume_elsewhere_runs_only_unfinished_items(
    store_url: str, tmp_path: Path
) -> None:
    """Issue 20 item 5.8: a map whose ThreadPoolExecutor was shut down fails the run with an error
    saying so and commits nothing; resuming with a working executor completes the run, running
    only the items no earlier attempt finished."""
    ran, fixed = tmp_path / "ran.txt", tmp_path / "fixed"
    numbers = list(range(6))
    first_pool = concurrent.futures.ThreadPoolExecutor(2)
    flow = make_shutdown_flow(first_pool, store_url, ran, fixed)

    run = flow.run({"numbers": numbers})
    assert run.status == "failed"
    assert item_commits(store_url, run.id, "double") == Counter({0: 1, 1: 1, 2: 1, 4: 1, 5: 1})

    first_pool.shutdown()
    fixed.touch()
    before = steps(store_url, run.id)
    again = flow.resume(run.id)
    assert again.status == "failed"
    assert "shutdown" in (again.error or "").replace("shut down", "shutdown")
    assert steps(store_url, run.id)[len(before) :] == ["failed:double", "run_end"]  # nothing committed
    assert Counter(lines(ran)) == Counter(map(str, numbers))  # nothing ran on the dead pool

    with concurrent.futures.ThreadPoolExecutor(2) as working:
        done = make_shutdown_flow(working, store_url, ran, fixed).resume(run.id)

    assert done.status == "completed", done.error
    assert done.state["doubled"] == [2 * n for n in numbers]
    assert Counter(lines(ran)) == Counter({**Counter(map(str, numbers)), "3": 2})
    assert item_commits(store_url, run.id, "double") == Counter(range(6))


# -- 9: a timeout enforced at the owner -----------------------------------------------------


def test_remote_item_timeout_fails_at_the_owner_and_its_late_result_is_dropped(
    store_url: str, dask_client: Any, tmp_path: Path
) -> None:
    """Issue 20 item 5.9: an item on a Dask worker that overruns ``timeout_seconds`` fails with
    NodeTimeout at the owner while the worker is still busy with it; when that attempt finishes
    later its result is not committed, and a resume commits only the new attempt's result."""
    release, attempts, finished = tmp_path / "release", tmp_path / "attempts.txt", tmp_path / "finished.txt"
    flow = dnb.Workflow("remote-timeout", store=store_url, sleep=FakeSleep())

    @flow.map(items="docs", into="out", executor=dask_client, retry_count=0, timeout_seconds=1)
    def slow(state: dict[str, Any], doc: str) -> str:
        append(attempts, doc)
        attempt = lines(attempts).count(doc)
        if attempt == 1:
            wait_for_file(release)  # far longer than the timeout: until the test lets it go
        append(finished, f"{doc}:{attempt}")
        return f"{doc} from attempt {attempt}"

    try:
        run = flow.run({"docs": ["only"]})

        assert run.status == "failed"
        assert run.record.error_type == "NodeTimeout"
        assert (run.error or "").startswith("Node 'slow' failed: timed out after 1")
        assert lines(finished) == []  # the owner gave up while the worker was still in the body
        history_at_failure = steps(store_url, run.id)
        assert history_at_failure == ["failed:slow", "run_end"]
    finally:
        release.touch()  # never leave a worker of the shared cluster blocked
    assert wait_for_file(finished)  # the abandoned attempt ends on the worker...
    assert steps(store_url, run.id) == history_at_failure  # ...and nothing of it reaches the store

    done = flow.resume(run.id)
    assert done.status == "completed", done.error
    assert done.state["out"] == ["only from attempt 2"]
    assert lines(finished) == ["only:1", "only:2"]
    assert item_commits(store_url, run.id, "slow") == Counter({0: 1})


@pytest.mark.sqlite_only
def test_a_dask_map_item_costs_the_owner_a_bounded_number_of_python_calls(
    store_url: str, dask_client: Any, engine_calls: list[int]
) -> None:
    """The Python calls of the engine thread (where a map's items are packed, sent, read and committed)
    per item of a map on Dask, counted, never timed: 200 items more add at most the budget each. One
    item in flight, so that each is its own submission, delivery and transaction whatever the load
    (how many results arrive together depends on timing). 368 today, 395 before the release of
    results, the end of a map and empty JSON columns were trimmed; work added to every item shows here."""
    calls = engine_calls
    flow = dnb.Workflow("counted-map", store=store_url, sleep=FakeSleep())
    flow.map(lambda state, i: i, items="xs", name="work", executor=dask_client, max_concurrency=1)
    flow.run({"xs": [1, 2]})  # warm: the worker imports, the store's schema
    counts = {}
    for items in (200, 400):
        calls[0] = 0
        assert flow.run({"xs": list(range(items))}).status == "completed"
        counts[items] = calls[0]
    per_item = (counts[400] - counts[200]) / 200
    assert per_item <= 380, counts


def test_a_plain_item_travels_in_a_few_bytes_and_comes_back_whole() -> None:
    """An item of plain data is packed without its class's name (sent with every item to the scheduler
    and on to a worker): 20 bytes for an int, not 123; any other item keeps its decisions and results."""
    plain = pack_call(ItemPart(args=(5,), item_index=5))
    assert len(plain) <= 32
    assert unpack_call(plain) == ItemPart(args=(5,), item_index=5)
    decision = Decision(approved=True, comment="ok")
    full = ItemPart(args=({"x": [1, 2]},), item_index=None, decisions=[decision], known={"k": 1})
    assert unpack_call(pack_call(full)) == full


def test_a_plain_result_comes_back_in_a_few_bytes_and_others_whole() -> None:
    """A worker returns a plain result alone, by pickle (17 bytes for an int, not 162 by cloudpickle
    with the outcome's class); a result that is not plain data, or an error, comes back as before."""
    shared = pack(SharedPart(fn=lambda state, x: x, run_id="r", node_id="n", label="n", leading=({},)))
    plain = run_remote("plain-result", shared, pack_call(ItemPart(args=(5,), item_index=0)))
    assert len(plain) <= 24 and read_outcome(plain).value == 5
    nested = ({"a": (1, 2.5)}, ["x", None])
    assert (
        read_outcome(run_remote("plain-result", shared, pack_call(ItemPart(args=(nested,), item_index=1)))).value
        == nested
    )
    other = read_outcome(run_remote("plain-result", shared, pack_call(ItemPart(args=(Counter(a=1),), item_index=2))))
    assert other.value == Counter(a=1) and type(other.value) is Counter
    failing = pack(SharedPart(fn=lambda state, x: 1 / x, run_id="r", node_id="n", label="n", leading=({},)))
    failed = read_outcome(run_remote("failing-result", failing, pack_call(ItemPart(args=(0,), item_index=0))))
    assert isinstance(failed.error, ZeroDivisionError)
