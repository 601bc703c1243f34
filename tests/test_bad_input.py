"""Bad input never corrupts or loses stored data (the README's Errors, The store and Security).

Each test feeds durable_nb one kind of bad input: a tampered or malicious stored value, a
value that cannot be serialized, an unknown run id, a store from a newer schema, a malformed
decision, state that is not a dict, a file or URL that is not a durable_nb store. Each checks
the error class and message, and then that what was stored before is still there and intact.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from conftest import db_path

import durable_nb as dnb
from durable_nb._loop import run_sync

# -- helpers --------------------------------------------------------------------------------

_TABLES = {
    "runs": "run_id",
    "checkpoints": "run_id, seq",
    "pending_interrupts": "run_id, node_id",
    "idempotency": "run_id, key",
    "blobs": "hash",
    "events": "run_id, seq",
    "schema_version": "version",
}

pytestmark = pytest.mark.sqlite_only


def _sql(url: str) -> sqlite3.Connection:
    """A plain sqlite3 connection to the store file, as an outside editor would open it."""
    return sqlite3.connect(db_path(url), isolation_level=None)


def _snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every durable_nb table, in a stable order."""
    with closing(_sql(url)) as conn:
        return {
            table: conn.execute(f"SELECT * FROM {table} ORDER BY {key}").fetchall() for table, key in _TABLES.items()
        }


