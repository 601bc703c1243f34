"""Records built and copied without their __init__ (a node's hot path) equal the ones it builds."""

from __future__ import annotations

import dataclasses

import pytest

from durable_nb.model import CheckpointDraft, CheckpointRecord, CheckpointStatus, RunKind, RunRecord, RunStatus
from durable_nb.model.records import evolve
from durable_nb.store import rows


def test_evolve_is_dataclasses_replace() -> None:
    run = RunRecord("r", "flow", RunKind.WORKFLOW, RunStatus.RUNNING, 1.0, 2.0, {"a": "h"}, owner="me", meta={"k": 1})
    changes = {"status": RunStatus.COMPLETED, "owner": None, "head_seq": 7, "updated_at": 3.0}
    copied = evolve(run, **changes)
    assert copied == dataclasses.replace(run, **changes) and type(copied) is RunRecord
    assert evolve(run) == run and evolve(run) is not run
    with pytest.raises(dataclasses.FrozenInstanceError):
        copied.owner = "other"  # type: ignore[misc]
    with pytest.raises(TypeError, match="no field 'colour'"):
        evolve(run, colour="red")
    record = rows.checkpoint_from_draft("r", 1, 1.0, CheckpointDraft("c", "s", None, CheckpointStatus.OK))
    with pytest.raises(TypeError, match="positional fields alone"):
        evolve(record, seq=2)


def test_a_written_draft_is_the_record_its_init_builds() -> None:
    draft = CheckpointDraft("c", "after:n", "n", CheckpointStatus.OK, ["m"], {"x": "h"}, ["n"], extra={"e": 1})
    built = CheckpointRecord(
        run_id="r", seq=4, created_at=5.0, **{f.name: getattr(draft, f.name) for f in dataclasses.fields(draft)}
    )
    written = rows.checkpoint_from_draft("r", 4, 5.0, draft)
    assert written == built and type(written) is CheckpointRecord
    assert [getattr(written, f.name) for f in dataclasses.fields(built)] == list(dataclasses.astuple(built))


def test_a_commits_written_checkpoints_are_built_when_read() -> None:
    drafts = [CheckpointDraft(f"c{i}", f"after:n{i}", f"n{i}", CheckpointStatus.OK) for i in range(3)]
    written = rows.Written("r", 4, 5.0, drafts)
    assert len(written) == 3 and written._records is None  # a node's runner reads none of them
    expected = [rows.checkpoint_from_draft("r", 5 + i, 5.0, d) for i, d in enumerate(drafts)]
    assert written == expected and written[-1].seq == 7 and written[1:] == expected[1:]
    head, tail = expected[:1], expected[1:]
    assert written + tail == expected + tail and head + written == head + expected
    assert list(reversed(written)) == expected[::-1]
