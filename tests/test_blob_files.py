"""Large values of a SQLite store live as files beside it, written once (README: The store).

A value of 4 MB or more is written once, to ``<file>-blobs/<address>``, before the commit that
refers to it; its row keeps the size. These tests check where the bytes go, that a tampered
or missing file is a typed error and never runs code, that prune deletes exactly the files no
row refers to, and that a file deleted between writing and committing is written again.
"""

from __future__ import annotations

import os
import pickle
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import db_path, execute_sql

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.store import blob_files

pytestmark = pytest.mark.sqlite_only

BIG = 6 << 20


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def big_flow(store_url: str, name: str = "big") -> dnb.Workflow:
    flow = dnb.Workflow(name, store=store_url)

    @flow.node(retry_count=0)
    def make(state: dict[str, Any]) -> dict[str, Any]:
        return {"payload": os.urandom(BIG), "small": 1}

    @flow.node(after="make", retry_count=0)
    def use(state: dict[str, Any]) -> dict[str, Any]:
        return {"length": len(state["payload"])}

    return flow


def folder(store_url: str) -> Path:
    return Path(f"{db_path(store_url)}-blobs")


def value_files(store_url: str) -> list[Path]:
    return sorted(p for p in folder(store_url).iterdir() if not p.name.startswith("."))


def head_hash(store_url: str, run_id: str, name: str) -> str:
    return str(run_sync(dnb.connect(store_url).state_at(run_id)).manifest[name])


def test_a_large_value_is_written_once_as_a_private_file(store_url: str) -> None:
    """The bytes of a large value are in one file (mode 0600, folder 0700), not in the
    database; its row keeps the size; the value loads back whole."""
    run = big_flow(store_url).run({})
    assert run.status == "completed" and run.state["length"] == BIG
    address = head_hash(store_url, run.id, "payload")
    [file] = value_files(store_url)
    assert file.name == address and file.stat().st_size > BIG
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder(store_url).stat().st_mode) == 0o700
    [(size, stored)] = execute_sql(store_url, "SELECT size, length(data) FROM blobs WHERE hash = ?", (address,))
    assert size == file.stat().st_size and stored == 0
    loaded = dnb.get_run(run.id, store=store_url).state["payload"]
    assert isinstance(loaded, (bytes, bytearray)) and len(loaded) == BIG
    # The small values stay in the database.
    assert execute_sql(store_url, "SELECT COUNT(*) FROM blobs WHERE length(data) = 0")[0][0] == 1


def test_a_tampered_value_file_never_runs_code(store_url: str, tmp_path: Path) -> None:
    """A value file replaced by a pickle that runs code is refused (TamperedValueError)."""
    run = big_flow(store_url).run({})
    [file] = value_files(store_url)
    marker = tmp_path / "pwned"
    file.write_bytes(pickle.dumps(_Evil(str(marker))) + b"\0" * BIG)
    with pytest.raises(dnb.TamperedValueError, match="signature check"):
        _ = dnb.get_run(run.id, store=store_url).state
    assert not marker.exists()
    assert dnb.get_run(run.id, store=store_url).status == "completed"


def test_a_missing_value_file_is_a_store_error(store_url: str) -> None:
    """A value whose file was deleted outside durable_nb raises StoreError naming what to do."""
    run = big_flow(store_url).run({})
    [file] = value_files(store_url)
    file.unlink()
    with pytest.raises(dnb.StoreError, match="lacks the stored values of \\['payload'\\]"):
        _ = dnb.get_run(run.id, store=store_url).state
    # A truncated file is refused as tampered, and nothing else of the run is harmed.
    run2 = big_flow(store_url, "big-2").run({})
    [file2] = value_files(store_url)
    file2.write_bytes(file2.read_bytes()[:1000])
    with pytest.raises(dnb.TamperedValueError, match="has 1000 of its"):
        _ = dnb.get_run(run2.id, store=store_url).state
    assert dnb.get_run(run2.id, store=store_url).status == "completed"


