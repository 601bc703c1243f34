"""The cells of several runs of one notebook, side by side: status, values, outputs, duration.

``compare_cells([run, *forks])`` gives one row per cell and per run. Cells are matched by
name across runs. A fork's cells before its fork point are its parent's (status
``inherited``), with the values the fork set in place of theirs; a cell a run has not reached
reads ``pending`` while the run can go on, else ``missing``. Values are compared by their
stored addresses (content hashes), never by unpickling them: plain JSON values that differ
only in their bytes are decoded (that runs no code) and compared equal when they are.
Variables sharing objects are stored as one group under one address, so they differ together.
Outputs are compared by a digest that leaves out what changes from run to run when nothing
else does (how a stream was cut into messages, object addresses in reprs, display ids).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._loop import blocking
from ..errors import DurableError, InvalidInput, RunNotFound
from ..model import CheckpointRecord, RunRecord, RunStatus
from ..store import codec
from ..store.protocol import Store
from ..store.rules import check_run_id
from ..store.secret import load_secret

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["CELL_STATUSES", "acompare_cells", "compare_cells", "output_digest"]

# What a cell of a run can be: its own checkpoint's status, its parent's (before a fork point),
# or none yet.
INHERITED = "inherited"
PENDING = "pending"
MISSING = "missing"
CELL_STATUSES = ["ok", "failed", "interrupted", "approved", INHERITED, PENDING, MISSING]
# Checkpoints that record a cell's outcome (fork points and run ends record none).
_CELL_STEPS = ("after:", "failed:", "gate:", "approved:")
_GOES_ON = {RunStatus.PENDING, RunStatus.RUNNING, RunStatus.PAUSED}
# Keys of an output's metadata that name a display rather than describe it.
_VOLATILE_METADATA = {"transient", "execution_count", "display_id"}
_ADDRESS = re.compile(r"\bat 0x[0-9a-fA-F]+")
_IMAGES = ("image/png", "image/jpeg", "image/gif")


@dataclass(slots=True)
class _Cell:
    """One cell as one run holds it."""

    status: str
    checkpoint: CheckpointRecord | None = None
    inherited_from: str | None = None
    values: dict[str, str | None] = field(default_factory=dict)  # name -> address (None: deleted)
    overridden: list[str] = field(default_factory=list)


def output_digest(outputs: Any) -> str | None:
    """Return a stable hash of a cell's recorded outputs, or None when it recorded none.

    Stream text is joined per stream (a kernel cuts it into messages as it likes), object
    addresses in reprs (``at 0x7f…``) and display ids are left out, image data is taken without
    line breaks; the rest (text, mime bundles, their metadata) counts.
    """
    if not isinstance(outputs, list):
        return None
    canonical = json.dumps(_normalised(outputs), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _normalised(outputs: list[Any]) -> list[Any]:
    shown: list[Any] = []
    for output in outputs:
        if not isinstance(output, Mapping):
            shown.append(_text(output))
            continue
        kind = output.get("type")
        if kind == "stream":
            name, text = output.get("name"), _text(output.get("text", ""))
            last = shown[-1] if shown else None
            if isinstance(last, dict) and last.get("type") == "stream" and last["name"] == name:
                last["text"] += text
            else:
                shown.append({"type": "stream", "name": name, "text": text})
            continue
        data = output.get("data") if isinstance(output.get("data"), Mapping) else {}
        metadata = output.get("metadata") if isinstance(output.get("metadata"), Mapping) else {}
        shown.append(
            {
                "type": kind,
                "data": {str(mime): _mime_value(str(mime), value) for mime, value in data.items()},
                "metadata": {str(k): v for k, v in metadata.items() if k not in _VOLATILE_METADATA},
            }
        )
    return [s for s in shown if not (isinstance(s, dict) and s.get("type") == "stream" and not s["text"])]


def _text(value: Any) -> str:
    text = "".join(map(str, value)) if isinstance(value, list) else str(value)
    return _ADDRESS.sub("at 0x…", text)


def _mime_value(mime: str, value: Any) -> Any:
    if mime in _IMAGES:
        return re.sub(r"\s+", "", "".join(value) if isinstance(value, list) else str(value))
    if isinstance(value, str | list) and (mime.startswith("text/") or mime == "image/svg+xml"):
        return _text(value)
    return value


# -- reading the runs -----------------------------------------------------------------------------


def _given_id(run: Any) -> str:
    # A Run handle (.id), a run record or a kernel's run (.run_id), or the id itself.
    run_id = getattr(run, "id", None) or getattr(run, "run_id", None) or run
    check_run_id(run_id)
    return str(run_id)


class _Reader:
    """Reads each run and each run's checkpoints once, however many of the compared runs share them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.runs: dict[str, RunRecord] = {}
        self.checkpoints: dict[str, list[CheckpointRecord]] = {}

    async def run(self, run_id: str) -> RunRecord:
        if run_id not in self.runs:
            self.runs[run_id] = await self.store.get_run(run_id)
        return self.runs[run_id]

    async def checkpoints_of(self, run_id: str) -> list[CheckpointRecord]:
        if run_id not in self.checkpoints:
            self.checkpoints[run_id] = await self.store.list_checkpoints(run_id)
        return self.checkpoints[run_id]

    async def lineage(self, run_id: str) -> list[tuple[RunRecord, int | None]]:
        """Return the run and the runs it was forked from, each with the last seq it lends (None: all)."""
        chain: list[tuple[RunRecord, int | None]] = []
        record, upto = await self.run(run_id), None
        seen: set[str] = set()
        while True:
            chain.append((record, upto))
            seen.add(record.run_id)
            parent_id, point_id = record.parent_run_id, record.parent_checkpoint_id
            if parent_id is None or point_id is None or parent_id in seen:
                return chain
            try:
                parent = await self.run(parent_id)
            except RunNotFound:
                return chain  # the parent was deleted: the fork's own cells are all it has
            points = [c.seq for c in await self.checkpoints_of(parent_id) if c.checkpoint_id == point_id]
            if not points:
                return chain  # its fork point was pruned
            record, upto = parent, points[0]

    async def cells(self, run_id: str) -> tuple[dict[str, _Cell], list[str]]:
        """Return a run's cells by name (its own, and those it inherits) and their order."""
        chain = await self.lineage(run_id)
        cells: dict[str, _Cell] = {}
        order: list[str] = []
        # The values each fork set replace those of the cells before its fork point; a nearer fork wins.
        overrides_below: list[dict[str, str]] = []
        applied: dict[str, str] = {}
        for record, _ in chain:
            overrides_below.append(dict(applied))
            applied = {**_fork_overrides(await self.checkpoints_of(record.run_id)), **applied}
        for level in range(len(chain) - 1, -1, -1):
            record, upto = chain[level]
            for checkpoint in await self.checkpoints_of(record.run_id):
                if upto is not None and checkpoint.seq > upto:
                    break
                node = checkpoint.node_id
                if node is None or checkpoint.agent_path or not checkpoint.step.startswith(_CELL_STEPS):
                    continue
                if node not in cells:
                    order.append(node)
                cells[node] = _cell(checkpoint, None if level == 0 else record.run_id, overrides_below[level])
        return cells, order


