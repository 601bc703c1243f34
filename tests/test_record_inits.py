"""The records' ``__init__``, compiled with the package (``model._inits``), are the ones quick_init writes."""

from __future__ import annotations

import pytest

from durable_nb.model import _inits, records
from durable_nb.model.commits import Commit, RunUpdate
from durable_nb.model.records import CheckpointDraft, inits_source


def test_the_compiled_inits_are_what_the_records_make_now() -> None:
    """model/_inits.py is what write_inits() writes for today's records (after changing a record that
    quick_init makes, run ``python -c "from durable_nb.model.records import write_inits; write_inits()"``)."""
    with open(_inits.__file__, encoding="utf-8") as file:
        assert file.read() == inits_source()


def test_every_record_takes_its_compiled_init() -> None:
    """No record's __init__ is compiled at import: each one's text is in _inits."""
    inits_source()  # imports every module with such records
    missing = [name for name, (source, _) in records._written.items() if source not in _inits.FACTORIES]
    assert missing == []
    assert CheckpointDraft.__init__.__code__.co_filename == _inits.__file__
    assert CheckpointDraft.__init__.__qualname__ == "CheckpointDraft.__init__"
    assert CheckpointDraft.__init__.__module__ == "durable_nb.model.records"


def test_a_compiled_init_takes_and_sets_what_the_fields_say() -> None:
    """Positional and keyword fields, defaults, a fresh value from each factory, kw-only fields."""
    first, second = Commit("r1"), Commit(run_id="r2", claim="n")
    assert (first.run_id, first.claim, first.checkpoints) == ("r1", None, [])
    assert first.checkpoints is not second.checkpoints and second.claim == "n"
    assert RunUpdate(owner="me").owner == "me"
    with pytest.raises(TypeError):
        Commit()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Commit("r", nothing=1)  # type: ignore[call-arg]


def test_a_record_whose_text_changed_still_gets_an_init() -> None:
    """A quick_init record whose __init__ text _inits does not hold (one changed since) is compiled."""
    from dataclasses import dataclass, field

    @records.quick_init
    @dataclass(repr=False, eq=False, slots=True, init=False)
    class Probe(records.Record):
        a: int
        b: list[int] = field(default_factory=list)

    probe = Probe(1)
    assert (probe.a, probe.b) == (1, []) and Probe.__init__.__code__.co_filename == "<string>"
    records._written.pop(f"{__name__}.{Probe.__qualname__}")
