"""Content-addressed values: an unchanged value is never written again."""

from __future__ import annotations

import os
import sqlite3

import pytest
from conftest import db_path, execute_sql

import durable_nb as dnb
from durable_nb.store import codec


def chain(store_url: str, length: int) -> dnb.Workflow:
    flow = dnb.Workflow("chain", store=store_url)
    previous = None
    for index in range(length):

        def step(state, index=index):
            return {"step": index}

        step.__name__ = f"n{index:02d}"
        flow.node(step, after=previous)
        previous = step.__name__
    return flow


def file_size(url: str) -> int:
    path = db_path(url)
    # Fold the write-ahead log into the file so its size is what the data costs.
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return os.path.getsize(path) + (os.path.getsize(path + "-wal") if os.path.exists(path + "-wal") else 0)


@pytest.mark.sqlite_only
def test_one_megabyte_value_through_fifty_nodes(store_url: str) -> None:
    """A 1 MB value carried unchanged through 50 nodes grows the file by less than 2 MB."""
    flow = chain(store_url, 50)
    flow.run({"warmup": True})  # create the schema so only the run's data is measured
    before = file_size(store_url)
    big = os.urandom(1_000_000)
    run = flow.run({"big": big})
    assert run.status == "completed"
    grown = file_size(store_url) - before
    assert grown < 2_000_000, f"store grew by {grown} bytes"
    assert dnb.get_run(run.id, store=store_url).state["big"] == big
    with sqlite3.connect(db_path(store_url)) as conn:
        copies = conn.execute("SELECT COUNT(*) FROM blobs WHERE size >= 1000000").fetchone()[0]
    assert copies == 1


def test_same_value_in_two_runs_is_stored_once(store_url: str) -> None:
    """Equal values share one blob across runs."""
    flow = chain(store_url, 2)
    payload = list(range(50_000))
    flow.run({"payload": payload})
    flow.run({"payload": payload})
    [(blobs,)] = execute_sql(store_url, "SELECT COUNT(*) FROM blobs WHERE size > 100000")
    assert blobs == 1


def test_plain_data_is_json_and_the_rest_is_signed_pickle() -> None:
    """JSON for plain data (no code runs on load); pickle with an HMAC address otherwise."""
    key = b"k" * 32
    assert codec.encode({"a": [1, 2.5, None, "x", True]}, key).codec == "json"
    for value in [(1, 2), {1: "int key"}, {"s": {1, 2}}, b"bytes", float("nan"), complex(1, 2)]:
        blob = codec.encode(value, key)
        assert blob.codec == "pickle", value
        assert blob.hash.startswith("p-")
        loaded = codec.decode(blob, key)
        assert loaded == value or (isinstance(value, float) and loaded != loaded)
    # The address depends on the key: another key cannot forge or verify it.
    assert codec.encode((1, 2), key).hash != codec.encode((1, 2), b"other-key").hash


def test_functions_and_classes_from_main_survive() -> None:
    """cloudpickle carries functions and classes defined interactively."""
    key = b"k" * 32
    namespace: dict[str, object] = {"__name__": "__main__"}
    exec("class Point:\n    def __init__(self, x):\n        self.x = x\nsquare = lambda v: v * v\n", namespace)
    blob = codec.encode({"cls": namespace["Point"], "fn": namespace["square"]}, key)
    loaded = codec.decode(blob, key)
    assert loaded["fn"](7) == 49
    assert loaded["cls"](3).x == 3


def test_a_digest_read_under_another_key_is_not_trusted() -> None:
    """A store may hand on the digest it computed while reading a blob, but only a digest
    made with the loader's own key is used; any other is ignored and the bytes are checked."""
    from durable_nb.model import Blob

    key = b"k" * 32
    good = codec.encode((1, 2), key)
    evil = Blob(good.hash, "pickle", b"not the pickle", read_digest=(b"other-key", good.hash[2:]))
    with pytest.raises(dnb.TamperedValueError):
        codec.decode(evil, key)
    trusted = Blob(good.hash, "pickle", good.data, read_digest=(key, good.hash[2:]))
    assert codec.decode(trusted, key) == (1, 2)
