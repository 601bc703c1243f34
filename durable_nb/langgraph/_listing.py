"""Listing checkpoints newest first, a page at a time.

A listing first reads which checkpoints a thread's runs hold (their seq and id: two columns,
nothing decoded), picks those the call asks for and orders them; then each page reads only its
own checkpoints: their ``extra`` and states in one pass, their writes in one query, their
values in one more, whatever the page's length.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.serde.base import SerializerProtocol

from .._collector import collector_paused
from ..errors import InvalidInput
from ..model import CheckpointRecord, RunRecord
from ..store.protocol import Store
from ._runs import ThreadRuns
from ._shape import META, address, checkpoint_id_of
from ._values import ChannelValues, Stored

__all__ = ["PAGE", "Listing", "Plan"]

# Checkpoints read per page: enough that a page's few queries cost little per checkpoint, few
# enough that a listing cut short (a limit, a caller that stops) reads little more than it yields.
PAGE = 1000

# A page of a listing: its checkpoints, and where the next page starts (None: there is none).
Page = tuple[list[CheckpointTuple], int | None]


@dataclass(frozen=True, slots=True)
class Plan:
    """What a listing yields, in order: (LangGraph id, seq, run) newest first, the decisions
    recorded after each run's latest checkpoint, and the metadata filter and limit."""

    chosen: list[tuple[str, int, RunRecord]]
    decided: dict[str, list[CheckpointRecord]]
    filter: Mapping[str, Any] | None
    limit: int | None


class Listing:
    """Plan a listing of a store's LangGraph checkpoints, then load it a page at a time."""

    def __init__(self, store: Store, runs: ThreadRuns, values: ChannelValues) -> None:
        self.store = store
        self._runs = runs
        self._values = values

    async def plan(
        self,
        config: RunnableConfig | None,
        filter: Mapping[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Plan:
        """Check the arguments and pick the checkpoints a listing yields, newest first."""
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
            raise InvalidInput(f"limit is a number of checkpoints (0 or more) or None for all, not {limit!r}.")
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidInput(
                f"filter is a dict of metadata values to match, e.g. {{'source': 'loop'}}, not {filter!r}."
            )
        if config is None:
            runs = [run for run in await self.store.list_runs() if isinstance(run.meta.get(META), dict)]
        else:
            thread_id, ns = address(config)
            runs = await self._runs.of_thread(thread_id)
            if "checkpoint_ns" in config["configurable"]:
                runs = [run for run in runs if run.meta[META].get("checkpoint_ns") == ns]
        wanted = checkpoint_id_of(config)
        before_id = checkpoint_id_of(before) if before is not None else None
        chosen: list[tuple[str, int, RunRecord]] = []
        decided: dict[str, list[CheckpointRecord]] = {}
        for run in runs:
            index = await self.store.checkpoint_index(run.run_id)
            # A LangGraph checkpoint's id in the store is its own id @ the run's (our_id); the
            # others are decisions durable_nb recorded at the thread's gates.
            suffix = f"@{run.run_id}"
            latest = None
            for seq, checkpoint_id in index:
                if not checkpoint_id.endswith(suffix):
                    continue
                latest = seq
                lg_id = checkpoint_id[: -len(suffix)]
                if wanted is not None and lg_id != wanted:
                    continue
                if before_id is not None and not lg_id < before_id:
                    continue
                chosen.append((lg_id, seq, run))
            if latest is not None and index[-1][0] != latest:
                # Decisions after the latest checkpoint answer its gates, as resume writes.
                record, decisions = await self._runs.latest(run.run_id)
                if record is not None:
                    decided[record.checkpoint_id] = decisions
        # Newest first, as LangGraph's savers list: its checkpoint ids sort by time.
        chosen.sort(key=lambda item: item[0], reverse=True)
        if limit is not None and not filter:
            chosen = chosen[:limit]
        return Plan(chosen, decided, filter, limit)

    async def page(self, serde: SerializerProtocol, plan: Plan, start: int) -> Page:
        """Load the page of a listing from ``start``; return its checkpoints and where the next starts (None: done)."""
        with collector_paused():
            return await self._page(serde, plan, start)

    async def _page(self, serde: SerializerProtocol, plan: Plan, start: int) -> Page:
        part = plan.chosen[start : start + PAGE]
        by_run: dict[str, tuple[RunRecord, list[int]]] = {}
        for _, seq, run in part:
            by_run.setdefault(run.run_id, (run, []))[1].append(seq)
        loaded: dict[tuple[str, int], CheckpointTuple] = {}
        for run_id, (run, seqs) in by_run.items():
            extras = await self.store.checkpoint_extras(run_id, seqs)
            items, at = [], []
            for seq in seqs:
                extra, manifest = extras.get(seq, ({}, {}))
                info = extra.get(META)
                if not isinstance(info, dict):
                    continue
                if plan.filter and any(info["metadata"].get(k) != v for k, v in plan.filter.items()):
                    continue
                items.append(Stored(f"{info['id']}@{run_id}", info, manifest))
                at.append(seq)
            if items:
                meta = run.meta[META]
                tuples = await self._values.tuples(
                    serde, meta["thread_id"], meta["checkpoint_ns"], run_id, items, plan.decided
                )
                loaded.update(((run_id, seq), item) for seq, item in zip(at, tuples, strict=True))
        found = [loaded[run.run_id, seq] for _, seq, run in part if (run.run_id, seq) in loaded]
        following = start + PAGE
        return found, following if following < len(plan.chosen) else None
