"""What the panel reads of a run: the run, its checkpoints, its fork tree, its open gates (and those its
forks wait at), its replays' progress, its version.

Every part comes from the views and the engine the notebook uses (``ahistory``, ``aforks``,
``current_run``), in the JSON shapes of the service; nothing is computed here that they do not.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ..engine.cells.replays import replay_progress
from ..engine.gates.decisions import current_run
from ..model import PendingInterrupt, RunRecord, RunStatus
from ..service.shapes import history_json, run_json
from ..store.protocol import Store
from ..views import aforks, ahistory

__all__ = ["fork_gates", "gate_json", "replays_json", "run_detail", "run_version", "tree_version", "version_of"]


def _plain(value: Any) -> Any:
    """A gate's context as JSON data (it is stored as JSON; anything else is shown as text)."""
    return json.loads(json.dumps(value, default=str))


def gate_json(gate: PendingInterrupt) -> dict[str, Any]:
    """One open gate: its node, reason, frozen context, when it opened and expires, its checkpoint."""
    return {
        "node": gate.node_id,
        "reason": gate.reason,
        "context": _plain(gate.context),
        "created_at": gate.created_at,
        "expires_at": gate.expires_at,
        "checkpoint_id": gate.checkpoint_id,
    }


def run_version(run: RunRecord) -> str:
    """Return a text that changes whenever the run does: a commit, an event, a status, an owner."""
    return f"{run.head_seq}.{run.event_seq}.{run.status.value}.{run.updated_at!r}"


def tree_version(tree: list[tuple[RunRecord, dict[str, Any]]]) -> str:
    """Return a text that changes whenever any run of a fork tree does, or a fork is made or deleted.

    The panel shows the fork tree too: a fork made by another process, or a replay committing in
    the background, changes what it shows without changing the run it is attached to.
    """
    versions = sorted(f"{run.run_id}:{run_version(run)}" for run, _ in tree)
    return hashlib.sha256("|".join(versions).encode()).hexdigest()[:32]


async def version_of(store: Store, run_id: str) -> str:
    """Return the version of the fork tree holding ``run_id`` (one query); RunNotFound for an unknown run."""
    tree = await store.fork_tree(run_id)
    if not tree:
        await store.get_run(run_id)  # raises RunNotFound, as any other read of an unknown run
    return tree_version(tree)


def _tree(frame: Any) -> list[dict[str, Any]]:
    """The fork tree's rows as nested nodes, each with its forks as ``children``."""
    nodes: dict[str, dict[str, Any]] = {}
    roots: list[dict[str, Any]] = []
    # The view lists a parent before its forks (ids sort by creation).
    for row in frame.astype(object).where(frame.notna(), None).to_dict("records"):
        node = {
            "run_id": row["run_id"],
            "name": row["name"],
            "parent_run_id": row["parent_run_id"],
            "status": row["status"],
            "fork_step": row["fork_step"],
            "fork_seq": row["fork_seq"],
            "overrides": sorted(row["overrides"] or {}),
            "created_at": row["created_at"].isoformat() if row["created_at"] is not None else None,
            "checkpoints": row["checkpoints"],
            "children": [],
        }
        nodes[node["run_id"]] = node
        parent = nodes.get(row["parent_run_id"] or "")
        (parent["children"] if parent is not None else roots).append(node)
    return roots


def _fork_of(run: RunRecord, details: dict[str, Any]) -> dict[str, Any]:
    """Which fork a gate waits in: its id, name, the names it set and, for a replay's fork, the values."""
    replay = run.meta.get("replay")
    described = replay if isinstance(replay, dict) else None
    return {
        "run_id": run.run_id,
        "name": run.name,
        "parent_run_id": run.parent_run_id,
        "overrides": sorted(details.get("overrides") or {}),
        "values": _plain(described.get("values") or {}) if described else {},
        "replay_of": described.get("of") if described else None,
    }


async def fork_gates(store: Store, tree: list[tuple[RunRecord, dict[str, Any]]], run_id: str) -> list[dict[str, Any]]:
    """Return the open gates of the other paused runs of the fork tree (a replay's forks, say), each
    with the fork it waits in."""
    found = []
    for run, details in tree:
        if run.run_id == run_id or run.status is not RunStatus.PAUSED:
            continue
        if (await current_run(store, run.run_id, run)).status is not RunStatus.PAUSED:
            continue  # a deadline passed meanwhile
        for gate in sorted(await store.pending_interrupts(run.run_id), key=lambda g: g.created_at):
            found.append({**gate_json(gate), "run": _fork_of(run, details)})
    return found


async def replays_json(store: Store, tree: list[tuple[RunRecord, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Return the replays' forks of the fork tree with how far each got (cells run of those it replays)."""
    forks = [run for run, _ in tree if isinstance(run.meta.get("replay"), dict)]
    progress = await replay_progress(store, [run.run_id for run in forks])
    return [
        {
            "run_id": run.run_id,
            "of": run.meta["replay"].get("of"),
            "at": run.meta["replay"].get("at"),
            "values": _plain(shown.values),
            "status": shown.status.value,
            "done": shown.done,
            "total": shown.total,
            "working": shown.held,
        }
        for run, shown in zip(forks, progress, strict=True)
    ]


async def run_detail(store: Store, run_id: str, key: str) -> dict[str, Any]:
    """Return a run as the panel shows it: run, checkpoints, fork tree, open gates (its own and its
    forks'), replays and version.

    The version is read first: a change made while the rest is read then gives the next poll a newer
    version, so the panel reads again, instead of keeping what it read under the new version.
    """
    version = await version_of(store, run_id)
    run = await current_run(store, run_id)
    gates = await store.pending_interrupts(run_id) if run.status is RunStatus.PAUSED else []
    history = history_json(await ahistory(run_id, store=store))
    tree = await store.fork_tree(run_id)
    return {
        "run": {**run_json(run), "store_key": key},
        "checkpoints": history,
        "forks": _tree(await aforks(run_id, store=store)),
        "gates": [gate_json(g) for g in sorted(gates, key=lambda g: g.created_at)],
        "fork_gates": await fork_gates(store, tree, run_id),
        "replays": await replays_json(store, tree),
        "version": version,
    }
