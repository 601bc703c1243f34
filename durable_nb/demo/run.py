"""``durable-nb demo``: the quickstart notebook in a real kernel, killed, restored, approved, finished.

Everything runs headless, in a temporary folder on the embedded SQLite store there (unless told
otherwise: ``--folder``, ``--store``), and every step says what it is doing.
"""

from __future__ import annotations

import json
import os
import queue
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from ..errors import DurableError
from ..notebook.notes import is_note

__all__ = ["DemoResult", "run_demo"]

Say = Callable[[str], None]
# The notebook's first cell attaches to the latest unfinished run of this name; the demo's first
# kernel starts a new one instead, so an earlier demo left unfinished in the same store is not taken.
_ATTACH = "%durable run quickstart"


@dataclass(frozen=True)
class DemoResult:
    """What the demo did: its run, how it ended, where, in how long, and the run's history."""

    run_id: str
    status: str
    store: str
    seconds: float
    history: Any


class _Kernel:
    """A real ipykernel; cells run one by one as Run All does."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        from jupyter_client.manager import KernelManager

        from ..headless.kernels import ipc_sockets

        self.sockets = ExitStack()  # the folder of the kernel's Unix sockets, removed on close
        self.manager = KernelManager(kernel_name="python3", **self.sockets.enter_context(ipc_sockets()))
        self.manager.start_kernel(cwd=str(folder), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)
        self.closed = False

    def run(self, code: str, timeout: float = 120) -> tuple[str, str]:
        """Run one cell; return its status (ok, error, dead) and the text it printed."""
        msg_id = self.client.execute(code)
        text: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                return "timeout", "".join(text)
            try:
                message = self.client.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if not self.manager.is_alive():
                    return "dead", "".join(text)
                continue
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                text.append(content["text"])
            elif kind in ("display_data", "update_display_data") and is_note(content):
                text.append(content["data"]["text/plain"] + "\n")
            elif kind == "error":
                text.append(f"{content['ename']}: {content['evalue']}\n")
            elif kind == "status" and content["execution_state"] == "idle":
                break
        # The shell channel may also hold replies to other requests: wait_for_ready sends a new
        # kernel_info request each second until one is answered and leaves the late replies
        # queued (a slow start), and a timed-out cell's reply comes late. Take this cell's reply.
        reply_deadline = time.monotonic() + 30
        while True:
            try:
                reply = self.client.get_shell_msg(timeout=max(0.0, reply_deadline - time.monotonic()))
            except queue.Empty:
                return "timeout", "".join(text)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply["content"]["status"], "".join(text)

    def kill(self) -> None:
        pid = self.manager.provisioner.process.pid  # type: ignore[union-attr]
        os.kill(pid, signal.SIGKILL)
        while self.manager.is_alive():
            time.sleep(0.05)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.client.stop_channels()
        if self.manager.is_alive():
            self.manager.shutdown_kernel(now=True)
        else:
            self.manager.cleanup_resources()
        self.sockets.close()


def _cells() -> list[tuple[str, str]]:
    """Return the quickstart's code cells as (node name or label, source)."""
    notebook = json.loads(resources.files("durable_nb.demo").joinpath("quickstart.ipynb").read_text())
    cells = []
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        first = source.splitlines()[0] if source else ""
        label = first.split()[1] if first.startswith("%%durable") else first.strip("%# ")[:40]
        cells.append((label, source))
    return cells


def _run_all(kernel: _Kernel, cells: list[tuple[str, str]], _say: Say, kill_in: str | None = None) -> str:
    """Run cells in order, reporting each; stop at an error; kill the kernel inside ``kill_in``."""
    for label, source in cells:
        started = time.perf_counter()
        timer = None
        if label == kill_in:
            timer = threading.Timer(1.0, kernel.kill)
            timer.start()
        status, text = kernel.run(source)
        if timer is not None:
            timer.cancel()
        took = time.perf_counter() - started
        restored = "restored '" in text
        if status == "dead":
            _say(f"  ✗ {label:<10} the kernel was killed (kill -9) while this cell ran")
            return "dead"
        if status != "ok":
            first_line = text.strip().splitlines()[-1] if text.strip() else status
            _say(f"  ⏸ {label:<10} {first_line}")
            return "stopped"
        if source.startswith("%%durable"):
            how = "restored from checkpoint" if restored else "executed and committed"
            _say(f"  ✓ {label:<10} {how} ({took * 1000:.0f} ms)")
        else:
            _say(f"  · {label}")
    return "done"