def _count(url: str, table: str) -> int:
    with closing(_sql(url)) as conn:
        return int(conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def _steps(url: str, run_id: str) -> list[str]:
    return list(dnb.history(run_id, store=url)["step"])


def _head_manifest(url: str, run_id: str) -> dict[str, str]:
    return run_sync(dnb.connect(url).state_at(run_id)).manifest


def _blob(url: str, value_hash: str) -> tuple[str, bytes]:
    with closing(_sql(url)) as conn:
        codec, data = conn.execute("SELECT codec, data FROM blobs WHERE hash = ?", (value_hash,)).fetchone()
    return codec, bytes(data)


def _set_blob(url: str, value_hash: str, data: bytes, codec: str | None = None) -> None:
    with closing(_sql(url)) as conn:
        conn.execute("UPDATE blobs SET data = ? WHERE hash = ?", (data, value_hash))
        if codec is not None:
            conn.execute("UPDATE blobs SET codec = ? WHERE hash = ?", (codec, value_hash))


def _rename_blob(url: str, old: str, new: str) -> None:
    """Give a blob a new address everywhere it is referenced, as a careful attacker would."""
    with closing(_sql(url)) as conn:
        conn.execute("BEGIN")
        conn.execute("UPDATE blobs SET hash = ? WHERE hash = ?", (new, old))
        conn.execute(
            "UPDATE checkpoints SET changes = replace(changes, ?, ?), snapshot = replace(snapshot, ?, ?), "
            "node_output = replace(node_output, ?, ?)",
            (old, new, old, new, old, new),
        )
        conn.execute("UPDATE runs SET input_manifest = replace(input_manifest, ?, ?)", (old, new))
        conn.execute("COMMIT")


def _close_store(url: str) -> None:
    """Close this process's shared store for ``url`` so the next use opens the file again."""
    run_sync(dnb.connect(url).close())


def _flip(data: bytes, index: int) -> bytes:
    changed = bytearray(data)
    changed[index] ^= 0x01
    return bytes(changed)


class _Evil:
    """Unpickling this calls os.mkdir(path): stands for any code an attacker wants to run."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.mkdir, (self.path,))


def _evil_pickle(marker: Path) -> bytes:
    return pickle.dumps(_Evil(str(marker)))


@pytest.fixture
def pickled_run(store_url: str) -> Iterator[tuple[dnb.Workflow, str, str]]:
    """A completed run whose state holds a pickled value ``payload`` (a set) and JSON ``x``.

    Yields the workflow, the run id and the pickled value's address.
    """
    flow = dnb.Workflow("tamper", store=store_url)

    @flow.node(retry_count=0)
    def make(state: dict[str, Any]) -> dict[str, Any]:
        return {"payload": {1, 2, 3}}

    @flow.node(after="make", retry_count=0)
    def use(state: dict[str, Any]) -> dict[str, Any]:
        return {"total": sum(state["payload"])}

    run = flow.run({"x": 1})
    assert run.status == "completed"
    value_hash = _head_manifest(store_url, run.id)["payload"]
    assert value_hash.startswith("p-")
    assert _blob(store_url, value_hash)[0] == "pickle"
    yield flow, run.id, value_hash


def _json_sibling(url: str) -> str:
    """Another run in the same store holding only JSON values; returns its id."""
    flow = dnb.Workflow("sibling", store=url)

    @flow.node(retry_count=0)
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"y": state["x"] + 1}

    run = flow.run({"x": 41})
    assert run.status == "completed"
    return run.id


def _assert_tampered_message(error: BaseException) -> None:
    text = str(error)
    assert "signature check" in text  # what happened
    assert "not loaded" in text
    assert "DURABLE_NB_SECRET" in text and "fork" in text  # what to do next


# -- 1. a tampered pickled value -----------------------------------------------------------


def test_flipped_byte_in_pickled_blob_raises_tampered_and_nothing_is_lost(
    store_url: str, pickled_run: tuple[dnb.Workflow, str, str]
) -> None:
    """A pickled blob whose HMAC does not verify is never unpickled → TamperedValueError.

    The message says what happened and what to do; the run's stored history and the
    other runs are untouched, and the original value loads again once the byte is restored.
    """
    flow, run_id, value_hash = pickled_run
    sibling = _json_sibling(store_url)
    _, original = _blob(store_url, value_hash)
    before = _snapshot(store_url)

    _set_blob(store_url, value_hash, _flip(original, len(original) // 2))
    with pytest.raises(dnb.TamperedValueError) as caught:
        _ = dnb.get_run(run_id, store=store_url).state
    _assert_tampered_message(caught.value)
    assert isinstance(caught.value, dnb.StoreError)
    assert value_hash[:14] in str(caught.value)  # names the value's address

    # Reading failed; it changed nothing but the byte we flipped.
    after = _snapshot(store_url)
    assert {t: rows for t, rows in after.items() if t != "blobs"} == {
        t: rows for t, rows in before.items() if t != "blobs"
    }
    assert dnb.get_run(run_id, store=store_url).status == "completed"
    assert _steps(store_url, run_id) == ["after:make", "after:use", "run_end"]
    # Other values in the store still load.
    assert dnb.get_run(sibling, store=store_url).state == {"x": 41, "y": 42}

    # The documented way on: fork with the bad value overridden; the rest of the state loads
    # and the later node runs again on the new value.
    history = dnb.history(run_id, store=store_url)
    after_make = history.loc[history["step"] == "after:make", "checkpoint_id"].iloc[0]
    fork = flow.fork(run_id, checkpoint_id=after_make, state={"payload": {5}})
    assert fork.status == "completed"
    assert fork.state == {"x": 1, "payload": {5}, "total": 5}

    # Put the byte back: the value was never lost.
    _set_blob(store_url, value_hash, original)
    assert dnb.get_run(run_id, store=store_url).state == {"x": 1, "payload": {1, 2, 3}, "total": 6}


def test_tampered_value_stops_resume_before_any_node_runs(store_url: str) -> None:
    """Resume restores the last checkpoint; a tampered value in it raises
    TamperedValueError and no node runs on unverified state; restored, the run resumes."""
    flow = dnb.Workflow("tamper-resume", store=store_url)
    calls: list[str] = []
    broken = {"on": True}

    @flow.node(retry_count=0)
    def make(state: dict[str, Any]) -> dict[str, Any]:
        calls.append("make")
        return {"payload": frozenset({1, 2})}

    @flow.node(after="make", retry_count=0)
    def use(state: dict[str, Any]) -> dict[str, Any]:
        calls.append("use")
        if broken["on"]:
            raise RuntimeError("boom")
        return {"total": sum(state["payload"])}

    run = flow.run({})
    assert run.status == "failed"
    value_hash = _head_manifest(store_url, run.id)["payload"]
    _, original = _blob(store_url, value_hash)
    _set_blob(store_url, value_hash, _flip(original, 3))
    broken["on"] = False
    calls.clear()

    with pytest.raises(dnb.TamperedValueError) as caught:
        flow.resume(run.id)
    _assert_tampered_message(caught.value)
    assert calls == []  # no node ran on state that failed its check
    assert _steps(store_url, run.id) == ["after:make", "failed:use", "run_end"]

    _set_blob(store_url, value_hash, original)
    resumed = flow.resume(run.id)
    assert resumed.status == "completed"
    assert resumed.state["total"] == 3
    assert calls == ["use"]


@pytest.mark.parametrize("action", ["resume", "approve", "fork"])
def test_tampered_value_leaves_run_status_as_it_was(store_url: str, action: str) -> None:
    """Bad input never corrupts stored data: a resume, approve or fork refused with
    TamperedValueError leaves the run's status and record as they were."""
    flow = dnb.Workflow("tamper-status", store=store_url)

    @flow.node(retry_count=0)
    def make(state: dict[str, Any]) -> dict[str, Any]:
        return {"payload": {1}}

    @flow.node(after="make", retry_count=0)
    def wait(state: dict[str, Any]) -> dict[str, Any]:
        if action == "approve":
            dnb.gate("check", {"n": 1})
            return {}
        raise RuntimeError("boom")

    run = flow.run({})
    expected = "paused" if action == "approve" else "failed"
    assert run.status == expected
    value_hash = _head_manifest(store_url, run.id)["payload"]
    _set_blob(store_url, value_hash, _flip(_blob(store_url, value_hash)[1], 2))
    runs_before = _count(store_url, "runs")

    with pytest.raises(dnb.TamperedValueError):
        getattr(flow, action)(run.id)

    after = dnb.get_run(run.id, store=store_url)
    assert after.status == expected
    if action == "approve":
        assert after.pending_interrupt is not None
    else:
        assert after.error == run.error
    assert _count(store_url, "runs") == runs_before  # no half-made fork left running


# -- 2. a pickle that would run code ---------------------------------------------------------


def test_evil_payload_is_effective_when_unpickled(tmp_path: Path) -> None:
    """Control for the signed-value tests below: the payload really runs code if unpickled."""
    control = tmp_path / "control"
    pickle.loads(_evil_pickle(control))
    assert control.is_dir()


@pytest.mark.parametrize("attack", ["same-address", "sha256-address", "codec-json", "large"])
def test_malicious_pickle_never_runs(
    store_url: str, tmp_path: Path, pickled_run: tuple[dnb.Workflow, str, str], attack: str
) -> None:
    """A blob whose HMAC does not verify is never unpickled → TamperedValueError.

    The attacker swaps in a pickle that runs code: keeping the address, recomputing the
    address as a plain sha256 under the pickle prefix, relabelling the codec as json, or
    padding the pickle past the size the SQLite store reads and hashes in chunks.
    """
    flow, run_id, value_hash = pickled_run
    marker = tmp_path / "pwned"
    evil = _evil_pickle(marker)
    if attack == "large":
        evil += b"\0" * (6 << 20)  # pickle stops at its STOP opcode: the padding is never read
    sibling = _json_sibling(store_url)
    steps = _steps(store_url, run_id)

    _set_blob(store_url, value_hash, evil, codec="json" if attack == "codec-json" else None)
    if attack == "sha256-address":
        _rename_blob(store_url, value_hash, "p-" + hashlib.sha256(evil).hexdigest())

    with pytest.raises(dnb.TamperedValueError) as caught:
        _ = dnb.get_run(run_id, store=store_url).state
    _assert_tampered_message(caught.value)
    with pytest.raises(dnb.TamperedValueError):
        flow.fork(run_id)  # a fork keeps the bad value: it must not load it either
    assert not marker.exists()

    assert _steps(store_url, run_id) == steps
    assert dnb.get_run(run_id, store=store_url).status == "completed"
    assert dnb.get_run(sibling, store=store_url).state == {"x": 41, "y": 42}


@pytest.mark.parametrize("padding", [0, 6 << 20], ids=["small", "large"])
def test_malicious_pickle_relabelled_as_json_never_runs(
    store_url: str, tmp_path: Path, pickled_run: tuple[dnb.Workflow, str, str], padding: int
) -> None:
    """JSON blobs run no code on load; a pickle given a valid JSON address
    ("j-" + sha256) and codec json is refused and never unpickled, also when it is large
    enough for the SQLite store to read and hash it in chunks."""
    _, run_id, value_hash = pickled_run
    marker = tmp_path / "pwned"
    evil = _evil_pickle(marker) + b"\0" * padding
    _set_blob(store_url, value_hash, evil, codec="json")
    _rename_blob(store_url, value_hash, "j-" + hashlib.sha256(evil).hexdigest())

    with pytest.raises(dnb.TamperedValueError):
        _ = dnb.get_run(run_id, store=store_url).state
    assert not marker.exists()
    assert dnb.get_run(run_id, store=store_url).status == "completed"


def test_pickle_with_recomputed_json_address_raises_tampered(
    store_url: str, tmp_path: Path, pickled_run: tuple[dnb.Workflow, str, str]
) -> None:
    """A stored value that is not what its address claims is a TamperedValueError."""
    _, run_id, value_hash = pickled_run
    evil = _evil_pickle(tmp_path / "pwned")
    _set_blob(store_url, value_hash, evil, codec="json")
    _rename_blob(store_url, value_hash, "j-" + hashlib.sha256(evil).hexdigest())
    with pytest.raises(dnb.TamperedValueError):
        _ = dnb.get_run(run_id, store=store_url).state


def test_non_ascii_address_raises_tampered(store_url: str, pickled_run: tuple[dnb.Workflow, str, str]) -> None:
    """An address edited into a form that cannot verify is a TamperedValueError."""
    _, run_id, value_hash = pickled_run
    _rename_blob(store_url, value_hash, "p-é" + value_hash[3:])
    with pytest.raises(dnb.TamperedValueError):
        _ = dnb.get_run(run_id, store=store_url).state


# -- 3. a value that cannot be serialized -----------------------------------------------------


@pytest.mark.parametrize("kind", ["lock", "socket"])
def test_node_returning_unserializable_value_fails_run_without_half_commit(store_url: str, kind: str) -> None:
    """SerializationError names the variable and its type, nothing half-written is
    committed; the run fails with `Node '<label>' failed: …` and the error type is kept."""
    flow = dnb.Workflow("unserializable", store=store_url)
    sock = socket.socket()
    value: Any = threading.Lock() if kind == "lock" else sock
    type_name = "_thread.lock" if kind == "lock" else "socket.socket"

    @flow.node(retry_count=0)
    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": 1}

    @flow.node(after="first", retry_count=0)
    def bad(state: dict[str, Any]) -> dict[str, Any]:
        return {"fine": "ok", "handle": value}

    try:
        run = flow.run({"x": 1})
    finally:
        sock.close()
    assert run.status == "failed"
    assert run.error is not None
    assert run.error.startswith("Node 'bad' failed: SerializationError: ")
    assert "'handle'" in run.error and type_name in run.error
    assert run.record.error_type == "SerializationError"

    # No after:bad, and nothing of bad's updates (not even the serializable one) was committed.
    assert _steps(store_url, run.id) == ["after:first", "failed:bad", "run_end"]
    stored = dnb.get_run(run.id, store=store_url)
    assert stored.state == {"x": 1, "a": 1}
    with closing(_sql(store_url)) as conn:
        failed = conn.execute(
            "SELECT error_type, queue FROM checkpoints WHERE run_id = ? AND step = 'failed:bad'", (run.id,)
        ).fetchone()
        assert conn.execute("SELECT COUNT(*) FROM blobs WHERE data = ?", (b'"ok"',)).fetchone()[0] == 0
    assert failed[0] == "SerializationError"
    assert json.loads(failed[1])[0] == "bad"

    # The run is still resumable once the node is fixed.
    value = "now text"
    resumed = flow.resume(run.id)
    assert resumed.status == "completed"
    assert resumed.state == {"x": 1, "a": 1, "fine": "ok", "handle": "now text"}


def test_unserializable_run_input_is_refused_before_any_run_row(store_url: str) -> None:
    """SerializationError names the variable ("lock") and its type before anything
    is written: no run row, checkpoint, event or blob is created."""
    flow = dnb.Workflow("bad-input", store=store_url)

    @flow.node(retry_count=0)
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {}

    sibling = _json_sibling(store_url)
    before = _snapshot(store_url)
    with pytest.raises(dnb.SerializationError) as caught:
        flow.run({"ok": [1, 2], "lock": threading.Lock()})
    error = caught.value
    assert error.name == "lock"
    assert error.type_name == "_thread.lock"
    assert "'lock'" in str(error) and "_thread.lock" in str(error)
    assert "Keep such objects" in str(error)  # what to do
    assert _snapshot(store_url) == before
    assert list(dnb.runs(store=store_url)["run_id"]) == [sibling]


@pytest.mark.parametrize("value", ["bad \ud800 text", 10**5000], ids=["surrogate", "huge-int"])
def test_plain_looking_value_json_cannot_encode_round_trips(store_url: str, value: Any) -> None:
    """A plain-looking value JSON cannot hold (a lone surrogate, an int past the JSON
    digit limit) is stored exactly through the signed pickle codec, as input and as a node result."""
    flow = dnb.Workflow("odd-text", store=store_url)

    @flow.node(retry_count=0)
    def emit(state: dict[str, Any]) -> dict[str, Any]:
        return {"echo": state["text"]}

    run = flow.run({"text": value})
    assert run.status == "completed"
    stored = dnb.get_run(run.id, store=store_url).state
    assert stored["text"] == value and stored["echo"] == value
    assert _head_manifest(store_url, run.id)["echo"].startswith("p-")


# -- 4. an unknown run id -------------------------------------------------------------------


_UNKNOWN = "01900000-0000-7000-8000-000000000000"


@pytest.mark.parametrize(
    "call",
    [
        "get_run",
        "dnb.approve",
        "dnb.reject",
        "dnb.fork",
        "dnb.cancel",
        "history",
        "flow.approve",
        "flow.resume",
        "flow.fork",
        "flow.get",
    ],
)
def test_unknown_run_id_raises_run_not_found(store_url: str, call: str) -> None:
    """RunNotFound says which id was not found where and how to list runs; the store and
    its runs are left as they were."""
    flow = dnb.Workflow("known", store=store_url)

    @flow.node(retry_count=0)
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"done": True}

    known = flow.run({"x": 1})
    before = _snapshot(store_url)
    calls = {
        "get_run": lambda: dnb.get_run(_UNKNOWN, store=store_url),
        "dnb.approve": lambda: dnb.approve(_UNKNOWN, store=store_url, comment="ok"),
        "dnb.reject": lambda: dnb.reject(_UNKNOWN, store=store_url),
        "dnb.fork": lambda: dnb.fork(_UNKNOWN, state={"x": 2}, store=store_url),
        "dnb.cancel": lambda: dnb.cancel(_UNKNOWN, store=store_url),
        "history": lambda: dnb.history(_UNKNOWN, store=store_url),
        "flow.approve": lambda: flow.approve(_UNKNOWN, approved=True),
        "flow.resume": lambda: flow.resume(_UNKNOWN),
        "flow.fork": lambda: flow.fork(_UNKNOWN),
        "flow.get": lambda: flow.get(_UNKNOWN),
    }
    with pytest.raises(dnb.RunNotFound) as caught:
        calls[call]()
    error = caught.value
    assert isinstance(error, LookupError) and isinstance(error, dnb.DurableError)
    assert error.run_id == _UNKNOWN
    assert _UNKNOWN in str(error) and store_url in str(error)  # what and where
    assert "durable_nb.runs()" in str(error)  # what to do
    assert _snapshot(store_url) == before
    assert dnb.get_run(known.id, store=store_url).state == {"x": 1, "done": True}


