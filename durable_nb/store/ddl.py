"""The schema both SQL backends share, written once with each dialect's type names filled in."""

from __future__ import annotations

__all__ = [
    "BLOB_PARTS_V2",
    "BLOB_SEALS_V4",
    "CHECKPOINTS_BY_TIME_V5",
    "SCHEMA_VERSION",
    "current_schema",
    "events_v8",
    "live_blobs",
    "pending_writes_v7",
    "schedules_v6",
    "schema_v1",
    "state_changes_v3",
]

# The version ``current_schema`` is at: how many steps ``migrations`` lists (a test keeps them
# equal). Every open compares a store's version with it, without importing the migrations.
SCHEMA_VERSION = 8

# Version 1, in parts a new store's schema (``current_schema``) shares: only the checkpoints and
# blobs tables changed since.
_RUNS = """
CREATE TABLE runs (
    run_id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL,
    input_manifest TEXT NOT NULL,
    error TEXT,
    error_type TEXT,
    idempotency_key TEXT,
    parent_run_id TEXT,
    parent_checkpoint_id TEXT,
    owner TEXT,
    lease_until {real},
    head_seq INTEGER NOT NULL DEFAULT 0,
    event_seq INTEGER NOT NULL DEFAULT 0,
    meta TEXT NOT NULL DEFAULT '{{}}'
);
CREATE UNIQUE INDEX runs_by_idempotency_key ON runs (name, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX runs_by_name ON runs (name, run_id);
CREATE INDEX runs_by_status ON runs (status);
CREATE INDEX runs_by_parent ON runs (parent_run_id);
"""

# The checkpoints table: its first columns, then (at version 1) manifest and completed, then the rest.
_CHECKPOINTS_HEAD = """
CREATE TABLE checkpoints (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    checkpoint_id TEXT NOT NULL UNIQUE,
    created_at {real} NOT NULL,
    step TEXT NOT NULL,
    node_id TEXT,
    status TEXT NOT NULL,"""
_CHECKPOINTS_V1_STATE = """
    manifest TEXT NOT NULL,
    completed TEXT NOT NULL,"""
_CHECKPOINTS_REST = """
    queue TEXT NOT NULL,
    skipped TEXT NOT NULL DEFAULT '[]',
    routes TEXT NOT NULL DEFAULT '{{}}',
    iteration INTEGER,
    item_index INTEGER,
    branch_key TEXT,
    parent_checkpoint_id TEXT,
    node_input TEXT,
    node_output TEXT,
    error TEXT,
    error_type TEXT,
    traceback TEXT,
    interrupt TEXT,
    decision TEXT,
    resumes TEXT NOT NULL DEFAULT '{{}}',
    counters TEXT NOT NULL DEFAULT '{{}}',
    agent_path TEXT,
    duration {real},
    attempts INTEGER,
    extra TEXT NOT NULL DEFAULT '{{}}',"""
_CHECKPOINTS_TAIL = """
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX checkpoints_by_node ON checkpoints (run_id, node_id, seq);
"""

_PENDING_AND_IDEMPOTENCY = """
CREATE TABLE pending_interrupts (
    run_id TEXT NOT NULL,
    node_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    reason TEXT NOT NULL,
    context TEXT NOT NULL,
    agent_path TEXT,
    created_at {real} NOT NULL,
    expires_at {real},
    on_timeout TEXT,
    PRIMARY KEY (run_id, node_id)
);
CREATE INDEX pending_by_expiry ON pending_interrupts (expires_at)
    WHERE expires_at IS NOT NULL;

CREATE TABLE idempotency (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    hash TEXT NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (run_id, key)
);
"""

_BLOBS_HEAD = """
CREATE TABLE blobs (
    hash TEXT PRIMARY KEY,
    codec TEXT NOT NULL,
    size {bigint} NOT NULL,
    created_at {real} NOT NULL,
    data {blob} NOT NULL"""

_EVENTS_TABLE = """
CREATE TABLE events (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    node_id TEXT,
    at {real} NOT NULL,
    data TEXT NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (run_id, seq)
)"""
_EVENTS = _EVENTS_TABLE + ";\n"

_V1 = (
    _RUNS
    + _CHECKPOINTS_HEAD
    + _CHECKPOINTS_V1_STATE
    + _CHECKPOINTS_REST
    + _CHECKPOINTS_TAIL
    + _PENDING_AND_IDEMPOTENCY
    + _BLOBS_HEAD
    + "\n);\n"
    + _EVENTS
)


def schema_v1(real: str, blob: str, bigint: str) -> str:
    """Return version 1 of the schema for a dialect (its float, binary and 64-bit integer types)."""
    return _V1.format(real=real, blob=blob, bigint=bigint)


# Version 2: a blob may be made of other blobs (a namespace group and its array buffers).
BLOB_PARTS_V2 = "ALTER TABLE blobs ADD COLUMN parts TEXT"


def live_blobs(referenced: str, parts_of: str) -> str:
    """Return the query of every live blob address: those ``referenced`` and their parts, at any depth.

    ``parts_of`` is the dialect's table function over a blob's JSON list of parts, written
    with ``b`` as the blob's alias (e.g. ``json_each(b.parts)``). A part may have parts of its
    own (a list stored in chunks whose first chunk is a map's results, stored per item).
    """
    return (
        f"WITH RECURSIVE live(hash) AS (SELECT * FROM ({referenced}) AS referenced "
        f"UNION SELECT p.value FROM live, blobs AS b, {parts_of} AS p "
        "WHERE b.hash = live.hash AND b.parts IS NOT NULL) SELECT hash FROM live"
    )


