"""JSON columns: written by orjson when it is installed, read back as the standard library wrote them."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from durable_nb.store import rows

orjson = pytest.importorskip("orjson")

STDLIB = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


class CountingEncoder:
    """Stands for the standard library's encoder; counts what it is given."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def encode(self, value: Any) -> str:
        self.values.append(value)
        return STDLIB.encode(value)


@pytest.fixture
def encoder(monkeypatch: pytest.MonkeyPatch) -> CountingEncoder:
    counting = CountingEncoder()
    monkeypatch.setattr(rows, "_ENCODER", counting)
    return counting


def versions(channels: int) -> dict[str, Any]:
    """A LangGraph checkpoint's versions and seen versions, as the saver stores them."""
    made = {f"branch:to:n{i}": f"{i:032}.0.{i / 7}" for i in range(channels)}
    return {"langgraph": {"versions": made, "seen": {f"n{i}": {k: v} for i, (k, v) in enumerate(made.items())}}}


def test_plain_columns_are_written_without_the_standard_encoder(encoder: CountingEncoder) -> None:
    value = {**versions(50), "text": 'é \u2028 \x1f "q" \\', "n": [1, 2.5, True, -(2**63)]}
    written = rows.dumps(value)
    assert json.loads(written) == value
    assert encoder.values == []


@pytest.mark.parametrize(
    "value",
    [
        {"nan": math.nan, "inf": [math.inf, -math.inf]},  # orjson would write null
        {1: "a", None: "b"},  # keys that are not text
        {"big": 2**70},
        {"lone": "\ud800"},
        {"null": None},
    ],
)
def test_what_orjson_writes_otherwise_is_written_by_the_standard_encoder(encoder: CountingEncoder, value: Any) -> None:
    assert rows.dumps(value) == STDLIB.encode(value)
    assert len(encoder.values) == 1


def test_empty_columns_take_no_encoder(encoder: CountingEncoder) -> None:
    assert (rows.dumps({}), rows.dumps([])) == ("{}", "[]")
    assert encoder.values == []
