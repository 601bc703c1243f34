"""The service's schedules: a workflow or a notebook started on a cron schedule, by whichever server
of a store gets there first.

A schedule lives in the store with its next due time. When that time comes, a server starts the
run with the idempotency key ``schedule:<id>:<due time>``, then moves the schedule on with a
compare-and-set from the time it saw: two servers racing start the same run (the key finds it)
and only one moves the schedule; a server that stopped between the two steps starts nothing new
when it (or another) comes back, for the key finds the run it started.

Times that passed while no server ran (a due time more than ``grace`` seconds old when a server
first sees it) are missed: ``run-once`` starts one run, for the latest of them, and ``skip``
starts none; either way the schedule then goes on from the next time to come. A time whose run
cannot start (its notebook was removed, say) is passed over with a warning in the server's log;
one the store failed to take stays due. A server starts
only the schedules it can run (the workflows it serves, the notebooks in its folder); the others
wait for a server that can.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import ConfigurationError, DurableError, StoreError
from ..store.schedules import ScheduleRecord
from .cron import Cron, parse_cron
from .errors import InvalidSchedule, NotebooksNotServed, ScheduleNotFound
from .operations import Service

__all__ = ["GRACE", "MISSED", "Planned", "Schedules", "schedule_id", "schedule_json", "schedule_key"]

log = logging.getLogger("durable_nb.service")

MISSED = ("run-once", "skip")
# A due time older than this when a server first sees it passed while no server ran: it was missed.
GRACE = 60.0
# The longest a server sleeps between looks at the schedules (others may add some meanwhile).
_LOOK_EVERY = 30.0


def _iso(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def schedule_id(cron: Cron, kind: str, target: str, input: dict[str, Any]) -> str:
    """The id of a schedule: the same cron, time zone, target and input make the same schedule."""
    identity = json.dumps([cron.text, cron.timezone, kind, target, input], sort_keys=True, default=repr)
    return "sch-" + hashlib.sha256(identity.encode()).hexdigest()[:16]


def schedule_key(schedule: ScheduleRecord, due: float) -> str:
    """The idempotency key of a schedule's run at the due time ``due``."""
    return f"schedule:{schedule.schedule_id}:{_iso(due)}"


def schedule_json(schedule: ScheduleRecord) -> dict[str, Any]:
    """One schedule as the API shows it: what, when, and its next and last runs (ISO times, UTC)."""
    target = {"workflow": schedule.target} if schedule.kind == "workflow" else {"notebook": schedule.target}
    given = {"input": schedule.input} if schedule.kind == "workflow" else {"parameters": schedule.input}
    return {
        "id": schedule.schedule_id,
        "cron": schedule.cron,
        "timezone": schedule.timezone,
        **target,
        **given,
        "missed": schedule.missed,
        "source": schedule.source,
        "next_run": _iso(schedule.next_run),
        "last_run": _iso(schedule.last_run),
        "last_run_id": schedule.last_run_id,
        "created_at": _iso(schedule.created_at),
    }


def _check_missed(missed: object) -> str:
    if missed not in MISSED:
        raise InvalidSchedule(
            f"missed must be 'run-once' (one run for the times missed while no server ran) or 'skip' (none), "
            f"not {missed!r:.80}."
        )
    return str(missed)


@dataclass(frozen=True, slots=True)
class Planned:
    """A schedule given on serve's command line: ``--schedule CRON TARGET [-p NAME VALUE]…``."""

    cron: str
    target: str  # a served workflow's name, or a notebook's path in the notebooks folder
    parameters: dict[str, Any]
    missed: str = "run-once"
    timezone: str = "UTC"

    def __str__(self) -> str:
        return f"--schedule {self.cron!r} {self.target}"


