"""Replays of a notebook run: forks made just before one cell, each with other values, whose cells
from that one on run again in background kernels, from the code the run committed.

Everything here reads and writes the store only: ``plan_replay`` checks what was asked and creates
nothing; ``create_replays`` makes the forks (or finds them again: each carries an idempotency key
made of the run, the cell and the values); ``replay_cells`` tells a background kernel what to run
in a fork; ``replay_progress`` how far each fork got. A fork says in its ``meta["replay"]`` which
run and cell it replays and which cells it restores and runs, so a kernel started later (after a
crash) finds its work in the store alone.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import pickle
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidReplay
from ...model import RunKind, RunRecord, RunStatus, step_name
from ...store.protocol import Store
from ..forks.forking import values_to_check
from ..forks.literals import fits_type
from ..runs.ownership import owner_alive
from ..state.values import ValueCodec
from .cell_run import CellRun

__all__ = [
    "ReplayCell",
    "ReplayPlan",
    "ReplayProgress",
    "combinations",
    "create_replays",
    "plan_replay",
    "replay_cells",
    "replay_key",
    "replay_progress",
]

# Statuses a replay's fork no longer moves from by itself: done, or waiting for a person.
SETTLED = frozenset({RunStatus.COMPLETED, RunStatus.PAUSED, RunStatus.FAILED, RunStatus.CANCELLED})


@dataclass(frozen=True, slots=True)
class ReplayCell:
    """One committed cell a replay's kernel meets: restored (before the fork point) or run again."""

    node: str
    source: str
    runs: bool  # at or after the fork point: its code runs again in the fork
    replay: bool = False  # committed with --replay: it runs again on restore too
    options: dict[str, Any] = field(default_factory=dict)  # its other %%durable options (retries, timeout, exclude)


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """A checked replay: the run, the cell it forks before, its cells and one set of values per fork."""

    run: RunRecord
    at: str
    cells: tuple[ReplayCell, ...]
    values: tuple[dict[str, Any], ...]

    @property
    def replayed(self) -> list[str]:
        """The cells that run again in each fork, in order."""
        return [cell.node for cell in self.cells if cell.runs]

    def key(self, values: Mapping[str, Any]) -> str:
        """The idempotency key of the fork with these values."""
        return replay_key(self.run.run_id, self.at, values)


@dataclass(frozen=True, slots=True)
class ReplayProgress:
    """How far one fork of a replay got: its cells run of the total, and its status."""

    run_id: str
    done: int
    total: int
    status: RunStatus
    values: dict[str, Any]
    held: bool = False  # a live kernel works on it now
    updated_at: float = 0.0  # when its run last changed

    @property
    def settled(self) -> bool:
        """True once the fork finished, failed or waits at a gate."""
        return self.status in SETTLED


def replay_key(run_id: str, at: str, values: Mapping[str, Any]) -> str:
    """The idempotency key of a replay's fork: the same run, cell and values find the same fork."""
    identity = json.dumps([run_id, at, sorted(values.items())], sort_keys=True, default=_identity)
    return "replay-" + hashlib.sha256(identity.encode()).hexdigest()[:32]


def _identity(value: Any) -> str:
    """What tells a value JSON cannot hold from another: its pickle's digest (a repr may elide, as numpy's does)."""
    try:
        return type(value).__qualname__ + ":" + hashlib.sha256(pickle.dumps(value, protocol=5)).hexdigest()
    except Exception:  # noqa: BLE001 - a value pickle cannot take is told by its text
        return repr(value)


def combinations(set_: Mapping[str, Any] | None, sweep: Mapping[str, Sequence[Any]] | None) -> list[dict[str, Any]]:
    """Return one dict of values per fork: ``set_`` with each combination of the ``sweep`` values."""
    fixed = dict(set_ or {})
    swept = dict(sweep or {})
    for name, choices in swept.items():
        if isinstance(choices, (str, bytes)) or not isinstance(choices, Sequence):
            raise InvalidReplay(f"sweep={{{name!r}: …}} takes a list of values, e.g. {{{name!r}: [0.1, 0.01]}}.")
        if not choices:
            raise InvalidReplay(f"The sweep of {name!r} has no values: give at least one, e.g. {name}=0.1,0.01.")
    for name in [*fixed, *swept]:
        if not isinstance(name, str) or not name.isidentifier() or name.startswith("__"):
            raise InvalidReplay(f"{name!r} cannot name a notebook variable to set.")
    both = sorted(set(fixed) & set(swept))
    if both:
        raise InvalidReplay(f"{', '.join(both)} is both set and swept: give each name once.")
    names = list(swept)
    return [{**fixed, **dict(zip(names, chosen, strict=True))} for chosen in itertools.product(*swept.values())]