def test_run_id_that_is_not_text_raises_durable_error(store_url: str) -> None:
    """One error class per failure mode; bad input is a DurableError, not a driver error."""
    _json_sibling(store_url)
    with pytest.raises(dnb.DurableError):
        dnb.get_run(["not", "an", "id"], store=store_url)  # type: ignore[arg-type]


# -- 5. a store written by a newer schema ---------------------------------------------------


def _file_state(url: str) -> tuple[bytes, dict[str, int]]:
    path = db_path(url)
    counts = {table: _count(url, table) for table in _TABLES}
    return Path(path).read_bytes(), counts


def test_newer_schema_is_refused_and_file_left_unchanged(store_url: str) -> None:
    """A store written by a newer schema is refused with SchemaMismatch (a clear
    error saying what to do) and left unchanged; it opens again once the code knows it."""
    flow = dnb.Workflow("schema", store=store_url)

    @flow.node(retry_count=0)
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"y": {1, 2}}

    run = flow.run({"x": 1})
    assert run.status == "completed"
    _close_store(store_url)
    with closing(_sql(store_url)) as conn:
        (known,) = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
        conn.execute("INSERT INTO schema_version VALUES (?, ?)", (known + 1, time.time()))
    file_before = _file_state(store_url)
    rows_before = _snapshot(store_url)

    store = dnb.connect(store_url)
    later = dnb.Workflow("schema", store=store_url)
    later.node(retry_count=0)(step)
    attempts = {
        "get_run": lambda: dnb.get_run(run.id, store=store),
        "runs": lambda: dnb.runs(store=store),
        "history": lambda: dnb.history(run.id, store=store),
        "run": lambda: later.run({"x": 2}),
        "fork": lambda: dnb.fork(run.id, state={"x": 3}, store=store),
    }
    for name, attempt in attempts.items():
        with pytest.raises(dnb.SchemaMismatch) as caught:
            attempt()
        message = str(caught.value)
        assert f"schema version {known + 1}" in message, name
        assert "newer" in message and "Upgrade durable_nb" in message, name
        assert isinstance(caught.value, dnb.StoreError)

    assert _file_state(store_url) == file_before
    assert _snapshot(store_url) == rows_before

    # Nothing was lost: with the newer marker gone (as after an upgrade), the run loads.
    with closing(_sql(store_url)) as conn:
        conn.execute("DELETE FROM schema_version WHERE version = ?", (known + 1,))
    assert dnb.get_run(run.id, store=store).state == {"x": 1, "y": {1, 2}}


