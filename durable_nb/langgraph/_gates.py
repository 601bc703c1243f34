"""LangGraph interrupts as durable_nb gates, and decisions as LangGraph resumes: no I/O here.

A task that stops at ``interrupt()`` opens a gate of its thread's run, named after the task's
node, at the checkpoint the task belongs to. Whoever resumes it claims that gate in the same
transaction as the resume write, so exactly one resume of an interrupt is ever stored. A
decision recorded by durable_nb's own front ends (the gate panel, ``durable_nb.approve``, the
command line) reaches the task as LangGraph's resume value: the decision as a dict.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any

from langgraph.checkpoint.serde.types import INTERRUPT, RESUME

from ..model import CheckpointRecord, PendingInterrupt
from ..store import codec

__all__ = ["gate_node", "gate_of", "with_decisions"]

_PULL = "__pregel_pull"
_REASON_KEYS = ("question", "reason", "message", "title", "prompt")
_MAX_REASON = 200


def gate_node(task_path: str, task_id: str) -> str:
    """Name the gate of a task: its node (a task LangGraph pulled), else the task itself."""
    parts = [part.strip() for part in task_path.lstrip("~").split(",")] if task_path else []
    if len(parts) == 2 and parts[0] == _PULL and parts[1]:
        return parts[1]
    return f"task:{task_id}"


def _reason(value: Any) -> str:
    if isinstance(value, str) and value.strip():
        text = value.strip().splitlines()[0]
    elif isinstance(value, dict):
        text = next((value[k] for k in _REASON_KEYS if isinstance(value.get(k), str) and value[k].strip()), "")
    else:
        text = ""
    text = text or "interrupt()"
    return text if len(text) <= _MAX_REASON else text[: _MAX_REASON - 1] + "…"


def gate_of(run_id: str, checkpoint_id: str, node: str, interrupts: Any) -> PendingInterrupt:
    """Return the gate a task's interrupts open: reason and context from interrupt()'s value."""
    found = list(interrupts) if isinstance(interrupts, Sequence) and not isinstance(interrupts, str) else [interrupts]
    values = [getattr(item, "value", item) for item in found]
    value = values[0] if len(values) == 1 else values
    # The context is frozen as JSON: what JSON cannot hold exactly is shown as text.
    context = value if codec.is_plain(value) else repr(value)
    return PendingInterrupt(run_id, node, checkpoint_id, _reason(value), context, time.time())


def with_decisions(
    writes: list[tuple[str, str, Any]],
    paths: dict[str, str],
    stamps: dict[str, int],
    decisions: Iterable[CheckpointRecord],
) -> list[tuple[str, str, Any]]:
    """Add the decisions recorded at a checkpoint's gates to its pending writes, as LangGraph's
    resume writes of the interrupted tasks.

    ``writes`` are (task id, channel, value) in LangGraph's order, ``paths`` each task's path and
    ``stamps`` when each task's resume write was stored (ns). A task's resume write lists the
    answers to its interrupt() calls in order: a decision made after it adds its answer.
    """
    interrupted = {gate_node(paths.get(t, ""), t): t for t, channel, _ in writes if channel == INTERRUPT}
    answers: dict[str, list[Any]] = {}
    for record in decisions:
        task_id = interrupted.get(record.node_id or "")
        if task_id is None or record.decision is None:
            continue
        if int(record.created_at * 1e9) > stamps.get(task_id, 0):
            answers.setdefault(task_id, []).append(record.decision)
    if not answers:
        return writes
    resumed = {t: list(v) for t, channel, v in writes if channel == RESUME and isinstance(v, list)}
    kept = [w for w in writes if not (w[1] == RESUME and w[0] in answers)]
    return kept + [(t, RESUME, resumed.get(t, []) + extra) for t, extra in answers.items()]
