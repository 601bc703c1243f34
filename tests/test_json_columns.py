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


# Column text the decoder reads, some of which orjson reads otherwise or refuses.
DECODED = [
    '{"kernel":"k1","notebook":"sales.ipynb"}',
    '{"a":NaN,"b":Infinity,"c":-Infinity}',
    "[1e400]",
    "[123456789012345678901234567890,-99999999999999999999]",
    "[18446744073709551615,-9223372036854775808]",
    '["\\ud800","\\ud83d\\ude00","\\u0000","é"]',
    '{"a":1,"a":2}',
    "[-0,-0.0,0.1,1e-7,5e-324,1.7976931348623157e308,0.1000000000000000055511151231257827]",
    " [ true , false , null ] ",
    "[" * 2000 + "]" * 2000,
    # Long numbers wherever a number's digits may start: first, after a sign, a point, an exponent.
    "12345678901234567890",
    "-12345678901234567890",
    " 12345678901234567890",
    '{"a":\n\t12345678901234567890}',
    "[1.12345678901234567890123,1e+00000000000000000000005,2E00000000000000000000003]",
]


# LangGraph's channel versions: strings of 32 digits, in every checkpoint's metadata.
VERSIONS = (
    '{"versions":{"__start__":"00000000000000000000000000000002.0.1234","x":"00000000000000000000000000000052.0.5"}}'
)


@pytest.mark.parametrize("text", DECODED)
def test_a_json_column_reads_as_the_standard_library_reads_it(text: str) -> None:
    """Read by orjson when it reads the same; integers past 64 bits, NaN and infinities, lone
    surrogates and depths orjson refuses are read by the standard library, as they were written."""
    try:
        expected: Any = json.loads(text)
    except RecursionError:
        with pytest.raises(RecursionError):
            rows._loads(text)
        return
    found = rows._loads(text)
    assert repr(found) == repr(expected) and type(found) is type(expected)  # an int stays an int


def test_long_runs_of_digits_inside_strings_are_read_without_the_standard_librarys_decoder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Digits after a quote or a letter are in a string, which orjson reads exactly: a saver's
    checkpoint metadata (channel versions of 32 digits) is not sent to the slower decoder."""
    expected = json.loads(VERSIONS)
    monkeypatch.setattr(json, "loads", lambda text, **kwargs: pytest.fail(f"json.loads({text!r})"))
    assert rows._loads(VERSIONS) == expected
    assert rows._loads('{"id":"run_12345678901234567890123"}') == {"id": "run_12345678901234567890123"}


def test_a_run_row_is_read_without_the_standard_librarys_decoder(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run row's JSON columns (read at every cell) are parsed by orjson, not json.loads."""
    from durable_nb.model import RunKind, RunStatus

    monkeypatch.setattr(json, "loads", lambda text, **kwargs: pytest.fail(f"json.loads({text!r})"))
    row = ("r1", "nb", "notebook", "running", 1.0, 2.0, '{"x":"h1"}', None, None, None, None, None, "me", 3.0, 4, 5)
    run = rows.run_from_row((*row, '{"kernel":"k1"}'))
    assert (run.kind, run.status, run.input_manifest, run.meta) == (
        RunKind.NOTEBOOK,
        RunStatus.RUNNING,
        {"x": "h1"},
        {"kernel": "k1"},
    )