# -- 6. malformed decisions -------------------------------------------------------------------


@pytest.fixture
def paused(store_url: str) -> tuple[dnb.Workflow, dnb.Run]:
    flow = dnb.Workflow("decide", store=store_url)

    @flow.node(retry_count=0)
    def draft(state: dict[str, Any]) -> dict[str, Any]:
        return {"draft": "hello"}

    @flow.node(after="draft", retry_count=0)
    def review(state: dict[str, Any]) -> dict[str, Any]:
        d = dnb.gate("approve_reply", {"draft": state["draft"]})
        return {"approved": d.approved, "value": d.value, "comment": d.comment, "by": d.by}

    run = flow.run({"ticket": 1})
    assert run.status == "paused"
    return flow, run


_BAD_DECISIONS = {
    "approved-text": {"approved": "yes"},
    "approved-int": {"approved": 1},
    "value-object": {"value": object()},
    "value-nan": {"value": float("nan")},
    "value-int-keys": {"value": {1: "x"}},
    "comment-int": {"comment": 5},
    "by-int": {"by": 3},
}
# durable_nb.approve has no approved= argument: it always approves.
_DECISION_CASES = [
    (bad, via) for bad in _BAD_DECISIONS for via in ("flow", "dnb") if via == "flow" or "approved" not in bad
]


