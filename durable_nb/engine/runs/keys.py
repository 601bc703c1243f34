"""Idempotency keys: one key stands for one request, so a repeat must carry the same input.

A repeated key returns the run it first started, as payment APIs do; a key sent again with
other input is refused (``IdempotencyKeyReused``), since answering it with the first run would
silently drop the new input. Every front end (``Workflow.run``/``start``, the service, MCP)
creates runs through ``Workflow`` and so answers alike.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import IdempotencyKeyReused
from ...model import RunRecord
from ...store import codec
from ..state.values import ValueCodec

__all__ = ["refuse_other_input"]


async def refuse_other_input(
    first: RunRecord, manifest: Mapping[str, str], state: Mapping[str, Any], values: ValueCodec, key: str
) -> None:
    """Raise IdempotencyKeyReused unless ``state`` (encoded as ``manifest``) is the input ``first`` started with."""
    if dict(first.input_manifest) == dict(manifest):
        return
    # Equal values can differ in bytes (dict order, a pickle's memo): compare the values themselves.
    stored = await values.load(first.input_manifest)
    if stored.keys() == state.keys() and all(_same(stored[name], state[name]) for name in state):
        return
    raise IdempotencyKeyReused(
        f"The idempotency key {key!r} already started run {first.run_id} of {first.name!r} with other input. "
        "A key stands for one request: send the same input to get that run back, or use a new key for new input."
    )


def _same(first: Any, second: Any) -> bool:
    try:
        if codec.is_plain(first) and codec.is_plain(second):
            # As JSON with sorted keys: 1, 1.0 and true stay three values, where == calls them equal.
            return _canonical(first) == _canonical(second)
        return type(first) is type(second) and bool(first == second)
    except Exception:  # noqa: BLE001 - values with no plain answer (arrays, frames, huge ints) are not known equal
        return False


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