def _first_run_all(cells: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The cells as the first kernel runs them: attaching to a new run of the quickstart."""
    return [(label, source.replace(_ATTACH, f"{_ATTACH} --new", 1)) for label, source in cells]


def run_demo(
    folder: str | None = None, keep: bool = False, store: str | None = None, out: TextIO | None = None
) -> DemoResult:
    """Run the whole demo on ``store`` (default: a SQLite file in the folder), saying each step on ``out``."""
    begun = time.perf_counter()
    stream = sys.stdout if out is None else out

    def _say(text: str) -> None:
        print(text, file=stream, flush=True)

    work = Path(folder) if folder else Path(tempfile.mkdtemp(prefix="durable-nb-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    store = store or f"sqlite:///{work.resolve()}/runs.db"
    env = dict(os.environ)
    env["DURABLE_NB_STORE"] = store
    cells = [c for c in _cells() if not c[1].startswith("%durable approve")]
    _say(f"durable_nb demo — store {store}\n")
    kernels: list[_Kernel] = []
    try:
        _say("1. Run All in a kernel; the kernel is killed in the middle of the slow 'classify' cell:")
        kernels.append(first := _Kernel(work, env))
        _run_all(first, _first_run_all(cells), _say, kill_in="classify")
        first.close()

        _say("\n2. A new kernel, Run All again: committed cells are restored, the rest runs, the gate pauses:")
        kernels.append(second := _Kernel(work, env))
        if _run_all(second, cells, _say) != "stopped":
            raise DurableError("the demo did not stop at the approval gate as it should have")

        import durable_nb as dnb
        from durable_nb.views.text import human_frame

        run_id = str(dnb.runs("quickstart", store=store)["run_id"].iloc[0])
        decide = ["approve", run_id, "--comment", "Looks good", "--by", "demo"]
        _say(f"\n3. Approve the gate from the command line: {shlex.join(['durable-nb', *decide])}")
        approve = subprocess.run(
            [sys.executable, "-m", "durable_nb.cli", *decide],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        _say("   " + (approve.stdout.strip().splitlines() or [approve.stderr.strip()])[0])
        if approve.returncode != 0:
            raise DurableError(f"durable-nb approve failed (exit code {approve.returncode}): {approve.stderr.strip()}")

        _say("\n4. Run All once more: the decided gate continues, the run finishes:")
        _run_all(second, cells, _say)
        second.close()

        history = dnb.history(run_id, store=store)
        _say(f"\n5. The run's history ({len(history)} checkpoints):")
        _say(human_frame(history, ["seq", "step", "status", "duration", "changed"]).to_string(index=False))
        final = dnb.get_run(run_id, store=store)
        seconds = time.perf_counter() - begun
        _say(f"\nrun {run_id} is {final.status}; the demo took {seconds:.1f} s")
        if final.status != dnb.RunStatus.COMPLETED:
            raise DurableError(f"the demo did not complete: run {run_id} is {final.status}")
        return DemoResult(run_id, str(final.status), store, seconds, history)
    finally:
        for kernel in kernels:
            kernel.close()
        if folder is None and not keep:
            shutil.rmtree(work, ignore_errors=True)
        elif folder is None:
            _say(f"(kept {work})")


def main(argv: list[str] | None = None) -> Any:
    """Run the demo (``python -m durable_nb.demo.run``)."""
    run_demo(argv[0] if argv else None)


if __name__ == "__main__":
    main(sys.argv[1:])