@pytest.mark.parametrize(("bad", "via"), _DECISION_CASES)
def test_malformed_decision_leaves_gate_pending(
    store_url: str, paused: tuple[dnb.Workflow, dnb.Run], bad: str, via: str
) -> None:
    """A decision whose fields cannot be recorded raises InvalidDecision; the run
    stays paused with its pending gate intact (nothing claimed or written) and is then
    approved normally."""
    flow, run = paused
    fields = dict(_BAD_DECISIONS[bad])
    before = _snapshot(store_url)

    with pytest.raises(dnb.InvalidDecision) as caught:
        if via == "flow":
            flow.approve(run.id, **fields)
        else:
            dnb.approve(run.id, store=store_url, **fields)
    assert isinstance(caught.value, ValueError)
    field = next(iter(fields))
    assert field in str(caught.value)

    assert _snapshot(store_url) == before
    still = dnb.get_run(run.id, store=store_url)
    assert still.status == "paused"
    assert still.pending_interrupt == run.pending_interrupt
    assert still.pending_interrupt == {
        "reason": "approve_reply",
        "context": {"draft": "hello"},
        "node_id": "review",
        "agent_path": None,
    }

    done = flow.approve(run.id, approved=True, value={"k": [1]}, comment="fine", by="alice")
    assert done.status == "completed"
    assert done.state == {
        "ticket": 1,
        "draft": "hello",
        "approved": True,
        "value": {"k": [1]},
        "comment": "fine",
        "by": "alice",
    }
    assert _steps(store_url, run.id) == ["after:draft", "gate:review", "approved:review", "after:review", "run_end"]


