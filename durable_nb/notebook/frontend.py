"""The kernel's side of the JupyterLab extension: the `durable_nb` comm and the kernel's registry entry.

A front end opens a comm to the target ``durable_nb``; the kernel answers with a snapshot of the
run it is attached to and the state of each durable cell it ran, then pushes each change. All of
it comes from what the session already holds in memory: nothing here reads the store, and nothing
is sent while no front end has a comm open.
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import time
from typing import TYPE_CHECKING, Any

from ..jupyter.registry import remove_kernel_entry, write_kernel_entry
from ..jupyter.stores import store_key

if TYPE_CHECKING:
    from ..engine.cells.cell_run import CellRun
    from ..model import CheckpointRecord

__all__ = ["TARGET", "FrontendLink", "register_comm_target"]

TARGET = "durable_nb"


def register_comm_target(shell: Any) -> None:
    """Register the ``durable_nb`` comm target on the kernel's comm manager (no-op outside a kernel)."""
    if getattr(shell, "kernel", None) is None:
        return  # a plain IPython shell has no front end to talk to
    import comm

    def opened(channel: Any, message: dict[str, Any]) -> None:
        from .session import session_for

        session_for(shell).frontend.opened(channel, message)

    comm.get_comm_manager().register_target(TARGET, opened)