def _fork_overrides(checkpoints: list[CheckpointRecord]) -> dict[str, str]:
    """The values a fork set where it starts (its ``fork:`` checkpoint), name to address."""
    for checkpoint in checkpoints:
        if checkpoint.step.startswith("fork:"):
            names = checkpoint.extra.get("overrides") or list(checkpoint.changes)
            return {n: a for n, a in checkpoint.changes.items() if n in names and a is not None}
    return {}


def _cell(checkpoint: CheckpointRecord, inherited_from: str | None, overrides: dict[str, str]) -> _Cell:
    values = dict(checkpoint.changes)
    overridden = sorted(n for n in values if n in overrides and overrides[n] != values[n])
    values.update((n, overrides[n]) for n in overridden)
    status = checkpoint.status.value
    if inherited_from is not None and status == "ok":
        status = INHERITED
    return _Cell(status, checkpoint, inherited_from, values, overridden)


async def _resolve_runs(runs: Any, reader: _Reader) -> list[str]:
    """Return the ids to compare: those given, or for one run, it and the forks made from it."""
    if runs is None or isinstance(runs, int | float | bytes | Mapping):
        raise InvalidInput(
            f"compare_cells takes a list of runs (ids or the objects durable_nb returns), not {runs!r}: "
            "e.g. dnb.compare_cells([run, *forks])."
        )
    if isinstance(runs, str) or not isinstance(runs, Iterable):
        first = _given_id(runs)
        await reader.run(first)
        tree = await reader.store.fork_tree(first)
        below = {first}
        for record, _ in tree:
            reader.runs.setdefault(record.run_id, record)  # ids sort by creation: a parent comes before its forks
            if record.parent_run_id in below:
                below.add(record.run_id)
        return [first, *(r.run_id for r, _ in tree if r.run_id in below and r.run_id != first)]
    ids = [_given_id(r) for r in runs]
    if not ids:
        raise InvalidInput("compare_cells needs at least one run: dnb.compare_cells([run, *forks]).")
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise InvalidInput(f"Run {twice[0]!r} is given more than once; give each run once.")
    for run_id in ids:
        await reader.run(run_id)
    return ids