# -- 7. state that is not a dict -------------------------------------------------------------


@pytest.mark.parametrize("bad", [[1, 2], {1: "x"}, "abc", 42], ids=["list", "int-key", "str", "int"])
def test_run_input_that_is_not_a_state_dict_is_refused(store_url: str, bad: Any) -> None:
    """Run input must be a state (a mapping name → value): InvalidState says what was wrong; no run is
    created and the store is unchanged."""
    flow = dnb.Workflow("not-a-dict", store=store_url)

    @flow.node(retry_count=0)
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {}

    sibling = _json_sibling(store_url)
    before = _snapshot(store_url)
    with pytest.raises(dnb.InvalidState) as caught:
        flow.run(bad)
    assert isinstance(caught.value, dnb.InvalidInput)
    message = str(caught.value)
    assert message.startswith("The run input")
    if isinstance(bad, dict):
        assert "not strings" in message and "[1]" in message
    else:
        assert f"not {type(bad).__name__}" in message
    assert _snapshot(store_url) == before
    assert dnb.get_run(sibling, store=store_url).state == {"x": 41, "y": 42}


@pytest.mark.parametrize("bad", [[1, 2], "done", {1: "x"}], ids=["list", "str", "int-key"])
def test_node_returning_non_dict_fails_run_cleanly(store_url: str, bad: Any) -> None:
    """A node whose result is not a dict of updates fails the run with
    `Node '<label>' failed: InvalidState: …`; nothing of it is committed, earlier checkpoints
    stay, and the run resumes once the node is fixed."""
    flow = dnb.Workflow("bad-result", store=store_url)
    result = {"value": bad}

    @flow.node(retry_count=0)
    def first(state: dict[str, Any]) -> dict[str, Any]:
        return {"a": 1}

    @flow.node(after="first", retry_count=0, label="Second step")
    def second(state: dict[str, Any]) -> Any:
        return result["value"]

    run = flow.run({"x": 1})
    assert run.status == "failed"
    assert run.error is not None
    assert run.error.startswith("Node 'Second step' failed: InvalidState: The result of node 'Second step'")
    if isinstance(bad, dict):
        assert "not strings" in run.error
    else:
        assert f"not {type(bad).__name__}" in run.error
    assert run.record.error_type == "InvalidState"
    assert _steps(store_url, run.id) == ["after:first", "failed:second", "run_end"]
    assert dnb.get_run(run.id, store=store_url).state == {"x": 1, "a": 1}

    result["value"] = {"b": 2}
    resumed = flow.resume(run.id)
    assert resumed.status == "completed"
    assert resumed.state == {"x": 1, "a": 1, "b": 2}


