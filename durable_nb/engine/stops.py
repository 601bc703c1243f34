"""How a wave that did not finish is committed: a failed node ends the run, a gate pauses it."""

from __future__ import annotations

import time
import traceback
from typing import TYPE_CHECKING

from ..errors import NodeFailed
from ..model import (
    RUN_END,
    CheckpointDraft,
    CheckpointStatus,
    EventType,
    NewEvent,
    PendingInterrupt,
    RunStatus,
    RunUpdate,
)
from .attempts import Outcome

if TYPE_CHECKING:
    from .runner import Runner as _Runner
else:
    _Runner = object

__all__ = ["WaveStops", "failure_text"]


def failure_text(label: str, error: BaseException) -> str:
    """Return the error of a run whose node failed: ``Node '<label>' failed: <reason>``."""
    if isinstance(error, NodeFailed):
        return str(error)
    return f"Node '{label}' failed: {type(error).__name__}: {error}"


class WaveStops(_Runner):
    """The runner's commits for a wave that failed or paused."""

    async def _commit_failure(self, failures: list[Outcome]) -> None:
        first = failures[0]
        spec = self.graph.nodes[first.node_id]
        error = first.error
        assert error is not None
        message = failure_text(spec.label, error)
        error_type = getattr(error, "error_type", "") or type(error).__name__
        trace = getattr(error, "traceback", "") or "".join(traceback.format_exception(error))
        failed_ids = [f.node_id for f in failures]
        queue = failed_ids + [n for n in self.ready() if n not in failed_ids]
        item_index = first.value if spec.kind == "map" and isinstance(first.value, int) else None
        checkpoints = [
            self._draft(
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
                extra={"wave_writes": dict(self.wave_writes)},
            ),
            self._draft(RUN_END, None, CheckpointStatus.FAILED, [], error=message, error_type=error_type),
        ]
        events = [
            NewEvent(
                EventType.NODE_FAILED, f.node_id, {"error": failure_text(self.graph.nodes[f.node_id].label, f.error)}
            )
            for f in failures
            if f.error is not None
        ]
        events.append(NewEvent(EventType.RUN_FAILED, first.node_id, {"error": message}))
        self._stopped = True
        await self._commit(events, checkpoints=checkpoints, run=self._finished(RunStatus.FAILED, message, error_type))

    async def _commit_pause(self, suspends: list[Outcome]) -> None:
        checkpoints: list[CheckpointDraft] = []
        interrupts: list[PendingInterrupt] = []
        events: list[NewEvent] = []
        queue = self.ready()
        now = time.time()
        for outcome in suspends:
            suspend = outcome.suspend
            assert suspend is not None
            draft = self._draft(
                "gate",
                outcome.node_id,
                CheckpointStatus.INTERRUPTED,
                queue,
                interrupt=suspend.detail(outcome.node_id),
                duration=outcome.duration,
                extra={"wave_writes": dict(self.wave_writes)},
            )
            checkpoints.append(draft)
            interrupts.append(suspend.pending(self.run.run_id, outcome.node_id, draft.checkpoint_id, now))
            events.append(NewEvent(EventType.GATE_OPENED, outcome.node_id, {"reason": suspend.reason}))
        events.append(NewEvent(EventType.RUN_PAUSED, suspends[0].node_id))
        self._stopped = True
        await self._commit(
            events,
            checkpoints=checkpoints,
            open_interrupts=interrupts,
            run=RunUpdate(status=RunStatus.PAUSED, owner=None, lease_until=None),
        )
