"""Forks: a new run branched from any checkpoint of another, sharing its history."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..._ids import new_id
from ...errors import DurableError, InvalidInput, NotResumable
from ...model import (
    Blob,
    CheckpointDraft,
    CheckpointRecord,
    CheckpointStatus,
    EventType,
    NewEvent,
    NewRun,
    RunRecord,
    RunStatus,
    step_name,
)
from ...store.protocol import Store
from ...store.rows import checkpoint_from_draft
from ..state.drafts import draft_after
from ..state.values import ValueCodec, check_state
from .literals import OverrideText

__all__ = ["Fork", "create_fork"]

# Meta keys that describe one run only: a fork of it does not copy them.
_OWN_META = frozenset({"replay"})


@dataclass(slots=True)
class Fork:
    """A created fork: its run and its first checkpoint."""

    run: RunRecord
    checkpoint: CheckpointRecord


async def create_fork(
    store: Store,
    values: ValueCodec,
    run_id: str,
    checkpoint_id: str | None = None,
    overrides: Any = None,
    *,
    carried: Mapping[str, Any] | None = None,
    owner: str | None = None,
    lease_until: float | None = None,
    idempotency_key: str | None = None,
    first_events: list[NewEvent] | None = None,
    then: Callable[[CheckpointRecord, CheckpointDraft], tuple[list[CheckpointDraft], list[Blob]]] | None = None,
    at_start: bool = False,
    meta: Mapping[str, Any] | None = None,
) -> Fork:
    """Create a run branched from a checkpoint of ``run_id``; the original is untouched.

    ``then(source, fork_draft)`` may add checkpoints after the fork's own (and their values), written
    in the same transaction: an agent's edited turn, say. ``at_start`` branches before the run's
    first checkpoint: the fork starts from the run's input (and the overrides).

    ``overrides`` are Python values (name to value), or an ``OverrideText`` a person typed: then each
    value must keep the type it has at the fork point, read here once; InvalidInput, and no fork,
    otherwise. ``carried`` are values the fork inherits from other forks; the overrides win over them.
    ``meta`` is added to what the fork copies of its parent's (a replay's description, say).
    """
    source_run = await store.get_run(run_id)
    source: CheckpointRecord | None = None
    if at_start:
        if then is not None:
            raise InvalidInput("A fork from the start of a run has no checkpoint to continue after.")
    elif checkpoint_id is None:
        source = await store.resume_point(run_id)
        if source is None:
            raise NotResumable(
                f"Run {run_id} has no checkpoint to fork from yet; let it commit a node first, or start a new run."
            )
    else:
        source = await store.get_checkpoint(run_id, checkpoint_id)
    if isinstance(overrides, OverrideText):
        overrides = overrides.typed(await _values_at(store, values, source_run, source, overrides.names))
    changes = check_state({**carried, **(overrides or {})} if carried else overrides, "Fork state overrides")
    delta, blobs = values.encode(changes)
    new_run_id = new_id()
    draft = _fork_checkpoint(source, run_id, delta)
    following, more_blobs = then(source, draft) if then is not None and source is not None else ([], [])
    blobs = [*blobs, *more_blobs]
    record, _ = await store.create_run(
        NewRun(
            run_id=new_run_id,
            name=source_run.name,
            kind=source_run.kind,
            status=RunStatus.RUNNING if owner else RunStatus.PENDING,
            input_manifest=source_run.input_manifest,
            blobs=blobs,
            idempotency_key=idempotency_key,
            parent_run_id=run_id,
            parent_checkpoint_id=source.checkpoint_id if source is not None else None,
            owner=owner,
            lease_until=lease_until,
            # What says how a run was made (a replay's description) is the run's own, not its forks'.
            meta={**{k: v for k, v in source_run.meta.items() if k not in _OWN_META}, **(meta or {})},
            checkpoints=[draft, *following],
            events=[
                NewEvent(
                    EventType.FORK_CREATED,
                    draft.node_id,
                    {
                        "parent_run_id": run_id,
                        "parent_checkpoint_id": draft.parent_checkpoint_id,
                        "overrides": sorted(changes),
                    },
                )
            ]
            + (first_events or []),
        )
    )
    values.mark_stored(blobs)
    # The fork's head is the last draft as written, stamped when the run was.
    head = following[-1] if following else draft
    return Fork(record, checkpoint_from_draft(new_run_id, record.head_seq, record.created_at, head))


def _fork_checkpoint(source: CheckpointRecord | None, run_id: str, delta: dict[str, str]) -> CheckpointDraft:
    """The fork's first checkpoint: the overrides over its parent's state at ``source`` (None: the run's input)."""
    forked_from = {"run_id": run_id, "step": source.step if source else None, "seq": source.seq if source else None}
    extra = {"overrides": sorted(delta), "forked_from": forked_from}
    if source is None:
        return CheckpointDraft(
            checkpoint_id=new_id(),
            step=step_name("fork", "start"),
            node_id=None,
            status=CheckpointStatus.FORK,
            changes=dict(delta),
            node_output=delta,
            extra=extra,
        )
    # The fork's state is its parent's at the fork point (read through it, never copied) and this.
    return draft_after(
        source,
        "fork",
        source.node_id,
        CheckpointStatus.FORK,
        label=source.node_id or "run_end",
        changes=dict(delta),
        agent_path=source.agent_path,
        node_output=delta,
        extra=extra,
    )


async def _values_at(
    store: Store, values: ValueCodec, run: RunRecord, point: CheckpointRecord | None, names: list[str]
) -> dict[str, Any]:
    """Load ``names`` as they are at the checkpoint a fork branches from (None: the run's input)."""
    if not names:
        return {}  # nothing typed to check: no state to read
    manifest = (await store.state_at(run.run_id, point.seq)).manifest if point is not None else run.input_manifest
    wanted = {name: manifest[name] for name in names if name in manifest}
    return await values_to_check(values, wanted, "at the fork point", " Fork from code that can load them.")


async def values_to_check(
    values: ValueCodec, wanted: Mapping[str, str], where: str, fix: str = "", refuse: type[InvalidInput] = InvalidInput
) -> dict[str, Any]:
    """Load the stored values (name to address) that new values' types are checked against; ``refuse``
    (saying ``where`` they are and ``fix``) when they do not load in this process."""
    if not wanted:
        return {}
    try:
        return await values.load(wanted)
    except DurableError:
        raise
    except Exception as error:  # e.g. a pickled class whose module this process lacks
        raise refuse(
            f"Cannot check the types of {', '.join(sorted(wanted))} {where}: their stored values do not load "
            f"here ({type(error).__name__}: {error}).{fix}"
        ) from error
