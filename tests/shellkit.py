"""Real IPython shells for tests: durable_nb loaded, attached to a run, cells run as a person types them."""

from __future__ import annotations

from typing import Any

from IPython.core.interactiveshell import InteractiveShell

from durable_nb._loop import run_sync
from durable_nb.notebook.session import KernelSession, session_for


class Shell:
    """A real IPython shell with durable_nb loaded, attached to a run named ``name``."""

    def __init__(self, store_url: str, name: str, run_id: str | None = None) -> None:
        self.shell = InteractiveShell()
        self.store_url = store_url
        self.shell.run_line_magic("load_ext", "durable_nb")
        self.ok(f"%durable run {name} --store {store_url}" + (f" --id {run_id}" if run_id else ""))

    def run(self, source: str) -> Any:
        """Run a cell as typed; return IPython's result (success, error, value)."""
        return self.shell.run_cell(source, store_history=True)

    def ok(self, source: str) -> Any:
        """Run a cell that must succeed; return its value."""
        result = self.run(source)
        assert result.success, result.error_in_exec or result.error_before_exec
        return result.result

    def run_all(self, *cells: str) -> None:
        """Run cells in order, as Run All does."""
        for cell in cells:
            self.ok(cell)

    @property
    def ns(self) -> dict[str, Any]:
        return self.shell.user_ns

    @property
    def session(self) -> KernelSession:
        return session_for(self.shell)

    @property
    def run_id(self) -> str:
        return self.session.require().run_id

    def leave(self) -> str:
        """Detach (as a kernel that shuts down does) and return the run it was attached to."""
        run_id = self.run_id
        run_sync(self.session.require().release())
        return run_id

    def close(self) -> None:
        """Detach if attached."""
        if self.session.cell_run is not None:
            self.leave()


def gated_run(store_url: str, name: str) -> str:
    """Return the id of a run of three cells, its middle one a gate on ``rate`` that was approved: a run to replay."""
    gate = "%%durable review\nimport durable_nb as dnb\nd = dnb.gate('publish?', {'rate': rate})\nok = d.approved"
    shell = Shell(store_url, name)
    try:
        shell.ok("%%durable base\nrate = 0.5")
        assert type(shell.run(gate).error_in_exec).__name__ == "GatePending"
        shell.ok("%durable approve")
        shell.ok("%%durable publish\npublished = rate if ok else None")
        return shell.run_id
    finally:
        shell.close()