class FrontendLink:
    """The open comms of one kernel session, the durable cells' last states, and the registry entry."""

    def __init__(self, shell: Any, session: Any) -> None:
        self.shell = shell
        self.session = session
        self.comms: list[Any] = []
        # Cell id (as the front end sent it) -> its last CellState; small, and kept without any comm
        # open so that a page opened later gets the states in its snapshot.
        self.cells: dict[str, dict[str, Any]] = {}
        self.cell_id: str | None = None
        self.executing = False
        self._sent_all = False
        # JupyterLab 4.4+ puts comms on a subshell: a front end's messages arrive on another thread
        # while cells run. One lock keeps the snapshot and the pushed changes in order.
        self._lock = threading.Lock()
        self._node_cells: dict[str, str | None] = {}
        self._keys: dict[str, str] = {}
        self._registered: tuple[str, str] | None = None
        shell.events.register("pre_run_cell", self._pre_run)
        shell.events.register("post_run_cell", self._post_run)

    def _pre_run(self, info: Any) -> None:
        # JupyterLab, Notebook 7 and VS Code send the cell's nbformat id with each execution.
        self.cell_id = getattr(info, "cell_id", None)
        self.executing = True

    def _post_run(self, result: Any) -> None:
        self.cell_id = None
        self.executing = False
        if self.comms and self._all() != self._sent_all:
            # `%durable run NAME --all` and `%durable off` turn the mode on and off after attaching.
            self.run_changed(self.session.cell_run)

    # -- the run ------------------------------------------------------------------------------

    def run_changed(self, cell_run: CellRun | None) -> None:
        """Tell every front end which run the kernel works in now, and keep the registry entry current."""
        if cell_run is not None:
            self._register(cell_run)
        if self.comms:
            with self._lock:
                self._sent_all = self._all()
                self._send({"type": "run", "run": self._run(cell_run), "all": self._sent_all})

    def _run(self, cell_run: CellRun | None) -> dict[str, Any] | None:
        if cell_run is None:
            return None
        run = cell_run.run
        url = cell_run.store.url
        key = self._keys.get(url)
        if key is None:
            key = self._keys[url] = store_key(url)
        return {
            "run_id": run.run_id,
            "name": run.name,
            "status": run.status.value,
            "parent_run_id": run.parent_run_id,
            "store_key": key,
        }

    def _all(self) -> bool:
        # Set by `%durable run NAME --all` where that mode exists.
        return bool(getattr(getattr(self.session, "all_cells", None), "enabled", False))

    # -- cells ------------------------------------------------------------------------------------

    def started(self, run_id: str, node: str) -> None:
        """A durable cell starts running its code."""
        self._cell(run_id, node, "running", at=time.time())

    def finished(self, cell_run: CellRun, node: str, checkpoint: CheckpointRecord | None) -> None:
        """A durable cell ran and committed ``checkpoint`` (None: it changed nothing a replay would store)."""
        if checkpoint is None:
            self._cell(cell_run.run_id, node, "restored", at=time.time())
            return
        self._cell(
            cell_run.run_id,
            node,
            "committed",
            at=checkpoint.created_at,
            duration=checkpoint.duration,
            size=cell_run.stored_bytes,
        )

    def restored(self, run_id: str, node: str, checkpoint: CheckpointRecord) -> None:
        """A committed cell was restored from ``checkpoint`` without running."""
        self._cell(run_id, node, "restored", at=checkpoint.created_at, duration=checkpoint.duration)

    def paused(self, run_id: str, node: str, reason: str) -> None:
        """A durable cell waits at a gate."""
        self._cell(run_id, node, "paused", at=time.time(), gate=reason)

    def failed(self, run_id: str, node: str, duration: float | None) -> None:
        """A durable cell failed (or was interrupted): nothing was committed."""
        self._cell(run_id, node, "failed", at=time.time(), duration=duration)

    def _cell(
        self,
        run_id: str,
        node: str,
        state: str,
        *,
        at: float,
        duration: float | None = None,
        size: int | None = None,
        gate: str | None = None,
    ) -> None:
        # A cell continued after a decision runs outside any execution: it is the cell last seen for that node.
        cell_id = self.cell_id if self.cell_id is not None else self._node_cells.get(node)
        self._node_cells[node] = cell_id
        cell = {
            "cell_id": cell_id,
            "node": node,
            "state": state,
            "run_id": run_id,
            "at": at,
            "duration": duration,
            "bytes": size,
            "gate": gate,
        }
        with self._lock:
            if cell_id is not None:
                self.cells[cell_id] = cell
            if self.comms:
                self._send({"type": "cell", "cell": cell})

    # -- comms ------------------------------------------------------------------------------------

    def opened(self, channel: Any, message: dict[str, Any]) -> None:
        """Keep a comm a front end opened and answer it with a snapshot."""
        channel.on_msg(self._received)
        channel.on_close(lambda _message: self._closed(channel))
        with self._lock:
            self.comms.append(channel)
            self._snapshot(channel)

    def _closed(self, channel: Any) -> None:
        with contextlib.suppress(ValueError):
            self.comms.remove(channel)

    def _snapshot(self, channel: Any) -> None:
        """Send the snapshot (the caller holds the lock)."""
        self._sent_all = self._all()
        channel.send(
            {
                "type": "snapshot",
                "run": self._run(self.session.cell_run),
                "all": self._sent_all,
                "cells": dict(self.cells),
            }
        )

    def _received(self, message: dict[str, Any]) -> None:
        data = message.get("content", {}).get("data") or {}
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "cell-info":
            self._cell_info(data)
        elif kind == "switch":
            self._switch(data)
        elif kind == "hello":
            with self._lock:
                for channel in self.comms:
                    if channel.comm_id == message.get("content", {}).get("comm_id"):
                        self._snapshot(channel)

    def _cell_info(self, data: dict[str, Any]) -> None:
        cell_id, tags = data.get("cell_id"), data.get("tags")
        if not isinstance(cell_id, str) or not isinstance(tags, list):
            return
        note = getattr(self.session, "note_cell_info", None)
        if note is not None:
            note(cell_id, [t for t in tags if isinstance(t, str)])

    def _switch(self, data: dict[str, Any]) -> None:
        from ..errors import DurableError

        run_id = data.get("run_id")
        try:
            if not isinstance(run_id, str) or not run_id:
                raise ValueError("A switch message names the run to switch to: {'type': 'switch', 'run_id': '…'}.")
            if self.session.store is None:
                raise ValueError("This kernel is attached to no store yet: run %durable run NAME first.")
            if self.executing:
                # On a subshell, this message arrives while a cell runs: the run must not change under it.
                raise ValueError("The kernel is running a cell: switch runs once it is idle.")
            self.session.switch_to(run_id)
        except (DurableError, ValueError) as error:
            self._send({"type": "error", "message": str(error)})

    def _send(self, data: dict[str, Any]) -> None:
        for channel in list(self.comms):
            try:
                channel.send(data)
            except Exception:  # noqa: BLE001 - a front end gone mid-send must not fail the cell
                self._closed(channel)

    # -- the registry entry -----------------------------------------------------------------------

    def _register(self, cell_run: CellRun) -> None:
        entry = (cell_run.run_id, cell_run.store.url)
        if entry == self._registered:
            return
        self._registered = entry
        with contextlib.suppress(OSError):
            # The panel then finds this kernel's store through the comm alone; the run is unaffected.
            _write_entry(cell_run.run_id, cell_run.store.url)


_removal_registered = False


def _write_entry(run_id: str, store_url: str) -> None:
    """Write this kernel's registry entry for the Jupyter server, removed when the kernel exits."""
    global _removal_registered
    write_kernel_entry(run_id, store_url)
    if not _removal_registered:
        _removal_registered = True
        atexit.register(remove_kernel_entry)