@pytest.mark.parametrize("via", ["flow", "dnb"])
@pytest.mark.parametrize("bad", ["x", [("a", 1)], {2: "b"}], ids=["str", "list", "int-key"])
def test_fork_with_non_dict_state_is_refused(store_url: str, via: str, bad: Any) -> None:
    """Fork state overrides must be a dict of str keys → InvalidState; no fork run
    is created and the original is untouched."""
    flow = dnb.Workflow("fork-bad", store=store_url)

    @flow.node(retry_count=0)
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"y": state["x"] * 2}

    run = flow.run({"x": 2})
    before = _snapshot(store_url)
    with pytest.raises(dnb.InvalidState) as caught:
        if via == "flow":
            flow.fork(run.id, state=bad)
        else:
            dnb.fork(run.id, state=bad, store=store_url)
    assert str(caught.value).startswith("Fork state overrides")
    assert _snapshot(store_url) == before
    assert list(dnb.runs(store=store_url)["run_id"]) == [run.id]
    assert flow.fork(run.id, state={"x": 5}).state == {"x": 5, "y": 4}  # step already done at the fork point


# -- 8. not a durable_nb store; malformed URLs --------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"hello, this is not a database", b"\x00" * 4096, b"SQLite format 3\x00" + b"\xff" * 200],
    ids=["text", "zeros", "bad-header"],
)
def test_garbage_file_is_refused_and_left_as_it_was(tmp_path: Path, content: bytes) -> None:
    """A file that is not a SQLite database raises StoreUnavailable naming the
    path; the file keeps its bytes and no side files are left behind."""
    path = tmp_path / "data" / "runs.db"
    path.parent.mkdir()
    path.write_bytes(content)
    url = f"sqlite:///{path}"
    flow = dnb.Workflow("garbage", store=url)

    @flow.node(retry_count=0)
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {}

    for attempt in (lambda: dnb.get_run(_UNKNOWN, store=url), lambda: dnb.runs(store=url), lambda: flow.run({})):
        with pytest.raises(dnb.StoreUnavailable) as caught:
            attempt()
        assert str(path) in str(caught.value)
        assert "durable_nb store" in str(caught.value)
    assert path.read_bytes() == content
    assert sorted(p.name for p in path.parent.iterdir()) == ["runs.db"]