def test_prune_deletes_only_files_no_row_refers_to(store_url: str) -> None:
    """Prune: the file of a pruned value goes, a value still referenced keeps its file, and
    files of commits that never happened (an orphan, a long-dead temporary) are cleared."""
    flow = dnb.Workflow("prune-files", store=store_url)

    @flow.node(retry_count=0)
    def make(state: dict[str, Any]) -> dict[str, Any]:
        return {"payload": os.urandom(BIG)}

    @flow.node(after="make", retry_count=0)
    def replace(state: dict[str, Any]) -> dict[str, Any]:
        return {"payload": os.urandom(BIG)}

    run = flow.run({})
    assert run.status == "completed"
    first, second = (run_sync(dnb.connect(store_url).state_at(run.id, seq)).manifest for seq in (1, 2))
    assert len(value_files(store_url)) == 2
    orphan = folder(store_url) / ("p-" + "0" * 64)
    orphan.write_bytes(b"left by a commit that never happened")
    stale = folder(store_url) / ".p-dead.tmp"
    stale.write_bytes(b"an interrupted write")
    old = time.time() - 7200
    os.utime(stale, (old, old))
    fresh = folder(store_url) / ".p-live.tmp"
    fresh.write_bytes(b"a write in progress")

    time.sleep(0.05)
    report = dnb.prune(0, store=store_url)  # everything older than now
    assert report.checkpoints == 1  # after:make; after:replace stays as the resume point
    remaining = {p.name for p in value_files(store_url)}
    assert remaining == {head_hash(store_url, run.id, "payload")}
    assert remaining.isdisjoint({orphan.name}) and first != second
    assert not stale.exists() and fresh.exists()
    assert len(dnb.get_run(run.id, store=store_url).state["payload"]) == BIG


