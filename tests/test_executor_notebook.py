"""map_items on a Dask cluster in a %%durable cell, in real Jupyter kernels (issue 20 item 4).

The first kernel maps 60 items over a 2-worker LocalCluster; an item kills the kernel (SIGKILL)
part-way. Run All in a new kernel shows the map's progress with the committed items restored
from the store, and submits only the items that were not committed (a crash loses only what
was in flight, each item being committed on its own; Run All resumes the cell).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernelkit import Kernel

import durable_nb as dnb
from durable_nb._loop import run_sync

distributed = pytest.importorskip("distributed", reason="the Dask executor tests need durable-nb[dask] (distributed)")

# Real kernels on SQLite: the kernel's PostgreSQL case is in test_kernels.py, the store's in the conformance tests.
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]

ITEMS = 60
KILLER = 30


@pytest.fixture(scope="module")
def scheduler() -> Iterator[str]:
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address="127.0.0.1:0", silence_logs=50
    )
    try:
        yield cluster.scheduler_address
    finally:
        cluster.close()


def _cells(address: str, side: Path, flag: Path) -> list[str]:
    setup = (
        "%load_ext durable_nb\n"
        "import durable_nb as dnb, os, signal, time\n"
        "from distributed import Client\n"
        "%durable run dask-map\n"
        f"client = Client({address!r})\n"
        "KERNEL = os.getpid()\n"
        "def work(i):\n"
        f"    with open({str(side)!r}, 'a') as f:\n"
        "        f.write(f'{i}\\n')\n"
        f"    if i == {KILLER} and not os.path.exists({str(flag)!r}):\n"
        f"        open({str(flag)!r}, 'w').close()\n"
        "        os.kill(KERNEL, signal.SIGKILL)   # the kernel dies with items in flight\n"
        "    time.sleep(0.02)\n"
        "    return i * i\n"
    )
    mapping = (
        "%%durable squares\n"
        f"squares = dnb.map_items(work, range({ITEMS}), executor=client, name='squares', max_concurrency=4)\n"
        "print('total', sum(squares))"
    )
    return [setup, mapping, "%durable end"]


def _tasks_on(dask_scheduler: object) -> int:
    return len(dask_scheduler.tasks)  # type: ignore[attr-defined]


def _wait_until_idle(address: str) -> None:
    """Wait until the dead kernel's tasks have left the cluster, so none can start after this."""
    with distributed.Client(address) as client:
        deadline = time.monotonic() + 60
        while client.run_on_scheduler(_tasks_on) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert client.run_on_scheduler(_tasks_on) == 0


def _committed(store_url: str) -> set[int]:
    async def read() -> set[int]:
        store = dnb.connect(store_url)
        (run,) = await store.list_runs("dask-map")
        return {
            c.item_index
            for c in await store.list_checkpoints(run.run_id)
            if c.agent_path == "map:squares" and c.item_index is not None
        }

    return run_sync(read())


def test_run_all_after_a_kernel_kill_submits_only_unfinished_items(
    scheduler: str, tmp_path: Path, store_url: str
) -> None:
    side, flag = tmp_path / "bodies.txt", tmp_path / "killed"
    cells = _cells(scheduler, side, flag)
    first = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        results = first.run_all(cells[:2], timeout=180)
    finally:
        first.close()
    assert flag.exists() and results[-1].status == "dead"
    _wait_until_idle(scheduler)
    before = _committed(store_url)
    ran_before = [int(line) for line in side.read_text().split()]
    # Items committed before the kill are each committed once; some were still in flight.
    assert before and len(before) < ITEMS
    side.write_text("")

    second = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        results = second.run_all(cells, timeout=180)
    finally:
        second.close()
    assert all(r.status == "ok" for r in results), [r.text for r in results]
    output = results[1].text
    assert f"total {sum(i * i for i in range(ITEMS))}" in output
    # The progress bar ends at every item, naming those restored from the store.
    assert f"map 'squares': {ITEMS}/{ITEMS} items committed ({len(before)} restored from the store)" in output
    ran_after = [int(line) for line in side.read_text().split()]
    # Only the items not committed at the kill were submitted again, each once.
    assert sorted(ran_after) == sorted(set(range(ITEMS)) - before)
    # Nothing was lost or run twice by the first kernel except what it never committed.
    assert set(ran_before) >= before
    assert _committed(store_url) == set(range(ITEMS))
