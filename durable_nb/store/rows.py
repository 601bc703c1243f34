"""Conversions between records and the column values every SQL backend stores."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import fields
from operator import attrgetter
from typing import TYPE_CHECKING, Any, overload

from ..model import (
    Blob,
    CheckpointDraft,
    CheckpointRecord,
    CheckpointState,
    CheckpointStatus,
    NewRun,
    RunKind,
    RunRecord,
    RunStatus,
)

if TYPE_CHECKING:
    # Gates, events and status rows are read on request: loaded then, not when a kernel attaches.
    from ..model import EventRecord, PendingInterrupt, StatusRows

__all__ = [
    "BYTES_WRITTEN",
    "CHECKPOINT_COLUMNS",
    "CHECKPOINT_COUNT",
    "addresses_json",
    "blob_values",
    "EVENT_COLUMNS",
    "INTERRUPT_COLUMNS",
    "RUN_COLUMNS",
    "SEEN_CONDITION",
    "UPDATE_RUN",
    "UPDATE_RUN_SAME_STATUS",
    "INSERT_WRITE",
    "insert_writes",
    "blobs_held",
    "WRITE_COLUMNS",
    "WRITE_CONFLICT",
    "write_values",
    "Written",
    "checkpoint_from_draft",
    "checkpoint_from_row",
    "checkpoint_values",
    "snapshot_from_json",
    "snapshot_json",
    "status_rows",
    "dumps",
    "event_from_row",
    "interrupt_from_row",
    "interrupt_values",
    "run_from_new",
    "run_from_row",
    "run_update",
    "run_update_values",
    "run_values",
    "seen_values",
    "tree_row",
    "FORK_TREE",
]

RUN_COLUMNS = (
    "run_id, name, kind, status, created_at, updated_at, input_manifest, error, error_type, "
    "idempotency_key, parent_run_id, parent_checkpoint_id, owner, lease_until, head_seq, "
    "event_seq, meta"
)
CHECKPOINT_COLUMNS = (
    "run_id, seq, created_at, checkpoint_id, step, node_id, status, changes, completed_changes, snapshot, "
    "queue, skipped, routes, iteration, item_index, branch_key, parent_checkpoint_id, node_input, "
    "node_output, error, error_type, traceback, interrupt, decision, resumes, counters, "
    "agent_path, duration, attempts, extra"
)
CHECKPOINT_COUNT = CHECKPOINT_COLUMNS.count(",") + 1
INTERRUPT_COLUMNS = "run_id, node_id, checkpoint_id, reason, context, created_at, agent_path, expires_at, on_timeout"
EVENT_COLUMNS = "run_id, seq, type, node_id, at, data"


# The bytes a checkpoint wrote: its values (each blob once), and the parts of its groups that
# its own commit stored (a buffer written earlier and referred to again costs nothing).
BYTES_WRITTEN = (
    "((SELECT COALESCE(SUM(b.size), 0) FROM blobs AS b WHERE b.hash IN ({outputs})) + "
    "(SELECT COALESCE(SUM(r.size), 0) FROM blobs AS r WHERE r.created_at = c.created_at AND r.hash IN ("
    "SELECT p.value FROM blobs AS g, {parts} AS p WHERE g.parts IS NOT NULL AND g.hash IN ({outputs}))))"
)

_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)

try:
    import orjson
except ImportError:  # optional: the encoder above writes the same JSON, slower
    orjson = None  # type: ignore[assignment]

# orjson writes what the encoder above writes (compact, non-ASCII kept) about ten times as fast: a
# LangGraph checkpoint's column of channel versions (kilobytes) is on every step's path. What it
# would write differently raises instead and takes the encoder: keys that are not text, integers
# past 64 bits, lone surrogates, dataclasses, datetimes and subclasses of built-in types. (UUIDs and
# enums, which the encoder refuses, it writes as their value; callers store plain data they checked.)
_FAST_OPTIONS = (
    (orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS)
    if orjson is not None
    else 0
)


def dumps(value: Any) -> str:
    """Encode a JSON column compactly."""
    # Most optional columns are empty: skip the encoder for them (it is on every commit's path).
    if not value and type(value) in (dict, list):
        return "{}" if type(value) is dict else "[]"
    if orjson is not None:
        try:
            fast = orjson.dumps(value, option=_FAST_OPTIONS)
        except TypeError:
            pass
        else:
            # orjson writes NaN and infinities as null, the encoder as NaN and Infinity: output
            # holding a null (rare in these columns) is written again by the encoder. (Searched
            # in the text: ``bytes in bytes`` first tries the bytes as an integer, an exception
            # raised and cleared on every call.)
            text = fast.decode()
            if "null" not in text:
                return text
    return _ENCODER.encode(value)


# The types of the values of a column of names to value addresses (None: a name removed).
_ADDRESS_TYPES = frozenset({str, type(None)})


def addresses_json(value: dict[str, str | None]) -> str:
    """Encode a column of names to value addresses (None for a name removed) compactly."""
    # Here orjson's null can only be a None, never a NaN: no second pass for a removed name.
    if orjson is not None and value and _ADDRESS_TYPES.issuperset(map(type, value.values())):
        try:
            return orjson.dumps(value).decode()  # type: ignore[no-any-return]
        except TypeError:
            pass  # keys that are not text, lone surrogates: the encoder below
    return dumps(value)


def blob_values(blob: Blob, created_at: float) -> tuple[Any, ...]:
    """Return a blobs row: hash, codec, size, created_at, data, parts."""
    return (blob.hash, blob.codec, blob.size, created_at, blob.data, dumps(list(blob.parts)) if blob.parts else None)


# Most of a checkpoint's JSON columns hold an empty list or dict: made directly, not parsed
# (a history of thousands of checkpoints reads each row's dozen columns).
_EMPTY: dict[str, Any] = {"{}": dict, "[]": list}


def _loads(text: str | None, default: Any = None) -> Any:
    if text is None:
        return default
    empty = _EMPTY.get(text)
    return empty() if empty is not None else decode_json(text)


def decode_json(text: str) -> Any:
    """``json.loads(text)``, read by orjson when it reads the same (one call in C, not the decoder's
    eight in Python: a run row's two columns are read at every cell). orjson makes an integer past
    64 bits a float, so text that may hold a number of 19 digits or more is the decoder's; so is
    what orjson refuses and the decoder reads (NaN and infinities, lone surrogates)."""
    if orjson is not None and text[:1] not in _NUMBER_FIRST and _long_number(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


# A number's digits in JSON text start it, or follow one of "[:,", whitespace, a sign, a point or
# an exponent's "e". A run of digits after anything else (a quote, another letter) is inside a
# string, which orjson reads exactly: LangGraph's channel versions are strings of 32 digits, in
# every checkpoint's metadata, and sent to the decoder they tripled a listing's JSON cost.
_NUMBER_FIRST = frozenset("-0123456789")
_LONG_NUMBER = r"[\[:, \t\n\r+.eE-][0-9]{19}"


def _long_number(text: str) -> re.Match[str] | None:
    """Find where a number of 19 digits or more may start; the pattern is compiled at the first
    value read (not when a kernel attaches), then searched for with no Python call around it."""
    global _long_number
    _long_number = re.compile(_LONG_NUMBER).search
    return _long_number(text)


def run_from_row(row: Sequence[Any]) -> RunRecord:
    """Build a RunRecord from a row in RUN_COLUMNS order."""
    return RunRecord(
        run_id=row[0],
        name=row[1],
        kind=RunKind(row[2]),
        status=RunStatus(row[3]),
        created_at=row[4],
        updated_at=row[5],
        input_manifest=_loads(row[6]),
        error=row[7],
        error_type=row[8],
        idempotency_key=row[9],
        parent_run_id=row[10],
        parent_checkpoint_id=row[11],
        owner=row[12],
        lease_until=row[13],
        head_seq=row[14],
        event_seq=row[15],
        meta=_loads(row[16]),
    )


def run_from_new(new: NewRun, now: float) -> RunRecord:
    """Return the run row a NewRun becomes when it is created at ``now``."""
    return RunRecord(
        run_id=new.run_id,
        name=new.name,
        kind=new.kind,
        status=new.status,
        created_at=now,
        updated_at=now,
        input_manifest=new.input_manifest,
        idempotency_key=new.idempotency_key,
        parent_run_id=new.parent_run_id,
        parent_checkpoint_id=new.parent_checkpoint_id,
        owner=new.owner,
        lease_until=new.lease_until,
        head_seq=len(new.checkpoints),
        event_seq=len(new.events),
        meta=new.meta,
    )


def run_values(run: RunRecord) -> tuple[Any, ...]:
    """Return a run's column values in RUN_COLUMNS order."""
    return (
        run.run_id,
        run.name,
        run.kind.value,
        run.status.value,
        run.created_at,
        run.updated_at,
        dumps(run.input_manifest),
        run.error,
        run.error_type,
        run.idempotency_key,
        run.parent_run_id,
        run.parent_checkpoint_id,
        run.owner,
        run.lease_until,
        run.head_seq,
        run.event_seq,
        dumps(run.meta),
    )


# A commit's UPDATE of the run row, in run_update_values order; ``{p}`` is the placeholder.
UPDATE_RUN = (
    "UPDATE runs SET status = {p}, error = {p}, error_type = {p}, owner = {p}, lease_until = {p}, "
    "head_seq = {p}, event_seq = {p}, updated_at = {p} WHERE run_id = {p}"
)
# The same UPDATE for a commit that leaves the status as it was: a status in the SET list
# rewrites the status index even to the same value (one more page per commit in SQLite, no
# heap-only update in PostgreSQL).
UPDATE_RUN_SAME_STATUS = UPDATE_RUN.replace("status = {p}, ", "", 1)

# The columns a commit rewrites, as the committer saw them: while they still hold, the run
# row it computed from them is the one it would compute from a fresh read. ``{same}`` is the
# dialect's null-safe equality.
SEEN_CONDITION = (
    "status = {p} AND error {same} {p} AND error_type {same} {p} AND owner {same} {p} "
    "AND lease_until {same} {p} AND head_seq = {p} AND event_seq = {p}"
)


# A pending write's columns after its run_id, in WriteRow order.
WRITE_COLUMNS = "checkpoint_id, task_id, idx, channel, task_path, value_hash, stamp, mac"
# What storing a pending write stored before does: one with a non-negative idx is kept, a
# special one (negative idx) replaced by the new one.
WRITE_CONFLICT = (
    "ON CONFLICT (run_id, checkpoint_id, task_id, idx) DO UPDATE SET channel = excluded.channel, "
    "task_path = excluded.task_path, value_hash = excluded.value_hash, stamp = excluded.stamp, "
    "mac = excluded.mac, created_at = excluded.created_at WHERE excluded.idx < 0"
)
# A pending write, in write_values order, stored only while its run exists.
INSERT_WRITE = (
    f"INSERT INTO pending_writes (run_id, {WRITE_COLUMNS}, created_at) "
    "SELECT {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p}, {p} WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = {p}) "
    + WRITE_CONFLICT
)


def insert_writes(count: int, placeholder: str, held: int = 0) -> str:
    """Return the INSERT of ``count`` pending writes of one run, stored only while it exists; its
    values are the run id, the time, each write's in WRITE_COLUMNS order, then the run id again.

    ``held``: the addresses of that many values follow, and the writes are stored only if the
    store holds each of them (else none is)."""
    row = f"({', '.join([placeholder] * 8)})"
    return (
        f"INSERT INTO pending_writes (run_id, {WRITE_COLUMNS}, created_at) "
        f"SELECT {placeholder}, column1, column2, column3, column4, column5, column6, column7, column8, "
        f"{placeholder} FROM (VALUES {', '.join([row] * count)}) "
        f"WHERE EXISTS (SELECT 1 FROM runs WHERE run_id = {placeholder}){blobs_held(held, placeholder)} "
        f"{WRITE_CONFLICT}"
    )


# Up to this many values a commit holds are looked up one by one (a LangGraph step holds one to
# three); more, in one IN list, which keeps the condition's depth within SQLite's limit.
_HELD_LOOKUPS = 8


def blobs_held(count: int, placeholder: str) -> str:
    """Return the condition (after AND, or nothing for none) that the store holds the values at
    ``count`` addresses, bound in that order, each distinct."""
    if count <= _HELD_LOOKUPS:
        # One lookup per address, not ``COUNT(*) … hash IN (…)``: SQLite builds a temporary
        # table for such a list on every run, which cost a step's commit more than the lookups.
        return f" AND EXISTS (SELECT 1 FROM blobs WHERE hash = {placeholder})" * count
    return f" AND (SELECT COUNT(*) FROM blobs WHERE hash IN ({', '.join([placeholder] * count)})) = {count}"


def write_values(run_id: str, write: tuple[Any, ...], now: float) -> tuple[Any, ...]:
    """Return the values for INSERT_WRITE of one pending write (a WriteRow) of a run."""
    return (run_id, *write, now, run_id)


def seen_values(run: RunRecord) -> tuple[Any, ...]:
    """Return the values for SEEN_CONDITION."""
    # A status's text as ``_value_`` (the member's own attribute) where every commit reads it:
    # ``value`` is a descriptor written in Python, a call each time.
    return (run.status._value_, run.error, run.error_type, run.owner, run.lease_until, run.head_seq, run.event_seq)


def run_update(before: RunRecord, after: RunRecord) -> tuple[bool, tuple[Any, ...]]:
    """Return whether the commit's UPDATE sets the status (UPDATE_RUN, else UPDATE_RUN_SAME_STATUS)
    and its values."""
    values = run_update_values(after)
    if after.status is before.status:
        return False, values[1:]
    return True, values


def run_update_values(run: RunRecord) -> tuple[Any, ...]:
    """Return the values of a commit's UPDATE of the run row (status … updated_at, then run_id)."""
    return (
        run.status._value_,
        run.error,
        run.error_type,
        run.owner,
        run.lease_until,
        run.head_seq,
        run.event_seq,
        run.updated_at,
        run.run_id,
    )


def checkpoint_values(run_id: str, seq: int, created_at: float, draft: CheckpointDraft) -> tuple[Any, ...]:
    """Return a draft's column values in CHECKPOINT_COLUMNS order."""
    # The columns most often empty are written without a call to dumps (every node and map item).
    changes = addresses_json(draft.changes) if draft.changes else "{}"
    output = draft.node_output
    return (
        run_id,
        seq,
        created_at,
        draft.checkpoint_id,
        draft.step,
        draft.node_id,
        draft.status._value_,
        changes,
        _completed_changes(draft) if draft.completed_added or draft.completed_removed else "{}",
        None if draft.snapshot is None else snapshot_json(draft.snapshot),
        dumps(draft.queue) if draft.queue else "[]",
        dumps(draft.skipped) if draft.skipped else "[]",
        dumps(draft.routes) if draft.routes else "{}",
        draft.iteration,
        draft.item_index,
        draft.branch_key,
        draft.parent_checkpoint_id,
        None if draft.node_input is None else dumps(draft.node_input),
        # A step's output is, as a rule, what it changed: that JSON is not made twice.
        None if output is None else changes if output == draft.changes else dumps(output),
        draft.error,
        draft.error_type,
        draft.traceback,
        None if draft.interrupt is None else dumps(draft.interrupt),
        None if draft.decision is None else dumps(draft.decision),
        dumps(draft.resumes) if draft.resumes else "{}",
        dumps(draft.counters) if draft.counters else "{}",
        draft.agent_path,
        draft.duration,
        draft.attempts,
        dumps(draft.extra),
    )


def _completed_changes(draft: CheckpointDraft) -> str:
    return dumps({"added": draft.completed_added, "removed": draft.completed_removed})


def snapshot_json(state: CheckpointState) -> str:
    """Encode the whole state stored with a checkpoint now and then."""
    return _ENCODER.encode({"manifest": state.manifest, "completed": state.completed})


def snapshot_from_json(text: str | None) -> CheckpointState | None:
    """Decode a checkpoint's stored snapshot, if it has one."""
    if text is None:
        return None
    data = json.loads(text)
    return CheckpointState(dict(data["manifest"]), list(data["completed"]))


# A draft's values in field order: a record's fields are the draft's, then its own (keyword-only).
_DRAFT_VALUES = attrgetter(*(f.name for f in fields(CheckpointDraft)))


def checkpoint_from_draft(run_id: str, seq: int, created_at: float, draft: CheckpointDraft) -> CheckpointRecord:
    """Build the record a draft becomes once written, without a JSON round trip."""
    return CheckpointRecord(*_DRAFT_VALUES(draft), run_id=run_id, seq=seq, created_at=created_at)


class Written(Sequence[CheckpointRecord]):
    """The records of a commit's drafts, numbered after ``head_seq``: built when first read.

    A node's commit returns them, and its runner never reads them (a record is thirty fields
    copied, on every node's path); a decision's caller reads the last one.
    """

    __slots__ = ("_created_at", "_drafts", "_head_seq", "_records", "_run_id")

    def __init__(self, run_id: str, head_seq: int, created_at: float, drafts: Sequence[CheckpointDraft]) -> None:
        self._run_id = run_id
        self._head_seq = head_seq
        self._created_at = created_at
        self._drafts = tuple(drafts)
        self._records: list[CheckpointRecord] | None = None

    def _built(self) -> list[CheckpointRecord]:
        if self._records is None:
            self._records = [
                checkpoint_from_draft(self._run_id, self._head_seq + offset, self._created_at, draft)
                for offset, draft in enumerate(self._drafts, start=1)
            ]
        return self._records

    @overload
    def __getitem__(self, index: int) -> CheckpointRecord: ...

    @overload
    def __getitem__(self, index: slice) -> list[CheckpointRecord]: ...

    def __getitem__(self, index: int | slice) -> CheckpointRecord | list[CheckpointRecord]:
        return self._built()[index]

    def __len__(self) -> int:
        return len(self._drafts)

    def __add__(self, other: Sequence[CheckpointRecord]) -> list[CheckpointRecord]:
        return [*self, *other]

    def __radd__(self, other: Sequence[CheckpointRecord]) -> list[CheckpointRecord]:
        return [*other, *self]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._built())