def test_a_file_deleted_before_its_commit_is_written_again(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A prune may delete a value file between its writing and its commit; the commit then
    finds it gone under the write lock, writes it again and commits, never a dangling row."""
    original = blob_files.BlobFolder.write
    deleted: list[str] = []

    def write_then_lose(self: blob_files.BlobFolder, blob: Any) -> Any:
        stand_in = original(self, blob)
        if not deleted:
            deleted.append(stand_in.path)
            os.unlink(stand_in.path)  # what a concurrent prune would do
        return stand_in

    monkeypatch.setattr(blob_files.BlobFolder, "write", write_then_lose)
    run = big_flow(store_url).run({})
    assert deleted and run.status == "completed"
    assert Path(deleted[0]).exists()
    assert len(dnb.get_run(run.id, store=store_url).state["payload"]) == BIG


def test_files_that_keep_vanishing_raise_a_store_error(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """When something keeps deleting value files, the commit gives up with a StoreError that
    says so, and no row ever refers to a file that is not there."""
    original = blob_files.BlobFolder.write

    def write_and_lose(self: blob_files.BlobFolder, blob: Any) -> Any:
        stand_in = original(self, blob)
        os.unlink(stand_in.path)
        return stand_in

    monkeypatch.setattr(blob_files.BlobFolder, "write", write_and_lose)
    with pytest.raises(dnb.StoreError, match="deleted before the commit that needed it"):
        big_flow(store_url).run({})
    assert execute_sql(store_url, "SELECT COUNT(*) FROM blobs WHERE length(data) = 0")[0][0] == 0


CRASHING_FLOW = """
import os, signal, sys
import durable_nb as dnb
from durable_nb.store import blob_files

flow = dnb.Workflow("big-crash", store={store!r})


@flow.node(retry_count=0)
def make(state):
    with open({count!r}, "a") as handle:
        handle.write("make\\n")
    return {{"payload": os.urandom({size})}}


@flow.node(after="make", retry_count=0)
def use(state):
    return {{"length": len(state["payload"])}}


if __name__ == "__main__":
    if sys.argv[1] == "run":
        original = blob_files.BlobFolder.write

        def write_then_die(self, blob):
            stand_in = original(self, blob)
            os.kill(os.getpid(), signal.SIGKILL)  # the file is on disk; its commit never happens
            return stand_in

        blob_files.BlobFolder.write = write_then_die
        flow.run({{}})
    else:
        print(dnb.recover([flow]), flush=True)
"""


def test_a_kill_between_the_file_and_its_commit_loses_nothing(store_url: str, tmp_path: Path) -> None:
    """Crash recovery with value files: a process killed after writing a value's file but before the
    commit leaves an orphan file and no row; recovery runs the node again (once) and commits, and
    prune then removes the orphan."""
    import subprocess
    import sys

    from conftest import env_with_repo

    count = tmp_path / "count.txt"
    script = tmp_path / "big_crash.py"
    script.write_text(CRASHING_FLOW.format(store=store_url, count=str(count), size=BIG))
    killed = subprocess.run([sys.executable, str(script), "run"], env=env_with_repo(), timeout=120)
    assert killed.returncode == -9
    assert len(value_files(store_url)) == 1  # written, never referenced
    assert execute_sql(store_url, "SELECT COUNT(*) FROM blobs WHERE length(data) = 0")[0][0] == 0
    [(run_id, status)] = execute_sql(store_url, "SELECT run_id, status FROM runs")
    assert status == "running"

    recovered = subprocess.run(
        [sys.executable, str(script), "recover"], env=env_with_repo(), capture_output=True, text=True, timeout=120
    )
    assert recovered.returncode == 0, recovered.stderr
    run = dnb.get_run(run_id, store=store_url)
    assert run.status == "completed" and run.state["length"] == BIG
    assert count.read_text().splitlines() == ["make", "make"]  # the one node in flight, run again once
    assert len(value_files(store_url)) == 2
    dnb.prune(0, store=store_url)
    [kept] = value_files(store_url)
    assert kept.name == head_hash(store_url, run_id, "payload")


def test_a_value_folder_that_cannot_be_written_is_a_store_error(store_url: str) -> None:
    """When the value file cannot be written (here a plain file stands where the folder
    should be), the commit fails with a StoreError naming the file and what to do; no row
    refers to a missing file, and once the folder can be made the same store works."""
    blocker = folder(store_url)
    blocker.write_text("not a folder")
    with pytest.raises(dnb.StoreError, match=r"Cannot write the value file .*then run again"):
        big_flow(store_url).run({})
    assert execute_sql(store_url, "SELECT COUNT(*) FROM blobs WHERE length(data) = 0")[0][0] == 0
    blocker.unlink()
    assert big_flow(store_url, "big-again").run({}).status == "completed"


@pytest.mark.parametrize("kept", ["file", "row"])
def test_a_large_value_stored_before_signing_loads_only_with_its_seal(store_url: str, kept: str) -> None:
    """A large JSON value stored under its SHA-256 (as stores did before values were signed), in a
    file or (older still) in its row, loads with the seal the upgrade gives it under the key, and is
    refused with TamperedValueError without one."""
    import hashlib

    from forgekit import point_head_at

    from durable_nb.store import codec
    from durable_nb.store.secret import load_secret

    flow = dnb.Workflow("big-json", store=store_url)

    @flow.node(retry_count=0)
    def make(state: dict[str, Any]) -> dict[str, Any]:
        return {"numbers": list(range(1_000_000))}

    run = flow.run({})
    signed = head_hash(store_url, run.id, "numbers")
    [file] = value_files(store_url)
    data = file.read_bytes()
    assert len(data) >= blob_files.FILE_BYTES and file.name == signed
    unsigned = "j-" + hashlib.sha256(data).hexdigest()
    if kept == "file":
        file.rename(folder(store_url) / unsigned)
        execute_sql(store_url, "UPDATE blobs SET hash = ? WHERE hash = ?", (unsigned, signed))
    else:
        file.unlink()
        execute_sql(store_url, "UPDATE blobs SET hash = ?, data = ? WHERE hash = ?", (unsigned, data, signed))
    point_head_at(store_url, run.id, "numbers", unsigned)

    with pytest.raises(dnb.TamperedValueError, match="no valid seal"):
        _ = dnb.get_run(run.id, store=store_url).state
    execute_sql(store_url, "UPDATE blobs SET seal = ? WHERE hash = ?", (codec.seal(unsigned, load_secret()), unsigned))
    assert dnb.get_run(run.id, store=store_url).state["numbers"] == list(range(1_000_000))
