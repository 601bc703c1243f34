"""Chaos on SQLite (issue 15: a failed write settles the run; nothing committed is lost).

Each test injects a real fault from inside a running node: a full disk (a small tmpfs), a
database made immutable, a value folder that cannot be written, value files deleted or
truncated. The process that hit the fault must raise a typed ``StoreFailed`` (or another
``StoreError``) and let the run go; another process resumes it while the first still lives,
and every committed node keeps its value and never runs again.
"""

from __future__ import annotations

import contextlib
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from chaoskit import ChaosFlow, need_root_tool, sh

import durable_nb as dnb
from durable_nb.store import disconnect

NODES = 12


def _state(store: str, run_id: str) -> dict[str, Any]:
    try:
        return dnb.get_run(run_id, store=store).state
    finally:
        disconnect(store)


def _check_resumed(flow: ChaosFlow, first: dict[str, Any], size: int) -> None:
    """The run the fault stopped is resumed by another process: all values there, one rerun at most."""
    assert first["raised"] == "StoreFailed", first
    assert flow.store.split("///", 1)[1] in first["message"] or "value file" in first["message"], first
    run_id = first["run_id"]
    assert run_id
    # The first process is still alive: a run it kept would be refused here (RunOwnedElsewhere).
    resumed = flow.run_to_end("resume", run_id)
    assert resumed.get("status") == "completed", resumed
    counts = flow.executions()
    assert sorted(counts) == list(range(NODES))
    # Only the node whose commit failed ran again.
    assert sum(n - 1 for n in counts.values()) <= 1, counts
    state = _state(flow.store, run_id)
    for index in range(NODES):
        assert state[f"v{index:02d}"] == flow.expected_value(index, size)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MB tmpfs, unmounted afterwards."""
    need_root_tool("mount", "umount")
    folder = tmp_path / f"small-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    mounted = sh(f"mount -t tmpfs -o size=3M tmpfs {folder}")
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield folder
    finally:
        sh(f"umount -l {folder}")


def test_disk_full_mid_run_settles_the_run(small_disk: Path, tmp_path: Path) -> None:
    store = f"sqlite:///{small_disk}/runs.db"
    size = 300_000
    flow = ChaosFlow(tmp_path, store, NODES, fault_at=-1, fault="", size=size)
    first = flow.start("run")
    assert first["raised"] == "StoreFailed" and "disk" in first["message"].lower(), first
    assert "free disk space" in first["message"]
    # The store took the small write that marks the run failed, with the reason.
    run = dnb.get_run(first["run_id"], store=store)
    assert run.status == "failed" and "store failed" in (run.error or "")
    disconnect(store)
    assert sh(f"mount -o remount,size=40M {small_disk}").returncode == 0
    _check_resumed(flow, first, size)
    assert flow.release() == [0]


def _immutable(*paths: str) -> str:
    return "chattr +i " + " ".join(paths)


@contextlib.contextmanager
def _cleared(*paths: Path) -> Iterator[None]:
    try:
        yield
    finally:
        for path in paths:
            sh(f"chattr -R -i {path}")


def test_immutable_database_mid_run_gives_the_run_up(tmp_path: Path) -> None:
    need_root_tool("chattr")
    db = tmp_path / "runs.db"
    probe = tmp_path / "probe"
    probe.write_text("x")
    if sh(f"chattr +i {probe} && chattr -i {probe}").returncode != 0:
        pytest.skip("this file system does not take the immutable flag")
    store = f"sqlite:///{db}"
    size = 1000
    # The database file and its WAL become immutable: writes fail with an I/O error, reads work.
    # (Its shared-memory file stays writable: SQLite maps it, and a write to a mapped file that
    # became read-only is a SIGBUS no library can catch.)
    flow = ChaosFlow(tmp_path, store, NODES, fault_at=5, fault=_immutable(str(db), f"{db}-wal"), size=size)
    with _cleared(db, Path(f"{db}-wal")):
        first = flow.start("run")
        assert first["raised"] == "StoreFailed", first
        assert "writable" in first["message"] or "i/o" in first["message"].lower()
        # Nothing could be written: the run still names the live first process as its owner…
        run = dnb.get_run(first["run_id"], store=store)
        assert run.status == "running"
        disconnect(store)
        sh(f"chattr -i {db} {db}-wal")
        # …yet another process resumes it, because that process gave it up.
        _check_resumed(flow, first, size)
    assert flow.release() == [0]


def test_value_folder_that_cannot_be_written_settles_the_run(tmp_path: Path) -> None:
    need_root_tool("chattr")
    db = tmp_path / "runs.db"
    folder = Path(f"{db}-blobs")
    store = f"sqlite:///{db}"
    size = [5_000_000 if i in (2, 6) else 1000 for i in range(NODES)]
    flow = ChaosFlow(tmp_path, store, NODES, fault_at=6, fault=f"chattr +i {folder}", size=size)
    with _cleared(folder):
        first = flow.start("run")
        if not folder.exists():
            pytest.skip("values of this size were not kept as files")
        assert first["raised"] == "StoreFailed", first
        assert "value file" in first["message"]
        run = dnb.get_run(first["run_id"], store=store)
        assert run.status == "failed"
        disconnect(store)
        sh(f"chattr -i {folder}")
        resumed = flow.run_to_end("resume", first["run_id"])
    assert resumed["status"] == "completed", resumed
    counts = flow.executions()
    assert sum(n - 1 for n in counts.values()) <= 1, counts
    state = _state(store, first["run_id"])
    assert all(state[f"v{i:02d}"] == bytes([i]) * size[i] for i in range(NODES))
    assert flow.release() == [0]


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_damaged_value_file_is_a_typed_error_and_the_run_stays_resumable(tmp_path: Path, damage: str) -> None:
    db = tmp_path / "runs.db"
    store = f"sqlite:///{db}"
    size = [5_000_000 if i == 1 else 1000 for i in range(NODES)]
    # The run is interrupted (the node kills its own process) after the big value was committed.
    flow = ChaosFlow(tmp_path, store, NODES, fault_at=4, fault="kill -9 $PPID", size=size)
    assert flow.crash("run") == -9
    run_id = str(dnb.runs("chaos", store=store).run_id.iloc[0])
    disconnect(store)
    files = [p for p in Path(f"{db}-blobs").iterdir() if not p.name.startswith(".")]
    assert len(files) == 1
    kept = tmp_path / "kept-value"
    shutil.copy(files[0], kept)
    if damage == "deleted":
        files[0].unlink()
    else:
        with open(files[0], "r+b") as handle:
            handle.truncate(1000)
    failed = flow.run_to_end("resume", run_id)
    assert failed.get("raised") in ("StoreError", "StoreFailed", "TamperedValueError"), failed
    assert "value" in failed["message"].lower()
    # Refused before taking the run: it is exactly as the crash left it, and resumable.
    run = dnb.get_run(run_id, store=store)
    assert run.status == "running"
    disconnect(store)
    shutil.copy(kept, files[0])
    resumed = flow.run_to_end("resume", run_id)
    assert resumed["status"] == "completed", resumed
    counts = flow.executions()
    assert counts[4] == 2 and all(counts[i] == 1 for i in range(NODES) if i != 4), counts
    state = _state(store, run_id)
    assert all(state[f"v{i:02d}"] == bytes([i]) * size[i] for i in range(NODES))


def test_read_only_store_refuses_cleanly_and_resumes_once_writable(tmp_path: Path) -> None:
    need_root_tool("chattr")
    folder = tmp_path / "store"
    folder.mkdir()
    db = folder / "runs.db"
    store = f"sqlite:///{db}"
    size = 1000
    # A crash at node 4 leaves a running run behind; then the store becomes read-only (its files
    # and its folder immutable, so nothing can be written or created there).
    flow = ChaosFlow(tmp_path, store, NODES, fault_at=4, fault="kill -9 $PPID", size=size)
    assert flow.crash("run") == -9
    run_id = str(dnb.runs("chaos", store=store).run_id.iloc[0])
    disconnect(store)
    files = [str(p) for p in folder.iterdir()]
    with _cleared(folder):
        assert sh(f"chattr +i {' '.join(files)} && chattr +i {folder}").returncode == 0
        refused = flow.run_to_end("resume", run_id)  # exits 0: no SIGBUS at exit either
        assert refused.get("raised") in ("StoreFailed", "StoreUnavailable"), refused
        assert "writable" in refused["message"] or "read" in refused["message"].lower(), refused
        sh(f"chattr -i {folder} && chattr -i {' '.join(files)}")
    assert dnb.get_run(run_id, store=store).status == "running"
    disconnect(store)
    resumed = flow.run_to_end("resume", run_id)
    assert resumed["status"] == "completed", resumed
    counts = flow.executions()
    assert counts[4] == 2 and all(counts[i] == 1 for i in range(NODES) if i != 4), counts
    state = _state(store, run_id)
    assert all(state[f"v{i:02d}"] == flow.expected_value(i, size) for i in range(NODES))
