"""Durable cells in terminal IPython (the ``ipython`` command, not a kernel), typed in a real pseudo-terminal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import env_with_repo
from terminalkit import TerminalIPython

pytestmark = pytest.mark.slow


@pytest.fixture
def terminal(tmp_path: Path, store_url: str) -> Iterator[TerminalIPython]:
    shell = TerminalIPython(tmp_path, env_with_repo())
    try:
        shell.cell("%load_ext durable_nb")
        shell.cell(f"%durable run terminal --store {store_url}")
        yield shell
    finally:
        shell.close()


def test_a_restored_value_shows_out_n_once(terminal: TerminalIPython) -> None:
    """A cell's value is shown once as Out[n] when it runs, and once again when it is restored
    (the terminal prints the value on stdout: it must not be recorded a second time as printed text)."""
    cell = "%%durable value\nprint('side', 'note')\nx = 41\nx + 1"
    ran = terminal.cell(cell)
    assert ran.count("Out[") == 1 and ran.count("42") == 1, ran
    assert "Out[3]: 42" in ran
    again = terminal.cell(cell)
    assert "restored 'value'" in again, again
    # The note's time of commit and duration may hold "42" too: count the cell's own output only.
    shown = "\n".join(line for line in again.splitlines() if not line.startswith("durable_nb: restored"))
    assert shown.count("Out[") == 1 and shown.count("42") == 1, again
    assert "Out[4]: 42" in shown
    assert shown.count("side note") == 1
    assert shown.index("side note") < shown.index("Out[4]: 42")  # in the order it was shown


def test_a_restored_display_shows_once(terminal: TerminalIPython) -> None:
    """display(...) prints its text in a terminal: restored, it is shown once, not once more as printed text."""
    cell = "%%durable shown\nfrom IPython.display import display\ndisplay({'answer': 42})"
    ran = terminal.cell(cell)
    assert ran.count("{'answer': 42}") == 1, ran
    again = terminal.cell(cell)
    assert "restored 'shown'" in again, again
    assert again.count("{'answer': 42}") == 1, again
