"""Real Jupyter kernels for tests: start, run cells like Run All, kill, interrupt."""

from __future__ import annotations

import os
import queue
import signal
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

from durable_nb.headless.kernels import ipc_sockets


@dataclass
class CellResult:
    """What one cell did in the kernel."""

    status: str
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def text(self) -> str:
        parts = []
        for output in self.outputs:
            if output["type"] == "stream":
                parts.append(output["text"])
            elif output["type"] == "display_data":
                parts.append(output["data"].get("text/plain", "") + "\n")
            elif output["type"] == "execute_result":
                parts.append(output["data"].get("text/plain", ""))
            elif output["type"] == "error":
                parts.append(f"{output['ename']}: {output['evalue']}")
        return "".join(parts)

    reply_error: str | None = None  # the exception the execute reply names (a paused cell shows none)

    @property
    def error(self) -> str | None:
        for output in self.outputs:
            if output["type"] == "error":
                return output["ename"]
        return self.reply_error


class Kernel:
    """One real ipykernel process working in ``folder``."""

    def __init__(self, folder: Path, env: dict[str, str] | None = None, connection_file: Path | None = None) -> None:
        # On Unix sockets in a private folder, as durable_nb starts its own kernels (never TCP).
        self.sockets = ExitStack()
        self.manager = KernelManager(kernel_name="python3", **self.sockets.enter_context(ipc_sockets()))
        if connection_file is not None:
            # Named kernel-<id>.json in a runtime folder, as a Jupyter server names its kernels' files.
            self.manager.connection_file = str(connection_file)
        kernel_env = dict(os.environ)
        kernel_env.update(env or {})
        self.manager.start_kernel(cwd=str(folder), env=kernel_env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        # The data of every comm message the kernel sent while a cell ran, in order (see open_comm).
        self.comm_messages: list[dict[str, Any]] = []

    @property
    def pid(self) -> int:
        return self.manager.provisioner.process.pid  # type: ignore[union-attr]

    def open_comm(self, target: str, data: dict[str, Any]) -> str:
        """Open a comm to ``target`` as a front end does; its messages land in ``comm_messages``."""
        msg = self.client.session.msg("comm_open", {"comm_id": uuid.uuid4().hex, "target_name": target, "data": data})
        self.client.shell_channel.send(msg)
        return str(msg["content"]["comm_id"])

    def send_comm(self, comm_id: str, data: dict[str, Any]) -> None:
        """Send a comm message to the kernel, as a front end does."""
        self.client.shell_channel.send(self.client.session.msg("comm_msg", {"comm_id": comm_id, "data": data}))

    def run(self, code: str, timeout: float = 120, cell_id: str | None = None) -> CellResult:
        """Execute one cell and collect its outputs; a dead kernel reads as status 'dead'.

        ``cell_id``: sent as JupyterLab does, in the request's metadata (``cellId``).
        """
        result = CellResult("ok")

        def hook(message: dict[str, Any]) -> None:
            kind = message["msg_type"]
            content = message["content"]
            if kind == "stream":
                result.outputs.append({"type": "stream", "name": content["name"], "text": content["text"]})
            elif kind in ("display_data", "execute_result"):
                display = (content.get("transient") or {}).get("display_id")
                result.outputs.append(
                    {"type": kind, "data": content["data"], "metadata": content["metadata"], "display_id": display}
                )
            elif kind == "update_display_data":
                # As a front end does: the display with that id is redrawn in place.
                display = content["transient"]["display_id"]
                for output in result.outputs:
                    if output.get("display_id") == display:
                        output["data"], output["metadata"] = content["data"], content["metadata"]
            elif kind == "error":
                result.outputs.append(
                    {
                        "type": "error",
                        "ename": content["ename"],
                        "evalue": content["evalue"],
                        "traceback": content["traceback"],
                    }
                )

        if cell_id is None:
            msg_id = self.client.execute(code)
        else:
            # jupyter_client's execute() sends no metadata: build the request as JupyterLab sends it.
            content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}}
            content.update({"allow_stdin": False, "stop_on_error": True})
            request = self.client.session.msg("execute_request", content, metadata={"cellId": cell_id})
            self.client.shell_channel.send(request)
            msg_id = request["header"]["msg_id"]
        deadline = time.monotonic() + timeout
        idle = False
        while not idle:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the cell did not finish in {timeout} s")
            try:
                message = self.client.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if not self.manager.is_alive():
                    result.status = "dead"
                    return result
                continue
            if message["msg_type"] == "comm_msg":
                self.comm_messages.append(message["content"]["data"])
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                idle = True
            else:
                hook(message)
        while True:
            reply = self.client.get_shell_msg(timeout=max(1.0, deadline - time.monotonic()))
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        result.status = reply["content"]["status"]
        result.reply_error = reply["content"].get("ename")
        return result

    def run_all(self, cells: list[str], timeout: float = 120) -> list[CellResult]:
        """Run cells in order and stop at the first error, as Run All does."""
        results = []
        for cell in cells:
            result = self.run(cell, timeout=timeout)
            results.append(result)
            if result.status != "ok" or not self.manager.is_alive():
                break
        return results

    def interrupt_after(self, code: str, delay: float, timeout: float = 60) -> CellResult:
        """Start a cell, interrupt the kernel ``delay`` seconds later, return the cell's result."""
        import threading

        timer = threading.Timer(delay, self.manager.interrupt_kernel)
        timer.start()
        try:
            return self.run(code, timeout=timeout)
        finally:
            timer.cancel()

    def kill(self) -> None:
        """SIGKILL the kernel process, as a crash would."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        deadline = time.monotonic() + 10
        while self.manager.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    def close(self) -> None:
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=True)
        else:
            self.manager.cleanup_resources()
        self.sockets.close()
