"""LangGraph's records in durable_nb's terms and back: no I/O here.

A thread's namespace is a run (named after the thread); a LangGraph checkpoint is one of its
checkpoints, whose state maps each channel to the content address of its serialized value.
Everything else LangGraph keeps of a checkpoint (its id, time, versions, metadata, parent)
rides in the checkpoint's ``extra`` under ``"langgraph"``, as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import compress
from operator import ne
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    get_serializable_checkpoint_metadata,
)

from ..errors import InvalidInput, SerializationError
from ..model import CheckpointRecord, RunStatus
from ..store.rows import dumps
from ..views.threads import META
from ..views.threads import thread_address as address

__all__ = [
    "KEY_PREFIX",
    "META",
    "Head",
    "address",
    "checkpoint_id_of",
    "check_metadata",
    "is_lg",
    "lg",
    "metadata_json",
    "node_of",
    "our_id",
    "tuple_of",
]

# A run that holds a LangGraph thread's namespace says so in its meta under META, and has
# this prefix before the namespace as its idempotency key: one run per thread and namespace.
KEY_PREFIX = "langgraph:"


def checkpoint_id_of(config: RunnableConfig | None) -> str | None:
    """Return the checkpoint id a config names, if any."""
    value = ((config or {}).get("configurable") or {}).get("checkpoint_id")
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"checkpoint_id is the text id of a checkpoint (from saver.list()), not {value!r}.")
    return value or None


def our_id(checkpoint_id: str, run_id: str) -> str:
    """Return the store's id of a LangGraph checkpoint: unique across threads, copies included."""
    return f"{checkpoint_id}@{run_id}"


def lg(record: CheckpointRecord) -> dict[str, Any]:
    """Return what LangGraph keeps of a stored checkpoint."""
    return record.extra[META]


def is_lg(record: CheckpointRecord) -> bool:
    """Tell a LangGraph checkpoint from one durable_nb added to the thread's run (a decision)."""
    return META in record.extra


def metadata_json(config: RunnableConfig, metadata: CheckpointMetadata) -> dict[str, Any]:
    """Return a checkpoint's metadata as LangGraph stores it (checked to be JSON by ``check_metadata``
    only when its commit fails to encode it: the commit encodes it anyway, once)."""
    return get_serializable_checkpoint_metadata(config, metadata)  # type: ignore[return-value]


def check_metadata(metadata: Mapping[str, Any]) -> None:
    """Raise SerializationError naming the first metadata value that is not JSON."""
    try:
        dumps(metadata)
        return
    except (TypeError, ValueError):
        pass
    for key, value in metadata.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError) as error:
            type_name = f"{type(value).__module__}.{type(value).__qualname__}"
            raise SerializationError(
                f"Checkpoint metadata {key!r} of type {type_name} is not JSON ({error}); metadata is "
                "stored as JSON so that list(filter=…) can read it. Put plain values (text, numbers, "
                "lists, dicts) in metadata, and anything else in the graph's state.",
                name=key,
                type_name=type_name,
            ) from None


def node_of(metadata: Mapping[str, Any], seen: Mapping[str, Any], parent_seen: Mapping[str, Any]) -> tuple[str, str]:
    """Name a checkpoint in history: (kind, node). A step's checkpoint is named after the nodes
    that ran in it (those whose seen versions moved on), ``update:<node>`` after update_state,
    ``fork:<step>`` where a replay from an earlier checkpoint branched, ``input`` for the input."""
    source, step = metadata.get("source"), metadata.get("step")
    if source == "input":
        return "after", "input"
    if source == "fork":
        return "fork", f"step {step}"
    # The nodes whose seen versions differ from the parent's, compared without a Python call per
    # node: a long graph's checkpoint has seen every node that ever ran.
    ran = sorted(compress(seen, map(ne, seen.values(), map(parent_seen.get, seen))))
    if "__start__" in ran or "__interrupt__" in ran:  # seldom: a step's nodes are the graph's own
        ran = ["start" if node == "__start__" else node for node in ran if node != "__interrupt__"]
    names = "+".join(ran)
    if source == "update":
        return "update", names or f"step {step}"
    if names:
        return "after", names
    return "after", "checkpoint" if step is None else f"step {step}"


def tuple_of(
    thread_id: str,
    ns: str,
    info: dict[str, Any],
    channel_values: dict[str, Any],
    pending_writes: list[PendingWrite],
) -> CheckpointTuple:
    """Assemble the CheckpointTuple LangGraph expects from what it keeps of a stored checkpoint."""
    checkpoint: Checkpoint = {
        "v": info["v"],
        "id": info["id"],
        "ts": info["ts"],
        "channel_values": channel_values,
        "channel_versions": info["versions"],
        "versions_seen": info["seen"],
        "updated_channels": info.get("updated"),
    }
    parent = info.get("parent")
    return CheckpointTuple(
        config={"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": info["id"]}},
        checkpoint=checkpoint,
        metadata=info["metadata"],
        parent_config=(
            {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent}} if parent else None
        ),
        pending_writes=pending_writes,
    )


@dataclass(slots=True)
class Head:
    """What a saver remembers of a run's latest checkpoint, to write the next one's changes
    without reading the store: the run's head seq (checked by the commit), its LangGraph id,
    channel versions, state, the run's status, the versions each node saw, and its time."""

    seq: int
    checkpoint_id: str | None
    versions: dict[str, Any]
    manifest: dict[str, str]
    since_snapshot: int
    status: RunStatus
    seen: dict[str, Any]
    ts: str | None
