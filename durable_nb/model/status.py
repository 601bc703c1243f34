"""What runs, checkpoints and events can be (their statuses, kinds and event types), how
statuses are coloured wherever they are shown, and how step names and durations read."""

from __future__ import annotations

import enum

__all__ = [
    "CheckpointStatus",
    "EventType",
    "RUN_END",
    "RunKind",
    "RunStatus",
    "STATUS_COLOURS",
    "format_seconds",
    "step_name",
]


class RunStatus(enum.StrEnum):
    """Lifecycle of a run."""

    PENDING = "pending"
    RUNNING = "running"
    PAUSED = "paused"
    FAILED = "failed"
    CANCELLED = "cancelled"
    COMPLETED = "completed"


class RunKind(enum.StrEnum):
    """What drives a run: a notebook kernel or a Workflow."""

    NOTEBOOK = "notebook"
    WORKFLOW = "workflow"


class CheckpointStatus(enum.StrEnum):
    """What a checkpoint records about its node."""

    OK = "ok"
    INTERRUPTED = "interrupted"
    FAILED = "failed"
    APPROVED = "approved"
    FORK = "fork"
    COMPLETED = "completed"


class EventType(enum.StrEnum):
    """What an event in a run's log reports; the order is the order of a run's life."""

    RUN_STARTED = "run_started"
    NODE_STARTED = "node_started"
    NODE_FINISHED = "node_finished"
    NODE_FAILED = "node_failed"
    NODE_RETRYING = "node_retrying"
    GATE_OPENED = "gate_opened"
    GATE_DECIDED = "gate_decided"
    RUN_PAUSED = "run_paused"
    RUN_FAILED = "run_failed"
    RUN_CANCELLED = "run_cancelled"
    RUN_COMPLETED = "run_completed"
    FORK_CREATED = "fork_created"


# How statuses (of runs and of checkpoints) are coloured wherever they are shown.
STATUS_COLOURS = {
    "completed": "#16a34a",
    "ok": "#16a34a",
    "approved": "#16a34a",
    "running": "#2563eb",
    "pending": "#6b7280",
    "fork": "#7c3aed",
    "paused": "#d97706",
    "interrupted": "#d97706",
    "failed": "#dc2626",
    "cancelled": "#6b7280",
}

RUN_END = "run_end"


def format_seconds(seconds: float, *, compound: bool = False) -> str:
    """Return a duration for messages: ``12 ms``, ``0.5 s``, ``90 s``, ``45 min``, ``5 h``, ``21 days``.

    ``compound=True`` gives the form for tables, three significant digits below a minute and
    two units above: ``340 ms``, ``1.52 s``, ``2 min 05 s``, ``1 h 02 min``, ``3 d 4 h``.
    """
    if compound:
        return _compound_seconds(seconds)
    for unit, size, floor in (("days", 86400, 172800), ("h", 3600, 7200), ("min", 60, 120)):
        if seconds >= floor:
            return f"{round(seconds / size, 2):g} {unit}"
    if 0 < seconds < 0.1:
        return f"{seconds * 1000:.2g} ms"
    return f"{round(seconds, 3):g} s"


def _compound_seconds(seconds: float) -> str:
    if seconds < 0:
        return "-" + _compound_seconds(-seconds)
    seconds = round(seconds, 6)  # below a microsecond is clock noise, and would print as 1e-05 ms
    if seconds == 0:
        return "0 s"
    # The limits are where three significant digits would round up into the next unit.
    if seconds < 0.9995:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 59.95:
        return f"{seconds:.3g} s"
    # Each form rounds in its smaller unit first, so 59 min 59.7 s reads 1 h 00 min, never 60 min 00 s.
    if (whole := round(seconds)) < 3600:
        return "{} min {:02d} s".format(*divmod(whole, 60))
    if (whole := round(seconds / 60)) < 1440:
        return "{} h {:02d} min".format(*divmod(whole, 60))
    return "{} d {} h".format(*divmod(round(seconds / 3600), 24))


def step_name(kind: str, node_id: str | None = None) -> str:
    """Build a step name such as ``after:classify`` or ``run_end``."""
    if kind == RUN_END:
        return RUN_END
    return f"{kind}:{node_id}"
