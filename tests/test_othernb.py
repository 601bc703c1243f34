"""The statsmodels notebooks' reading as scripts: only their Python reaches the harness's cells."""

from __future__ import annotations

from benchmarks.othernb import as_script
from benchmarks.realnb import split_cells


def _notebook(*sources: str) -> dict[str, object]:
    return {"cells": [{"cell_type": "code", "source": source} for source in sources]}


def test_a_javascript_cell_is_left_out_and_a_timed_cell_kept() -> None:
    script = as_script(
        _notebook(
            "%%javascript\nIPython.OutputArea.prototype._should_scroll = function(lines) {\n    return false;\n}",
            "%%time\nx = 1",
            "%matplotlib inline\ny = x + 1",
        )
    )
    assert split_cells(script) == ["x = 1", "y = x + 1"]
