"""The notebook front end: %load_ext durable_nb registers %durable and %%durable."""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension"]


def _quiet_gate(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> list[str]:
    # A paused cell is not an error to read: it says why in a note and shows no error. The
    # cell's execution still ends in error (its reply says GatePending), so Run All stops here.
    from .all_cells import CellSyntaxError, show_syntax_error
    from .session import session_for

    if isinstance(value, CellSyntaxError):
        show_syntax_error(shell, etype, value, tb, tb_offset)
        return []
    session_for(shell).notes.say(str(value), "paused", always=True)
    return []


def load_ipython_extension(ip: Any) -> None:
    """Register the magics, the quiet display of paused cells and the JupyterLab comm target."""
    from ..errors import GatePending
    from .all_cells import CellSyntaxError
    from .frontend import register_comm_target
    from .magics import DurableMagics

    ip.register_magics(DurableMagics)
    ip.set_custom_exc((GatePending, CellSyntaxError), _quiet_gate)
    register_comm_target(ip)
