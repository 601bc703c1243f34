"""Issue 18 item 6: how durable_nb speaks in a notebook.

Its notes are display data (a small styled line, with the same words as plain text), never
stderr, which JupyterLab draws as an error; a cell's notes share one display; informational
notes can be switched off while warnings still show; a paused cell says so in a note and shows
no error box, while its execution still ends in error so that Run All stops. Real kernels. Real kernels throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kernelkit import CellResult, Kernel

from durable_nb.notebook.notes import is_note, note_kinds

pytestmark = pytest.mark.slow

SETUP = "%load_ext durable_nb\n%durable run voice"


@pytest.fixture
def start(kernels: Callable[[], Kernel]) -> Callable[[], Kernel]:
    def attached() -> Kernel:
        kernel = kernels()
        assert kernel.run(SETUP).status == "ok"
        return kernel

    return attached


def notes(result: CellResult) -> list[dict[str, Any]]:
    return [o for o in result.outputs if o["type"] == "display_data" and is_note(o)]


def test_a_restore_note_is_display_data_with_a_plain_text_fallback(start: Callable[[], Kernel]) -> None:
    """A restored cell's note: one display_data with HTML and plain text, marked as a note; no stderr."""
    first = start()
    assert first.run("%%durable load\nrows = [1, 2, 3]\nprint('loaded', len(rows))").status == "ok"
    first.kill()
    second = start()
    result = second.run("%%durable load\nrows = [1, 2, 3]\nprint('loaded', len(rows))")
    assert result.status == "ok"
    assert not [o for o in result.outputs if o["type"] == "stream" and o["name"] == "stderr"]
    [note] = notes(result)
    assert note_kinds(note) == ["restored"]
    assert note["data"]["text/plain"].startswith("durable_nb: restored 'load' from checkpoint")
    assert 'class="durable-nb-note"' in note["data"]["text/html"]
    assert "restored &#x27;load&#x27; from checkpoint" in note["data"]["text/html"]  # escaped
    assert "loaded 3" in result.text  # the cell's own output is replayed beside it


def test_a_cells_notes_share_one_display(start: Callable[[], Kernel]) -> None:
    """Two notes in one cell (back to the original run, then restored) are one display of two lines."""
    kernel = start()
    assert kernel.run("%%durable base\nx = 1").status == "ok"
    assert kernel.run("%%durable step\ny = x + 1").status == "ok"
    assert kernel.run("%%durable step\ny = x + 100").status == "ok"  # edited: continues in a fork
    back = kernel.run("%%durable step\ny = x + 1")
    [note] = notes(back)
    assert note_kinds(note) == ["switched", "restored"]
    assert note["data"]["text/plain"].count("durable_nb: ") == 2
    assert note["data"]["text/html"].count('class="durable-nb-note"') == 1


def test_notes_off_silences_notes_but_not_warnings(start: Callable[[], Kernel]) -> None:
    """%durable notes off: no restore note; a value that could not be stored is still named."""
    cell = "%%durable connect\nimport threading\nlock = threading.Lock()\nsettings = {'retries': 3}"
    first = start()
    committed = first.run(cell)
    assert [note_kinds(n) for n in notes(committed)] == [["unstored"]]
    first.kill()
    second = start()
    assert second.run("%durable notes off").status == "ok"
    restored = second.run(cell)
    assert restored.status == "ok"
    [warning] = notes(restored)
    assert note_kinds(warning) == ["unstored"]  # the restore note is gone, the warning is not
    assert "lock" in warning["data"]["text/plain"]
    assert second.run("%durable notes on").status == "ok"
    again = second.run("%%durable other\nz = 1")
    assert again.status == "ok" and notes(again) == []  # executing and committing is not news
    refused = second.run("%durable notes loudly")
    assert refused.status == "error" and "UsageError: %durable notes takes on or off" in refused.text


def test_a_paused_cell_says_so_in_a_note_and_its_error_has_no_traceback(start: Callable[[], Kernel]) -> None:
    """A gate: the panel and a note saying why the cell stopped; no error output, no glyph."""
    kernel = start()
    paused = kernel.run("%%durable review\nimport durable_nb as dnb\nd = dnb.gate('ship?')\nshipped = d.approved")
    assert paused.status == "error"  # the reply is an error, so that Run All stops here
    assert [o for o in paused.outputs if o["type"] in ("error", "stream")] == []  # but nothing looks like one
    [note] = notes(paused)
    assert note_kinds(note) == ["paused"]
    assert "Paused at gate 'ship?'" in note["data"]["text/plain"]
    assert "⏸" not in paused.text and "⏸" not in note["data"]["text/html"]
