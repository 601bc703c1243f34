"""The notebook front end: %load_ext durable_nb registers %durable and %%durable."""

from __future__ import annotations

from typing import Any

__all__ = ["load_ipython_extension"]


def _quiet_gate(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: int | None = None) -> list[str]:
    # A paused cell is not an error to read: one line instead of a traceback. It is still
    # reported as an error, so that Run All stops here.
    stb = [f"⏸ {value}"]
    shell._showtraceback(etype, value, stb)
    return stb


def load_ipython_extension(ip: Any) -> None:
    """Register the magics and the quiet display of paused cells."""
    from ..errors import GatePending
    from .magics import DurableMagics

    ip.register_magics(DurableMagics)
    ip.set_custom_exc((GatePending,), _quiet_gate)