async def _check_one_notebook(ids: list[str], reader: _Reader) -> None:
    """Refuse runs that are not runs of one notebook (or one workflow): their cells would not match."""
    first = reader.runs[ids[0]]
    root = (await reader.lineage(ids[0]))[-1][0].run_id
    for run_id in ids[1:]:
        record = reader.runs[run_id]
        if record.kind is not first.kind:
            raise InvalidInput(
                f"Run {run_id} is a {record.kind.value} run and {first.run_id} a {first.kind.value} run: "
                "compare the cells of runs of one notebook (a run and its forks or replays)."
            )
        if record.name != first.name and (await reader.lineage(run_id))[-1][0].run_id != root:
            raise InvalidInput(
                f"Run {run_id} ({record.name!r}) is not a run of {first.name!r} nor in the fork tree of "
                f"{first.run_id}: compare the cells of runs of one notebook (a run and its forks or replays)."
            )


async def acompare_cells(runs: Any, *, store: Any = None) -> pd.DataFrame:
    """Return one row per cell and per run: status, values set and those differing from the first run's,
    an output digest, duration.

    In a notebook the result shows the cells' outputs side by side, the cells that differ marked.

    Args:
        runs: A list of runs (ids, or the objects durable_nb returns), the first being the one the
            others are compared with; a single run stands for it and every fork made from it.
        store: The store's URL or a Store (default: ``$DURABLE_NB_STORE``, else ``.durable_nb/runs.db``).

    Returns:
        A DataFrame with columns ``cell``, ``position``, ``run_id``, ``status`` (committed, failed,
        paused, inherited from the parent run, not run), ``inherited_from``, ``changed`` (the
        names the cell set), ``overridden`` (the names a fork set), ``differing`` and
        ``values_differ`` (against the first run's cell), ``output_digest``, ``outputs_differ``,
        ``duration``, ``checkpoint_id`` and ``outputs``.

    Raises:
        InvalidInput: No run, a run given twice, or runs of different notebooks.
        RunNotFound: No run has an id given.

    The what-if tutorial of the documentation runs it on a notebook, forks and all.
    """
    from ..store import resolve_store

    resolved = resolve_store(store, existing=True)
    reader = _Reader(resolved)
    ids = await _resolve_runs(runs, reader)
    await _check_one_notebook(ids, reader)
    per_run: dict[str, dict[str, _Cell]] = {}
    order: list[str] = []
    for run_id in ids:
        cells, seen = await reader.cells(run_id)
        per_run[run_id] = cells
        order.extend(n for n in seen if n not in order)
    outputs = await _outputs(resolved, [c.checkpoint for cells in per_run.values() for c in cells.values()])
    plain = await _plain_values(resolved, per_run)
    rows: list[_Row] = []
    for position, node in enumerate(order):
        base = _row(position, node, ids[0], per_run, reader, outputs)
        for run_id in ids:
            row = base if run_id == ids[0] else _row(position, node, run_id, per_run, reader, outputs)
            rows.append(_compared(row, base, plain))
    return _frame(rows, [reader.runs[i] for i in ids])


@dataclass(slots=True)
class _Row:
    """One cell of one run, as the frame shows it."""

    position: int
    node: str
    run_id: str
    cell: _Cell
    outputs: Any
    digest: str | None
    differing: list[str] = field(default_factory=list)
    values_differ: bool | None = None
    outputs_differ: bool | None = None


def _row(
    position: int,
    node: str,
    run_id: str,
    per_run: dict[str, dict[str, _Cell]],
    reader: _Reader,
    outputs: dict[str, Any],
) -> _Row:
    cell = per_run[run_id].get(node) or _Cell(PENDING if reader.runs[run_id].status in _GOES_ON else MISSING)
    shown = outputs.get(cell.checkpoint.extra.get("outputs")) if cell.checkpoint is not None else None
    return _Row(position, node, run_id, cell, shown, output_digest(shown))


