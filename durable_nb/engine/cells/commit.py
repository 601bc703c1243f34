"""What a finished cell's checkpoint holds besides its variables: outputs, settings and shown value,
encoded here, in one place, with the store's codec and the run's signing key."""

from __future__ import annotations

from typing import Any

from ...errors import SerializationError
from ...model import Blob
from ...store import codec
from .namespace import StorePlan
from .records import CellOutcome

__all__ = ["cell_extra"]

# A cell's shown value is stored with it (for ``_`` and ``Out[n]`` after a restore) up to this size.
_RESULT_BYTES = 1 << 20


def cell_extra(
    outcome: CellOutcome, plan: StorePlan, unstored: dict[str, str], secret: bytes
) -> tuple[dict[str, Any], list[Blob]]:
    """Return the ``after:<node>`` checkpoint's extra fields and the blobs they refer to."""
    extra = dict(outcome.extra)
    if outcome.outputs:
        outputs = codec.encode(outcome.outputs, secret, f"outputs of {outcome.node_id}")
    else:
        outputs = _no_outputs(secret)
    blobs = [outputs]
    if outcome.settings:
        try:
            settings = codec.encode(outcome.settings, secret, "settings")
        except SerializationError as error:
            if not extra.get("replay"):
                extra["effects"] = [*extra.get("effects", []), f"settings that cannot be stored ({error})"]
        else:
            blobs.append(settings)
            extra["settings"] = settings.hash
    result = _result_blob(outcome.result, secret)
    if result is not None:
        blobs.append(result)
        extra["result"] = result.hash
    remade = _recipes(outcome, plan.unstored)
    extra.update(
        source_hash=outcome.source_hash,
        outputs=outputs.hash,
        blobs=[b.hash for b in blobs] + [b.hash for b in outcome.blobs],
        unstored=unstored,
        deleted=sorted(outcome.deleted),
    )
    if unstored:
        extra["reasons"] = {n: plan.reasons[n] for n in unstored if n in plan.reasons}
    if remade:
        extra["remade"] = remade
    return extra, [*blobs, *outcome.blobs]


# The blob of a cell that showed nothing, per signing key: the same for most cells, where encoding
# and signing it anew took some 40,000 instructions.
_NO_OUTPUTS: dict[bytes, Blob] = {}


def _no_outputs(secret: bytes) -> Blob:
    blob = _NO_OUTPUTS.get(secret)
    if blob is None:
        if len(_NO_OUTPUTS) >= 16:  # a process signs with a key or two; tests with many
            _NO_OUTPUTS.clear()
        blob = _NO_OUTPUTS[secret] = codec.encode([], secret, "outputs")
    return blob


def _result_blob(value: Any, secret: bytes) -> Blob | None:
    if value is None:
        return None
    try:
        blob = codec.encode(value, secret, "the cell's value")
    except SerializationError:
        return None  # the value shows as text in the replayed outputs all the same
    return blob if blob.size <= _RESULT_BYTES else None


def _recipes(outcome: CellOutcome, unstored: dict[str, str]) -> dict[str, Any]:
    """How the front end makes again the values that cannot be stored, for those it can."""
    if outcome.recipe is None:
        return {}
    found = {name: outcome.recipe(name) for name in unstored}
    return {name: recipe for name, recipe in found.items() if recipe is not None}