def _foreign_db(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.executemany("INSERT INTO customers (name) VALUES (?)", [("ada",), ("grace",)])
        conn.commit()


def test_foreign_sqlite_database_is_refused_and_its_data_kept(tmp_path: Path) -> None:
    """A SQLite database durable_nb did not create raises StoreUnavailable
    naming its tables; no durable_nb table is added and its rows are kept."""
    path = tmp_path / "app.db"
    _foreign_db(path)
    url = f"sqlite:///{path}"
    with pytest.raises(dnb.StoreUnavailable) as caught:
        dnb.get_run(_UNKNOWN, store=url)
    assert "did not create" in str(caught.value) and "customers" in str(caught.value)
    assert "new file" in str(caught.value)
    with closing(sqlite3.connect(path)) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        assert tables == ["customers"]
        assert conn.execute("SELECT name FROM customers ORDER BY id").fetchall() == [("ada",), ("grace",)]


def test_foreign_sqlite_database_bytes_unchanged(tmp_path: Path) -> None:
    """Bad input never changes stored data: a refused foreign database keeps its bytes."""
    path = tmp_path / "app.db"
    _foreign_db(path)
    before = path.read_bytes()
    with pytest.raises(dnb.StoreUnavailable):
        dnb.get_run(_UNKNOWN, store=f"sqlite:///{path}")
    assert path.read_bytes() == before
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"


def test_directory_at_store_path_is_refused(tmp_path: Path) -> None:
    """A path that cannot be opened as a database raises StoreUnavailable."""
    folder = tmp_path / "runs.db"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    with pytest.raises(dnb.StoreUnavailable):
        dnb.get_run(_UNKNOWN, store=f"sqlite:///{folder}")
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]
    assert (folder / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(
    "url",
    ["mysql://x", "sqlite:/x", "sqlite:x", "", "runs.txt", "postgresql://nobody@localhost/none"],
)
def test_malformed_store_url_raises_store_unavailable(tmp_path: Path, url: str) -> None:
    """A malformed or unsupported store URL raises StoreUnavailable saying which URL
    forms work; nothing is created on disk."""
    before = sorted(os.listdir(tmp_path))  # the working directory (autouse fixture)
    with pytest.raises(dnb.StoreUnavailable) as caught:
        dnb.get_run(_UNKNOWN, store=dnb.connect(url))
    # Say which URL forms work, or (for a well-formed but unreachable server) what to check.
    advice = "Check the URL" if url.startswith("postgresql") else "sqlite:///"
    assert advice in str(caught.value)
    flow = dnb.Workflow("w", store=url)

    @flow.node(retry_count=0)
    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {}

    with pytest.raises(dnb.StoreUnavailable):
        flow.run({})
    assert sorted(os.listdir(tmp_path)) == before


def test_sqlite_url_with_one_slash_is_refused(tmp_path: Path) -> None:
    """A SQLite URL is sqlite:///path; "sqlite:/x.db" is malformed → StoreUnavailable."""
    with pytest.raises(dnb.StoreUnavailable):
        dnb.get_run(_UNKNOWN, store="sqlite:/x.db")
    assert not (tmp_path / "sqlite:").exists()


def test_store_path_under_a_file_raises_store_unavailable(tmp_path: Path) -> None:
    """StoreUnavailable covers an unreachable database, with a message saying what to do."""
    (tmp_path / "plain").write_text("x")
    with pytest.raises(dnb.StoreUnavailable):
        dnb.get_run(_UNKNOWN, store=f"sqlite:///{tmp_path}/plain/runs.db")
    assert (tmp_path / "plain").read_text() == "x"