def checkpoint_from_row(row: Sequence[Any]) -> CheckpointRecord:
    """Build a CheckpointRecord from a row in CHECKPOINT_COLUMNS order."""
    return CheckpointRecord(
        run_id=row[0],
        seq=row[1],
        created_at=row[2],
        checkpoint_id=row[3],
        step=row[4],
        node_id=row[5],
        status=CheckpointStatus(row[6]),
        changes=_loads(row[7]),
        completed_added=(completed := _loads(row[8])).get("added", []),
        completed_removed=completed.get("removed", []),
        snapshot=snapshot_from_json(row[9]),
        queue=_loads(row[10]),
        skipped=_loads(row[11]),
        routes=_loads(row[12]),
        iteration=row[13],
        item_index=row[14],
        branch_key=row[15],
        parent_checkpoint_id=row[16],
        node_input=_loads(row[17]),
        node_output=_loads(row[18]),
        error=row[19],
        error_type=row[20],
        traceback=row[21],
        interrupt=_loads(row[22]),
        decision=_loads(row[23]),
        resumes=_loads(row[24], {}),
        counters=_loads(row[25], {}),
        agent_path=row[26],
        duration=row[27],
        attempts=row[28],
        extra=_loads(row[29], {}),
    )


_STATUS_STEPS = (
    "SELECT step, node_id, branch_key, iteration, item_index FROM checkpoints WHERE run_id = {p} ORDER BY seq"
)
_STATUS_QUEUE = (
    "SELECT queue FROM checkpoints WHERE run_id = {p} AND step <> 'run_end' AND node_id IS NOT NULL "
    "ORDER BY seq DESC LIMIT 1"
)
_STATUS_SKIPPED = "SELECT skipped FROM checkpoints WHERE run_id = {p} ORDER BY seq DESC LIMIT 1"


