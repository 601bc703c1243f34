"""How a wave that did not finish is committed: a failed node ends the run, a gate pauses it."""

from __future__ import annotations

import time
import traceback

from ...errors import NodeFailed
from ...model import (
    RUN_END,
    CheckpointDraft,
    CheckpointStatus,
    EventType,
    NewEvent,
    PendingInterrupt,
    RunStatus,
    RunUpdate,
)
from ..execution.attempts import Outcome
from ..tracing import GATE, event
from .run_commits import RunCommits, finished
from .run_progress import RunProgress

__all__ = ["WaveStops", "failure_text"]


def failure_text(label: str, error: BaseException) -> str:
    """Return the error of a run whose node failed: ``Node '<label>' failed: <reason>``."""
    if isinstance(error, NodeFailed):
        return str(error)
    return f"Node '{label}' failed: {type(error).__name__}: {error}"


class WaveStops:
    """The runner's commits for a wave that failed or paused."""

    def __init__(self, progress: RunProgress, commits: RunCommits) -> None:
        self.progress = progress
        self.graph = progress.graph
        self.commits = commits

    async def commit_failure(self, failures: list[Outcome]) -> None:
        """End the run as failed at the first of the wave's failed nodes; each failure is an event."""
        first = failures[0]
        spec = self.graph.nodes[first.node_id]
        error = first.error
        assert error is not None
        message = failure_text(spec.label, error)
        error_type = getattr(error, "error_type", "") or type(error).__name__
        trace = getattr(error, "traceback", "") or "".join(traceback.format_exception(error))
        failed_ids = [f.node_id for f in failures]
        queue = failed_ids + [n for n in self.progress.ready() if n not in failed_ids]
        item_index = first.value if spec.kind == "map" and isinstance(first.value, int) else None
        checkpoints = [
            self.commits.draft(
                "failed",
                first.node_id,
                CheckpointStatus.FAILED,
                queue,
                error=message,
                error_type=error_type,
                traceback=trace,
                duration=first.duration,
                attempts=first.attempts,
                item_index=item_index,
                extra={"wave_writes": dict(self.progress.wave_writes)},
            ),
            self.commits.draft(RUN_END, None, CheckpointStatus.FAILED, [], error=message, error_type=error_type),
        ]
        events = [
            NewEvent(
                EventType.NODE_FAILED, f.node_id, {"error": failure_text(self.graph.nodes[f.node_id].label, f.error)}
            )
            for f in failures
            if f.error is not None
        ]
        events.append(NewEvent(EventType.RUN_FAILED, first.node_id, {"error": message}))
        await self.commits.commit(events, checkpoints=checkpoints, run=finished(RunStatus.FAILED, message, error_type))
        for failure in failures:
            failure.end_span(checkpoints[0].checkpoint_id if failure is first else None)

    async def commit_pause(self, suspends: list[Outcome]) -> None:
        """Pause the run at the wave's gates, a checkpoint and a pending interrupt each."""
        checkpoints: list[CheckpointDraft] = []
        interrupts: list[PendingInterrupt] = []
        events: list[NewEvent] = []
        queue = self.progress.ready()
        now = time.time()
        for outcome in suspends:
            suspend = outcome.suspend
            assert suspend is not None
            draft = self.commits.draft(
                "gate",
                outcome.node_id,
                CheckpointStatus.INTERRUPTED,
                queue,
                interrupt=suspend.detail(outcome.node_id),
                duration=outcome.duration,
                extra={"wave_writes": dict(self.progress.wave_writes)},
            )
            checkpoints.append(draft)
            interrupts.append(suspend.pending(self.commits.run.run_id, outcome.node_id, draft.checkpoint_id, now))
            events.append(NewEvent(EventType.GATE_OPENED, outcome.node_id, {"reason": suspend.reason}))
        events.append(NewEvent(EventType.RUN_PAUSED, suspends[0].node_id))
        await self.commits.commit(
            events,
            checkpoints=checkpoints,
            open_interrupts=interrupts,
            run=RunUpdate(status=RunStatus.PAUSED, owner=None, lease_until=None),
        )
        run_id = self.commits.run.run_id
        for outcome, draft in zip(suspends, checkpoints, strict=True):
            reason = outcome.suspend.reason if outcome.suspend is not None else None
            event(outcome.span, GATE, run_id, draft.checkpoint_id, node=outcome.node_id, reason=reason, state="paused")
            outcome.end_span(draft.checkpoint_id)
