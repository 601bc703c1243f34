"""Which edited cells are stale: their code differs from what their run committed, so running them forks.

The code is compared as the kernel compares it (comments and formatting ignored): the cell is
put through IPython's input transformations and hashed by the notebook's own ``analyze``; the
committed hash is the one the cell's commit recorded, in its run or the runs it was forked from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine.cells.lineage import CellLineage
from ..errors import InvalidInput
from ..store.protocol import Store

__all__ = ["EditedCell", "read_cells", "stale_cells"]

# A notebook's edited cells arrive a few at a time; a request about more is no editor's.
MAX_CELLS = 500


@dataclass(frozen=True, slots=True)
class EditedCell:
    """A cell as the editor holds it: its notebook id, its node name in the run, its source."""

    cell_id: str
    node: str
    source: str


def read_cells(body: Any) -> list[EditedCell]:
    """Return the cells of a stale request ``{"cells": [{"cell_id", "node", "source"}]}``; raise InvalidInput."""
    cells = body.get("cells") if isinstance(body, dict) else None
    if not isinstance(cells, list) or set(body) != {"cells"}:
        raise InvalidInput('Send {"cells": [{"cell_id": str, "node": str, "source": str}, ...]} and nothing else.')
    if len(cells) > MAX_CELLS:
        raise InvalidInput(f"Send at most {MAX_CELLS} cells at a time, not {len(cells)}.")
    found = []
    for index, cell in enumerate(cells):
        fields = ("cell_id", "node", "source")
        if not isinstance(cell, dict) or set(cell) != set(fields) or not all(isinstance(cell[f], str) for f in fields):
            raise InvalidInput(f"cells[{index}] must be {{'cell_id': str, 'node': str, 'source': str}}, nothing more.")
        found.append(EditedCell(cell["cell_id"], cell["node"], cell["source"]))
    return found


def _source_hash(source: str) -> str | None:
    """The hash the kernel would give this cell's code (None when it does not parse: it cannot match)."""
    from IPython.core.inputtransformer2 import TransformerManager

    from ..notebook.cellcode import analyze

    lines = source.splitlines(keepends=True)
    if lines and lines[0].lstrip().startswith("%%durable"):
        lines = lines[1:]  # the kernel hashes the cell's body, without its magic line
    try:
        return analyze(TransformerManager().transform_cell("".join(lines))).source_hash
    except (SyntaxError, ValueError):
        return None


async def stale_cells(store: Store, run_id: str, cells: list[EditedCell]) -> list[str]:
    """Return the ids of the cells whose code differs from the code their node committed in the run."""
    run = await store.get_run(run_id)
    lineage = CellLineage(store)
    stale = []
    for cell in cells:
        committed = await lineage.lookup(run, cell.node)
        recorded = None if committed is None else committed.extra.get("source_hash")
        if recorded is not None and _source_hash(cell.source) != recorded:
            stale.append(cell.cell_id)
    return stale