def status_rows(
    execute: Callable[[str, tuple[Any, ...]], list[Any]], placeholder: str, run_id: str, now: CheckpointState
) -> StatusRows:
    """Read what a run's status is made of: only the columns it needs, no JSON per row."""
    from ..model import StatusRows

    steps = [tuple(row) for row in execute(_STATUS_STEPS.format(p=placeholder), (run_id,))]
    queue = execute(_STATUS_QUEUE.format(p=placeholder), (run_id,))
    skipped = execute(_STATUS_SKIPPED.format(p=placeholder), (run_id,))
    return StatusRows(
        steps,  # type: ignore[arg-type]
        json.loads(queue[0][0]) if queue else [],
        json.loads(skipped[0][0]) if skipped else [],
        now.completed,
    )


def interrupt_values(pending: PendingInterrupt) -> tuple[Any, ...]:
    """Return a pending interrupt's column values in INTERRUPT_COLUMNS order."""
    return (
        pending.run_id,
        pending.node_id,
        pending.checkpoint_id,
        pending.reason,
        dumps(pending.context),
        pending.created_at,
        pending.agent_path,
        pending.expires_at,
        pending.on_timeout,
    )


def interrupt_from_row(row: Sequence[Any]) -> PendingInterrupt:
    """Build a PendingInterrupt from a row in INTERRUPT_COLUMNS order."""
    from ..model import PendingInterrupt

    return PendingInterrupt(
        run_id=row[0],
        node_id=row[1],
        checkpoint_id=row[2],
        reason=row[3],
        context=json.loads(row[4]),
        created_at=row[5],
        agent_path=row[6],
        expires_at=row[7],
        on_timeout=row[8],
    )