class Schedules:
    """The schedules of a store, as one server adds, lists, deletes and starts them."""

    def __init__(self, service: Service, *, grace: float = GRACE, clock: Callable[[], float] = time.time) -> None:
        self.service = service
        self.store = service.store
        self.grace = grace
        self.clock = clock
        self._woken = asyncio.Event()

    # -- the operations ------------------------------------------------------------------------

    def resolve(
        self,
        cron: str,
        *,
        workflow: str | None = None,
        notebook: str | None = None,
        input: dict[str, Any] | None = None,
        parameters: dict[str, Any] | None = None,
        timezone: str = "UTC",
        missed: str = "run-once",
        source: str = "api",
    ) -> ScheduleRecord:
        """Check a schedule of a ``workflow`` with ``input``, or of a ``notebook`` with ``parameters``, as
        this server would run it; return its record, due next after now."""
        parsed = parse_cron(cron, timezone)
        policy = _check_missed(missed)
        if (workflow is None) == (notebook is None):
            raise InvalidSchedule(
                'A schedule starts one "workflow" (with "input") or one "notebook" (with "parameters"): name one.'
            )
        if (workflow is not None and parameters is not None) or (notebook is not None and input is not None):
            raise InvalidSchedule('A workflow takes "input" and a notebook "parameters": give the one of yours.')
        values = dict((input if workflow is not None else parameters) or {})
        if workflow is not None:
            kind, target = "workflow", self.service.flow(workflow).name
        else:
            kind, target = "notebook", self._notebook(str(notebook), values)
        return ScheduleRecord(
            schedule_id=schedule_id(parsed, kind, target, values),
            cron=parsed.text,
            timezone=parsed.timezone,
            kind=kind,
            target=target,
            input=values,
            missed=policy,
            source=source,
            next_run=parsed.after(self.clock()),
        )

    def planned(self, planned: Planned) -> ScheduleRecord:
        """Check a schedule of the command line; raise ConfigurationError saying which and why."""
        is_flow = planned.target in self.service.flows
        if not is_flow and not planned.target.endswith(".ipynb"):
            raise ConfigurationError(
                f"{planned} names no workflow this server serves ({', '.join(sorted(self.service.flows)) or 'none'}) "
                "and no notebook (a path ending in .ipynb, in the folder of --notebooks DIR)."
            )
        try:
            return self.resolve(
                planned.cron,
                workflow=planned.target if is_flow else None,
                notebook=None if is_flow else planned.target,
                input=planned.parameters if is_flow else None,
                parameters=None if is_flow else planned.parameters,
                timezone=planned.timezone,
                missed=planned.missed,
                source="command line",
            )
        except DurableError as error:
            raise ConfigurationError(f"{planned}: {error}") from None

    def _notebook(self, path: str, parameters: dict[str, Any]) -> str:
        if self.service.notebooks is None:
            raise NotebooksNotServed(
                "This server runs no notebooks, so it cannot schedule one: start it with "
                "`durable-nb serve --notebooks DIR` to schedule the notebooks in DIR."
            )
        return self.service.notebooks.check(path, parameters)

    async def add(self, record: ScheduleRecord) -> dict[str, Any]:
        """Store a resolved schedule (the same one again is kept, with its ``missed`` policy); return
        ``{"id", "next_run", "created"}``."""
        stored, created = await self.store.put_schedule(record)
        self._woken.set()
        return {"id": stored.schedule_id, "next_run": _iso(stored.next_run), "created": created}

    async def list(self) -> list[dict[str, Any]]:
        """Every schedule of the store, the soonest due first."""
        return [schedule_json(s) for s in await self.store.list_schedules()]

    async def get(self, schedule_id: str) -> dict[str, Any]:
        """One schedule; raise ScheduleNotFound."""
        found = await self.store.get_schedule(schedule_id)
        if found is None:
            raise ScheduleNotFound(f"No schedule {schedule_id!r:.80} in this store; GET /api/schedules lists them.")
        return schedule_json(found)

    async def delete(self, schedule_id: str) -> dict[str, Any]:
        """Delete a schedule (its runs stay); raise ScheduleNotFound."""
        if not await self.store.delete_schedule(schedule_id):
            raise ScheduleNotFound(f"No schedule {schedule_id!r:.80} in this store; GET /api/schedules lists them.")
        return {"id": schedule_id, "deleted": True}

    # -- starting runs -------------------------------------------------------------------------

    def can_run(self, schedule: ScheduleRecord) -> bool:
        """Whether this server serves the schedule's workflow, or runs notebooks."""
        if schedule.kind == "workflow":
            return schedule.target in self.service.flows
        return schedule.kind == "notebook" and self.service.notebooks is not None

    async def tick(self, now: float | None = None) -> list[tuple[str, float, str]]:
        """Start the runs due at ``now`` (default: the clock's); return (schedule id, due time, run id) of each."""
        at = self.clock() if now is None else now
        started = []
        for schedule in await self.store.list_schedules():
            if schedule.next_run > at:
                break  # listed soonest first
            if not self.can_run(schedule):
                continue
            try:
                ran = await self._fire(schedule, at)
            except DurableError as error:  # the schedule stays due: the next look tries again
                log.warning("schedule %s could not start its run: %s", schedule.schedule_id, error)
                continue
            except Exception:  # a row this server cannot read (a zone it lacks) must not hold up the others
                log.exception("schedule %s could not be read; the others go on", schedule.schedule_id)
                continue
            if ran is not None:
                started.append((schedule.schedule_id, *ran))
        return started

    async def _fire(self, schedule: ScheduleRecord, now: float) -> tuple[float, str] | None:
        """Start the schedule's run due at ``now`` (unless missed and skipped), then move it on."""
        cron = Cron(schedule.cron, schedule.timezone)
        due = cron.latest(now)
        run_id = None
        if schedule.missed == "run-once" or now - due <= self.grace:
            try:
                run_id = await self._start(schedule, due)
            except StoreError:
                raise  # the store's trouble: the time stays due, for the next look
            except DurableError as error:  # its target cannot run now (a notebook gone): this time is passed over
                log.warning("schedule %s started no run for %s: %s", schedule.schedule_id, _iso(due), error)
        # Only from the time seen: a server that moved it meanwhile wins, and the key made the run one.
        moved = await self.store.advance_schedule(
            schedule.schedule_id, schedule.next_run, cron.after(now), None if run_id is None else due, run_id
        )
        return (due, run_id) if moved and run_id is not None else None

    async def _start(self, schedule: ScheduleRecord, due: float) -> str:
        key = schedule_key(schedule, due)
        if schedule.kind == "workflow":
            started = await self.service.start(schedule.target, schedule.input, key)
        else:
            assert self.service.notebooks is not None
            started = await self.service.notebooks.start(schedule.target, schedule.input, None, key)
        return str(started["id"])

    async def next_due(self, after: float) -> float | None:
        """The soonest next run after ``after`` among the schedules this server can run, if any."""
        upcoming = [s.next_run for s in await self.store.list_schedules() if self.can_run(s) and s.next_run > after]
        return min(upcoming, default=None)

    async def run(self, look_every: float = _LOOK_EVERY) -> None:
        """Start due runs until cancelled: at each due time, and every ``look_every`` seconds at least."""
        while True:
            wait = look_every
            self._woken.clear()  # before looking: a schedule added meanwhile wakes the next wait
            try:
                await self.tick()
                now = self.clock()
                # One still due right after a look could not start: the next look tries it again, no sooner.
                soonest = await self.next_due(now)
                if soonest is not None:
                    wait = min(look_every, soonest - now)
            except Exception:  # a failing store now must not stop the next look
                log.exception("starting scheduled runs failed; trying again later")
            try:
                await asyncio.wait_for(self._woken.wait(), timeout=wait)
            except TimeoutError:
                pass