# Version 3: a checkpoint stores what it changed, and now and then the whole state (a snapshot).
# A checkpoint written before keeps its whole state as its snapshot.
_STATE_CHANGES_V3 = """
ALTER TABLE checkpoints ADD COLUMN changes TEXT NOT NULL DEFAULT '{{}}';
ALTER TABLE checkpoints ADD COLUMN completed_changes TEXT NOT NULL DEFAULT '{{}}';
ALTER TABLE checkpoints ADD COLUMN snapshot TEXT;
UPDATE checkpoints SET snapshot = {snapshot};
ALTER TABLE checkpoints DROP COLUMN manifest;
ALTER TABLE checkpoints DROP COLUMN completed
"""


def state_changes_v3(snapshot: str) -> str:
    """Return version 3 for a dialect: ``snapshot`` builds the JSON of a row's manifest and completed."""
    return _STATE_CHANGES_V3.format(snapshot=snapshot)


# Version 4: JSON values and lists are signed like pickles; those stored before, under their
# SHA-256, keep their address and get a seal under the key (the migration computes it).
BLOB_SEALS_V4 = "ALTER TABLE blobs ADD COLUMN seal TEXT"


# Version 5: the checkpoints with a duration (a node's or a cell's end) by when they were written,
# so a server's metrics read the durations since their last scrape without scanning the history.
CHECKPOINTS_BY_TIME_V5 = "CREATE INDEX checkpoints_by_time ON checkpoints (created_at) WHERE duration IS NOT NULL"


# Version 6: the service's schedules. Each due time starts one run, keyed by the schedule and the
# time; ``next_run`` moves on by compare-and-set, so servers sharing the store agree on it.
_SCHEDULES_V6 = """
CREATE TABLE schedules (
    schedule_id TEXT PRIMARY KEY,
    cron TEXT NOT NULL,
    timezone TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    input TEXT NOT NULL,
    missed TEXT NOT NULL,
    source TEXT NOT NULL,
    next_run {real} NOT NULL,
    last_run {real},
    last_run_id TEXT,
    created_at {real} NOT NULL,
    updated_at {real} NOT NULL
);
CREATE INDEX schedules_by_next_run ON schedules (next_run)
"""


def schedules_v6(real: str) -> str:
    """Return version 6 for a dialect (its float type): the schedules table."""
    return _SCHEDULES_V6.format(real=real)


# Version 7: LangGraph's pending writes, one row each under their checkpoint (its LangGraph id)
# instead of a signed JSON record each in ``idempotency``. ``mac`` signs the row's fields under
# the store's key, as a value's address signs its bytes; ``stamp`` orders a task's special
# writes (errors, interrupts, resumes), of which the latest replaces the earlier.
_PENDING_WRITES_V7 = """
CREATE TABLE pending_writes (
    run_id TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    channel TEXT NOT NULL,
    task_path TEXT NOT NULL DEFAULT '',
    value_hash TEXT NOT NULL,
    stamp {bigint} NOT NULL DEFAULT 0,
    mac TEXT NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (run_id, checkpoint_id, task_id, idx)
){options}
"""


def pending_writes_v7(real: str, bigint: str, options: str) -> str:
    """Return version 7 for a dialect: the pending_writes table (``options`` ends its CREATE TABLE)."""
    return _PENDING_WRITES_V7.format(real=real, bigint=bigint, options=options)


# Version 8: the events table keyed by its primary key only (SQLite's WITHOUT ROWID), each row
# stored once, in the key's b-tree: a rowid table stores it in the table and again in the key's
# index, two pages each commit writes (and syncs) instead of one. Events are small rows (about
# a hundred bytes) read by their key only. The checkpoints table stays a rowid table: its rows
# (300 bytes to a few kilobytes with LangGraph's metadata) would fill a key's b-tree page with a
# few rows each, split it more often, and spill past a kilobyte to overflow pages; and its three
# other indexes would repeat the key (run_id, seq) in place of a rowid. Measured, it wrote more
# pages per commit, not fewer.
def events_v8(real: str, options: str) -> str:
    """Return version 8's events table for a dialect (``options`` ends its CREATE TABLE)."""
    return _EVENTS_TABLE.format(real=real) + options


# A new store's schema: the tables and indexes as the versions above leave them, made in one go.
# Running every version's steps costs twice the CPU (SQLite rewrites the checkpoints table for each
# column version 3 drops) and 47 statements; this is 19. A test keeps the two equal: a new version
# adds its change here too, columns in the order the migrated table has them.
_CURRENT = (
    _RUNS
    + _CHECKPOINTS_HEAD
    + _CHECKPOINTS_REST
    + """
    changes TEXT NOT NULL DEFAULT '{{}}',
    completed_changes TEXT NOT NULL DEFAULT '{{}}',
    snapshot TEXT,"""
    + _CHECKPOINTS_TAIL
    + _PENDING_AND_IDEMPOTENCY
    + _BLOBS_HEAD
    + """,
    parts TEXT,
    seal TEXT
);
"""
    + _EVENTS_TABLE
    + "{options};\n"
    + CHECKPOINTS_BY_TIME_V5
    + ";\n"
)


def current_schema(real: str, blob: str, bigint: str, options: str = "") -> str:
    """Return the whole schema at the latest version for a dialect, for a new store (``options`` ends
    the CREATE TABLE of tables keyed by their primary key only)."""
    return (
        _CURRENT.format(real=real, blob=blob, bigint=bigint, options=options)
        + schedules_v6(real)
        + ";\n"
        + pending_writes_v7(real, bigint, options)
    )