def event_from_row(row: Sequence[Any]) -> EventRecord:
    """Build an EventRecord from a row in EVENT_COLUMNS order."""
    from ..model import EventRecord

    return EventRecord(run_id=row[0], seq=row[1], type=row[2], node_id=row[3], at=row[4], data=json.loads(row[5]))


# The tree of forks holding a run: up to its root, then down to every descendant.
FORK_TREE = """
WITH RECURSIVE up(run_id, parent_run_id) AS (
    SELECT run_id, parent_run_id FROM runs WHERE run_id = {p}
    UNION SELECT r.run_id, r.parent_run_id FROM runs AS r JOIN up ON r.run_id = up.parent_run_id
),
down(run_id) AS (
    SELECT run_id FROM up WHERE parent_run_id IS NULL
    UNION SELECT r.run_id FROM runs AS r JOIN down ON r.parent_run_id = down.run_id
)
SELECT {columns}, p.step, p.seq, f.extra, f.node_output
FROM runs
LEFT JOIN checkpoints AS p ON p.checkpoint_id = runs.parent_checkpoint_id
LEFT JOIN checkpoints AS f ON f.run_id = runs.run_id AND f.seq = 1
WHERE runs.run_id IN (SELECT run_id FROM down)
ORDER BY runs.run_id
"""


def tree_row(row: Sequence[Any]) -> tuple[RunRecord, dict[str, Any]]:
    """Split a FORK_TREE row into the run and its fork details."""
    run = run_from_row(row[:17])
    first_extra = json.loads(row[19]) if row[19] else {}
    written = json.loads(row[20]) if row[20] else {}  # the fork's first checkpoint wrote its overrides
    overrides = {name: written[name] for name in first_extra.get("overrides", []) if name in written}
    return run, {"fork_step": row[17], "fork_seq": row[18], "overrides": overrides}
