"""The hot path of a commit, made cheaper, still computes what the plain ways compute: a value's
signature, a LangGraph value's blob, the record a draft becomes and the run row a commit leaves."""

from __future__ import annotations

import dataclasses
import hmac
import os
import pickle

import pytest

from durable_nb.model import (
    UNCHANGED,
    CheckpointDraft,
    CheckpointStatus,
    Commit,
    RunKind,
    RunRecord,
    RunStatus,
    RunUpdate,
)
from durable_nb.store import codec, rows, rules


@pytest.mark.parametrize("key_bytes", [0, 1, 32, 63, 64, 65, 200])
def test_a_signature_is_hmac_sha256_of_the_bytes_whatever_their_size(key_bytes: int) -> None:
    key = os.urandom(key_bytes)
    for size in (0, 1, 55, 56, 63, 64, 65, 255, 256, 257, 5000):
        data = os.urandom(size)
        assert codec._sign(key, data) == hmac.digest(key, data, "sha256").hex()
        assert codec._sign(key, memoryview(data)) == hmac.digest(key, data, "sha256").hex()


def test_a_pending_writes_signature_is_hmac_sha256_of_its_fields_as_stores_hold_them() -> None:
    """The layout stored writes were signed with: each text field after its length."""
    key = os.urandom(32)
    laid_out = b"durable_nb pending write\x003:c-14:task0:4:step1:pp-1"
    assert codec.write_mac(key, "c-1", "task", 0, "step", "p", "p-1") == hmac.digest(key, laid_out, "sha256").hex()


def test_a_serializers_pair_is_the_blob_encode_makes_of_it() -> None:
    key = os.urandom(32)
    typed = ("msgpack", b"\x81\xa4step\x01")
    assert codec.encode_typed(typed, key) == codec.encode(typed, key)
    assert pickle.loads(codec.encode_typed(typed, key).data) == typed


def test_a_written_draft_keeps_every_field() -> None:
    names = [field.name for field in dataclasses.fields(CheckpointDraft)]
    draft = CheckpointDraft(**{name: f"value of {name}" for name in names})  # type: ignore[arg-type]
    record = rows.checkpoint_from_draft("run", 7, 1.5, draft)
    assert {name: getattr(record, name) for name in names} == {name: getattr(draft, name) for name in names}
    assert (record.run_id, record.seq, record.created_at) == ("run", 7, 1.5)


@pytest.mark.parametrize(
    "update",
    [None, RunUpdate(status=RunStatus.COMPLETED, error=None), RunUpdate(owner="me", lease_until=9.0), RunUpdate()],
)
def test_a_commit_leaves_the_run_row_replace_would(update: RunUpdate | None) -> None:
    run = RunRecord(
        "run", "name", RunKind.WORKFLOW, RunStatus.PAUSED, 1.0, 2.0, {"a": "p-1"}, "boom", "ValueError",
        "key", "parent", "cp", "owner", 5.0, 3, 4, {"m": 1},
    )  # fmt: skip
    commit = Commit("run", checkpoints=[CheckpointDraft("c", "after:n", "n", CheckpointStatus.OK)], run=update)
    changes: dict[str, object] = {"updated_at": 9.5, "head_seq": 4, "event_seq": 6}
    for name in ("status", "error", "error_type", "owner", "lease_until"):
        value = getattr(update, name, UNCHANGED)
        if value is not UNCHANGED:
            changes[name] = value
    assert rules.updated_run(run, commit, 9.5, 1, 2) == dataclasses.replace(run, **changes)  # type: ignore[arg-type]
