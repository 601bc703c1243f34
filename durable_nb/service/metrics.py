"""The server's metrics at ``/metrics``, in Prometheus's text format (OpenMetrics when the scraper asks).

Two kinds of figures, each where it is true:

- What the store holds (runs by status, the gates waiting and how long they have waited, how
  long nodes took, the schedules and how overdue they are) is read from the store at each
  scrape, so it counts the work of every process on the store: kernels, the CLI, other servers
  on one PostgreSQL. A scrape costs four aggregate, indexed queries whatever the store's size
  (store/figures.py).
- What this server itself does (its commits, the runs its recovery took over, the store
  operations that failed in it, the HTTP requests it answered) is counted in the process:
  the store reports to the ``Tally`` the server sets for its requests and runs (_tally.py).

Each app has a registry of its own, so two apps in one process never share a figure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from .. import _tally as tally
from ..model import Commit, RunStatus
from ..store import Store
from ..store.figures import Figures

__all__ = ["DURATION_BUCKETS", "LATE_COMMIT_SECONDS", "Measured", "Metrics", "is_takeover"]

# From a quick function to an hour-long notebook cell, in seconds.
DURATION_BUCKETS = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
# A checkpoint's time is taken before its transaction commits, which may wait for the store's
# write lock (up to SQLite's 60 s busy timeout): each scrape looks back this far, and counts a
# checkpoint it saw before only once.
LATE_COMMIT_SECONDS = 60.0
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def is_takeover(commit: Commit) -> bool:
    """Whether ``commit`` gives a run owned by another process (a dead one: a live owner is never
    taken over) to a new owner."""
    run = commit.run
    return (
        run is not None
        and isinstance(run.owner, str)
        and isinstance(commit.expect_owner, str)
        and commit.expect_owner != run.owner
    )


class Metrics:
    """One app's registry: counters of this process's work, and the store's figures read at each scrape."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.registry = CollectorRegistry()
        self.commits = Counter(
            "durable_nb_commits",
            "Commits (transactions of checkpoints, events and run changes) this server wrote; its rate is "
            "commits per second.",
            registry=self.registry,
        )
        self.takeovers = Counter(
            "durable_nb_recovery_takeovers",
            "Runs left running by a dead process that this server took over to continue them.",
            registry=self.registry,
        )
        self.store_errors = Counter(
            "durable_nb_store_errors",
            "Store operations that failed in this server (disk full, I/O error, lost connection past its "
            "retries, unreachable database).",
            registry=self.registry,
        )
        self.requests = Counter(
            "durable_nb_http_requests",
            "HTTP requests this server answered, by method and status code (refusals included).",
            ["method", "code"],
            registry=self.registry,
        )
        # Node durations are counted from the server's start, as its counters are.
        self._floor = time.time()
        self._looked_back_to = self._floor
        self._seen: dict[tuple[str, int], float] = {}
        self._buckets = [0] * (len(DURATION_BUCKETS) + 1)
        self._duration_sum = 0.0
        self._figures: Figures | None = None
        self._read_at = self._floor
        self._lock = asyncio.Lock()
        self.registry.register(_StoreFigures(self))

    # -- the Tally the store reports to ---------------------------------------------------------

    def committed(self, commit: Commit) -> None:
        """Count a commit this server wrote (and a takeover, when it is one)."""
        self.commits.inc()
        if is_takeover(commit):
            self.takeovers.inc()

    def store_failed(self) -> None:
        """Count a store operation that failed in this server."""
        self.store_errors.inc()

    # -- a scrape -------------------------------------------------------------------------------

    async def scrape(self, accept: str | None) -> tuple[bytes, str]:
        """Read the store's figures and return the exposition for ``accept``, with its content type."""
        async with self._lock:  # one reader of the durations at a time: each is counted once
            now = time.time()
            figures = await self.store.figures(self._looked_back_to)
            self._count_durations(figures.durations, now)
            self._figures, self._read_at = figures, now
            encoder, content_type = choose_encoder(accept or "")
            return encoder(self.registry), content_type

    def _count_durations(self, rows: list[tuple[str, int, float, float]], now: float) -> None:
        for run_id, seq, created_at, duration in rows:
            key = (run_id, seq)
            if created_at <= self._floor or key in self._seen:
                continue
            self._seen[key] = created_at
            self._duration_sum += duration
            self._buckets[next((i for i, le in enumerate(DURATION_BUCKETS) if duration <= le), -1)] += 1
        # The next scrape looks back LATE_COMMIT_SECONDS from now: only what it may read again is kept.
        self._looked_back_to = max(self._floor, now - LATE_COMMIT_SECONDS)
        self._seen = {k: at for k, at in self._seen.items() if at > self._looked_back_to}

    def families(self) -> Iterator[Metric]:
        """Yield the store's figures as last read."""
        figures, at = self._figures, self._read_at
        if figures is None:
            return
        runs = GaugeMetricFamily(
            "durable_nb_runs", "Runs in the store by status, whichever process wrote them.", labels=["status"]
        )
        for status in [s.value for s in RunStatus] + sorted(set(figures.runs) - {s.value for s in RunStatus}):
            runs.add_metric([status], figures.runs.get(status, 0))
        yield runs
        yield GaugeMetricFamily("durable_nb_gates_waiting", "Gates waiting for a decision now.", value=figures.gates)
        oldest = 0.0 if figures.first_gate_at is None else max(0.0, at - figures.first_gate_at)
        yield GaugeMetricFamily(
            "durable_nb_gate_oldest_wait_seconds",
            "How long the gate waiting longest has waited for its decision (0 when none waits).",
            value=oldest,
        )
        yield GaugeMetricFamily(
            "durable_nb_gates_waiting_seconds",
            "How long the waiting gates have waited, summed; divided by durable_nb_gates_waiting it is the mean wait.",
            value=max(0.0, figures.gates * at - figures.gate_times_sum),
        )
        yield GaugeMetricFamily("durable_nb_schedules", "Schedules in the store.", value=figures.schedules)
        overdue = 0.0 if figures.first_next_run is None else max(0.0, at - figures.first_next_run)
        yield GaugeMetricFamily(
            "durable_nb_schedule_overdue_seconds",
            "How long past its due time the most overdue schedule is (0 when none is): above a minute or so, "
            "no server is starting the runs of that schedule.",
            value=overdue,
        )
        cumulative, buckets = 0, []
        for le, count in zip((*DURATION_BUCKETS, float("inf")), self._buckets, strict=True):
            cumulative += count
            buckets.append((floatToGoString(le), float(cumulative)))
        yield HistogramMetricFamily(
            "durable_nb_node_duration_seconds",
            "How long nodes and cells took, for those any process finished since this server started.",
            buckets=buckets,
            sum_value=self._duration_sum,
        )


class _StoreFigures(Collector):
    """The store's figures, read by the scrape before the registry is collected."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return self.metrics.families()


class Measured:
    """ASGI middleware: counts each HTTP request, and lets the store count this server's work into its metrics."""

    def __init__(self, app: Any, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        token = tally.current.set(self.metrics)
        try:
            if scope["type"] != "http":
                await self.app(scope, receive, send)
                return
            code = "500"  # what the server answers when the app fails before it starts answering

            async def noting(message: dict[str, Any]) -> None:
                nonlocal code
                if message["type"] == "http.response.start":
                    code = str(message["status"])
                await send(message)

            try:
                await self.app(scope, receive, noting)
            finally:
                method = scope["method"] if scope["method"] in _METHODS else "other"
                self.metrics.requests.labels(method, code).inc()
        finally:
            tally.current.reset(token)