async def plan_replay(
    store: Store,
    values: ValueCodec,
    run_id: str,
    at: str,
    set_: Mapping[str, Any] | None = None,
    sweep: Mapping[str, Sequence[Any]] | None = None,
) -> ReplayPlan:
    """Check a replay of ``run_id`` from cell ``at`` and return its plan; nothing is created.

    InvalidReplay when the run has no committed cell, ``at`` is not one of them, a sweep is empty
    or a value's type differs from the one the name has just before ``at``.
    """
    combos = combinations(set_, sweep)
    run = await store.get_run(run_id)
    if run.kind is not RunKind.NOTEBOOK:
        raise InvalidReplay(
            f"Run {run_id} is a {run.kind.value} run; replays run a notebook's cells (fork it instead)."
        )
    cell_run = await CellRun.open(store, values, run)
    committed = list(dict.fromkeys(cell_run.completed))  # in the order committed, each once
    if not committed:
        raise InvalidReplay(f"Run {run_id} has no committed cell yet: run the notebook's cells first, then replay.")
    if at not in committed:
        raise InvalidReplay(f"No cell {at!r} was committed in run {run_id}; its cells are: {', '.join(committed)}.")
    cells = []
    runs = False
    for node in committed:
        runs = runs or node == at
        checkpoint = await cell_run.lookup(node)
        if checkpoint is None:
            raise InvalidReplay(
                f"Cell {node!r} of run {run_id} was pruned from the store: it can be neither restored nor run."
            )
        source = checkpoint.extra.get("source")
        if not isinstance(source, str):
            raise InvalidReplay(
                f"Cell {node!r} of run {run_id} was committed by a durable_nb that did not keep the code: "
                "run the notebook again (a new run) to replay it."
            )
        cells.append(_cell(node, checkpoint.extra, runs))
    await _check_types(cell_run, at, combos)
    return ReplayPlan(run, at, tuple(cells), tuple(combos))


async def _check_types(cell_run: CellRun, at: str, combos: list[dict[str, Any]]) -> None:
    """Refuse a value whose type differs from the one its name has just before ``at``."""
    names = sorted({name for combo in combos for name, value in combo.items() if value is not None})
    manifest = await cell_run.manifest_before(at)
    wanted = {name: manifest[name] for name in names if name in manifest}
    current = await values_to_check(cell_run.values, wanted, f"before cell {at!r}", refuse=InvalidReplay)
    for combo in combos:
        for name, value in combo.items():
            if name in current and not fits_type(current[name], value):
                raise InvalidReplay(
                    f"{name} is {type(current[name]).__name__} before cell {at!r}; {type(value).__name__} "
                    f"({value!r}) would not fit the rest of the run."
                )


async def create_replays(store: Store, values: ValueCodec, plan: ReplayPlan) -> list[RunRecord]:
    """Create the plan's forks, pending for the kernels that replay them; a fork made before is returned again."""
    cell_run = await CellRun.open(store, values, plan.run)
    existing = {run.idempotency_key: run for run in await store.list_runs(plan.run.name)}
    description = {
        "of": plan.run.run_id,
        "at": plan.at,
        "restored": [cell.node for cell in plan.cells if not cell.runs],
        "replayed": plan.replayed,
    }
    forks = []
    for combo in plan.values:
        key = plan.key(combo)
        found = existing.get(key)
        if found is None:
            meta = {"replay": {**description, "values": _shown(combo)}}
            forked = await cell_run.fork_before(plan.at, dict(combo), key=key, owned=False, meta=meta)
            found = forked.run
        forks.append(found)
    return forks


def _shown(combo: Mapping[str, Any]) -> dict[str, Any]:
    """The values as JSON can keep them (a repr for what it cannot), to show beside each fork."""
    shown = {}
    for name, value in combo.items():
        try:
            json.dumps(value)
            shown[name] = value
        except (TypeError, ValueError):
            shown[name] = repr(value)
    return shown


async def replay_cells(store: Store, values: ValueCodec, fork: RunRecord) -> list[ReplayCell]:
    """Return the cells a replay's kernel meets in ``fork``, with the code the replayed run committed."""
    described = fork.meta.get("replay")
    if not isinstance(described, dict):
        raise InvalidReplay(f"Run {fork.run_id} is not a replay's fork.")
    replayed_run = await CellRun.open(store, values, await store.get_run(described["of"]))
    cells = []
    for node, runs in [(n, False) for n in described["restored"]] + [(n, True) for n in described["replayed"]]:
        checkpoint = await replayed_run.lookup(node)
        if checkpoint is None or not isinstance(checkpoint.extra.get("source"), str):
            raise InvalidReplay(f"Cell {node!r} of run {described['of']} is no longer in the store (pruned).")
        cells.append(_cell(node, checkpoint.extra, runs))
    return cells


def _cell(node: str, extra: Mapping[str, Any], runs: bool) -> ReplayCell:
    """A committed cell as a replay meets it: its code and the options it was committed with."""
    options = extra.get("options")
    return ReplayCell(
        node, extra["source"], runs, bool(extra.get("replay")), dict(options) if isinstance(options, dict) else {}
    )


async def replay_progress(store: Store, run_ids: Sequence[str]) -> list[ReplayProgress]:
    """Return how far each fork of a replay got: the cells it committed of those it replays."""
    found = []
    for run_id in run_ids:
        run = await store.get_run(run_id)
        described = run.meta.get("replay") or {}
        replayed = list(described.get("replayed") or [])
        steps = {step_name("after", node) for node in replayed}
        done = {c.step for c in await store.list_checkpoints(run_id) if c.step in steps}
        held = run.status is RunStatus.RUNNING and owner_alive(run.run_id, run.owner, run.lease_until)
        shown = dict(described.get("values") or {})
        found.append(ReplayProgress(run_id, len(done), len(replayed), run.status, shown, held, run.updated_at))
    return found
