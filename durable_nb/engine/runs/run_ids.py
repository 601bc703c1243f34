"""A run named as people type it: its whole id, or any start of it that only one run's id has."""

from __future__ import annotations

from ...errors import AmbiguousRunId, RunNotFound
from ...model import RunRecord
from ...store.protocol import Store
from ...store.rules import check_run_id

__all__ = ["complete_run_id"]

# Enough to recognise the run meant; more would flood the terminal.
CANDIDATES_SHOWN = 8


async def complete_run_id(store: Store, text: str) -> str:
    """Return the id of the run whose id is ``text``, else of the one run whose id starts with it.

    No such run raises RunNotFound; several raise AmbiguousRunId listing them.
    """
    check_run_id(text)
    found = await store.runs_by_id_prefix(text, CANDIDATES_SHOWN + 1)
    ids = [record.run_id for record in found]
    if text in ids:
        return text
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise RunNotFound(text, store.url)
    raise AmbiguousRunId(_ambiguous(text, found))


def _ambiguous(text: str, found: list[RunRecord]) -> str:
    shown = found[:CANDIDATES_SHOWN]
    listed = "; ".join(f"{r.run_id} ({r.name}, {r.status.value})" for r in shown)
    more = f" (the first {len(shown)} shown)" if len(found) > len(shown) else ""
    return f"Several runs have ids starting with {text!r}{more}: {listed}. Give more of the id, or all of it."
