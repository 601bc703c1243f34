"""Records built and copied without their __init__ (a node's hot path) equal the ones it builds."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from typing import Any

import pytest

from durable_nb import model
from durable_nb.model import CheckpointDraft, CheckpointRecord, CheckpointStatus, RunKind, RunRecord, RunStatus
from durable_nb.model.records import evolve
from durable_nb.store import rows
from durable_nb.store.blob_files import FileBlob


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


# The model's records of runs, checkpoints and commits: built on every node's path.
RECORDS = [
    cls
    for cls in vars(model).values()
    if dataclasses.is_dataclass(cls) and cls.__module__ in ("durable_nb.model.records", "durable_nb.model.commits")
]


def test_quick_inits_are_the_ones_dataclasses_writes() -> None:
    """Same parameters, kinds and defaults; factories make a fresh value for each record."""
    assert {c.__name__ for c in RECORDS} >= {"RunRecord", "CheckpointDraft", "CheckpointRecord", "Commit", "NewEvent"}
    for cls in RECORDS:
        init = cls.__init__
        # Made by quick_init: its setters are the compiled function's closure, or globals of text compiled here.
        assert "_set0" in init.__code__.co_freevars or "_set0" in init.__globals__, cls
        fields = dataclasses.fields(cls)
        twin = dataclasses.make_dataclass(
            cls.__name__,
            [
                (
                    f.name,
                    Any,
                    dataclasses.field(default=f.default, default_factory=f.default_factory, kw_only=f.kw_only),
                )
                for f in fields
            ],
            frozen=True,
            slots=True,
        )
        ours, theirs = inspect.signature(cls), inspect.signature(twin)
        assert [(p.name, p.kind, repr(p.default)) for p in ours.parameters.values()] == [
            (p.name, p.kind, repr(p.default)) for p in theirs.parameters.values()
        ], cls
        required = {n: f"<{n}>" for n, p in ours.parameters.items() if p.default is inspect.Parameter.empty}
        first, second = cls(**required), cls(**required)
        built = twin(**required)
        assert [getattr(first, f.name) for f in fields] == [getattr(built, f.name) for f in fields], cls
        for f in fields:
            if f.default_factory is not dataclasses.MISSING:
                assert getattr(first, f.name) is not getattr(second, f.name), (cls, f.name)
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(first, fields[0].name, "other")


def _twin(cls: type) -> Any:
    """The class dataclasses writes for ``cls``'s fields: frozen and slotted, with its own methods."""
    return dataclasses.make_dataclass(
        cls.__name__,
        [
            (
                f.name,
                Any,
                dataclasses.field(
                    default=f.default,
                    default_factory=f.default_factory,
                    kw_only=f.kw_only,
                    compare=f.compare,
                    repr=f.repr,
                ),
            )
            for f in dataclasses.fields(cls)
        ],
        frozen=True,
        slots=True,
    )


@pytest.mark.parametrize("cls", [*RECORDS, FileBlob], ids=lambda cls: cls.__name__)
def test_records_compare_show_and_pickle_as_the_dataclasses_they_were(cls: type) -> None:
    """Equality, hash, repr, pickling and freezing, written once for all records, behave as dataclasses' own."""
    twin = _twin(cls)
    required = {n: f"<{n}>" for n, p in inspect.signature(cls).parameters.items() if p.default is p.empty}
    first, second, theirs = cls(**required), cls(**required), twin(**required)
    assert first == second and not first != second and first != theirs
    assert repr(first) == repr(theirs)
    for f in dataclasses.fields(cls):
        other = dataclasses.replace(first, **{f.name: "<other>"})
        assert (other == first) is (not f.compare), f.name
        assert (other == first) is (dataclasses.replace(theirs, **{f.name: "<other>"}) == theirs), f.name
    hashable = {"data": b"x"} if "data" in required else {}
    try:
        expected: Any = hash(twin(**{**required, **hashable}))
    except TypeError:
        expected = TypeError
    if expected is TypeError:
        with pytest.raises(TypeError):
            hash(cls(**{**required, **hashable}))
    else:
        assert hash(cls(**{**required, **hashable})) == hash(cls(**{**required, **hashable}))
    for copied in (pickle.loads(pickle.dumps(first)), copy.copy(first), copy.deepcopy(first)):
        # Every field comes back (a marker such as UNCHANGED as a copy of itself, as it did).
        assert repr(copied) == repr(first) and type(copied) is cls
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(first, dataclasses.fields(cls)[0].name)