def _compared(row: _Row, base: _Row, plain: Mapping[str, Any]) -> _Row:
    """Fill in what differs from the first run's cell (nothing to say when either has none)."""
    if row.cell.checkpoint is None or base.cell.checkpoint is None:
        return row
    ours, theirs = row.cell.values, base.cell.values
    row.differing = sorted(
        n for n in set(ours) | set(theirs) if not n.startswith("__") and not _same(ours.get(n), theirs.get(n), plain)
    )
    row.values_differ = bool(row.differing)
    row.outputs_differ = row.digest != base.digest
    return row


async def _outputs(store: Store, checkpoints: list[CheckpointRecord | None]) -> dict[str, Any]:
    """Return the recorded outputs of these checkpoints by address, read in one round trip."""
    from ..engine.state.values import ValueCodec

    wanted = {c.extra["outputs"] for c in checkpoints if c is not None and isinstance(c.extra.get("outputs"), str)}
    if not wanted:
        return {}
    values = ValueCodec(store, load_secret())
    _, blobs = await values.load_with({}, wanted)
    # Outputs are plain JSON unless text could not be (then pickled and signed): decode checks the signature.
    return {address: values.decode(blob) for address, blob in blobs.items()}


async def _plain_values(store: Store, per_run: dict[str, dict[str, _Cell]]) -> dict[str, Any]:
    """Decode the plain JSON values (no code runs) among the cells' values, to compare them by value."""
    addresses = {a for cells in per_run.values() for c in cells.values() for a in c.values.values() if a}
    json_ones = {a for a in addresses if codec.is_json(a)}
    if len(json_ones) < 2:
        return {}
    secret = load_secret()
    found = await store.get_blobs(json_ones, secret)
    decoded: dict[str, Any] = {}
    for address, blob in found.items():
        try:
            decoded[address] = codec.decode(blob, secret)
        except DurableError:  # a value that does not load compares by its address
            continue
    return decoded


def _same(a: str | None, b: str | None, plain: Mapping[str, Any]) -> bool:
    if a == b:
        return True
    if a in plain and b in plain:
        x, y = plain[a], plain[b]
        return type(x) is type(y) and x == y
    return False


def _frame(rows: list[_Row], records: list[RunRecord]) -> pd.DataFrame:
    import pandas as pd

    from .cell_view import CellComparison

    cells = [r.cell for r in rows]
    seconds = [c.checkpoint.duration if c.checkpoint is not None else None for c in cells]
    frame = CellComparison(
        {
            "cell": pd.Series([r.node for r in rows], dtype="string"),
            "position": pd.Series([r.position for r in rows], dtype="int64"),
            "run_id": pd.Series([r.run_id for r in rows], dtype="string"),
            "status": pd.Categorical([c.status for c in cells], categories=CELL_STATUSES),
            "inherited_from": pd.Series([c.inherited_from for c in cells], dtype="string"),
            "changed": pd.Series([sorted(n for n in c.values if not n.startswith("__")) for c in cells], dtype=object),
            "overridden": pd.Series([list(c.overridden) for c in cells], dtype="object"),
            "differing": pd.Series([r.differing for r in rows], dtype="object"),
            "values_differ": pd.Series([r.values_differ for r in rows], dtype="boolean"),
            "output_digest": pd.Series([r.digest for r in rows], dtype="string"),
            "outputs_differ": pd.Series([r.outputs_differ for r in rows], dtype="boolean"),
            "duration": pd.to_timedelta(pd.Series(seconds, dtype="float64"), unit="s").astype("timedelta64[ns]"),
            "checkpoint_id": pd.Series(
                [c.checkpoint.checkpoint_id if c.checkpoint is not None else None for c in cells], dtype="string"
            ),
            "outputs": pd.Series([r.outputs for r in rows], dtype="object"),
        }
    )
    # What the side-by-side view shows above each run's column: its status and where it was forked from.
    frame.attrs["runs"] = [
        {"run_id": r.run_id, "name": r.name, "status": r.status.value, "parent_run_id": r.parent_run_id}
        for r in records
    ]
    return frame


compare_cells = blocking(acompare_cells)
