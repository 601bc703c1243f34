"""Long-lived approver processes for the approval-race tests: started once, each races many trials.

Starting an interpreter and importing the project costs far more than a trial itself, so the race
tests keep a pool of worker processes. A worker reads one order per line on stdin (a workflow
module to load, a run to approve, a ready file to write and a start file to wait for), approves
the run at the shared start instant, closes its store connections and answers one ``RESULT`` line
on its own channel. Every trial still races separate processes on a real store.

Run as a script, this file is the worker.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

RESULT = "RESULT "


class Approver:
    """One worker process; orders go in on its stdin, one result line per order comes back."""

    def __init__(self, folder: Path, index: int, env: dict[str, str]) -> None:
        self.log = folder / f"approver-{index}.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, __file__],
                cwd=folder,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
            )
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, order: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(order) + "\n").encode())
        self.proc.stdin.flush()

    def answered(self) -> bool:
        """Whether a result line is waiting (a worker answers early when its warm-up failed)."""
        return self._fill(0.0)

    def result(self, timeout: float) -> dict[str, Any]:
        """The next result line, waiting at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self._fill(max(0.0, deadline - time.monotonic())):
            if self.proc.poll() is not None:
                raise RuntimeError(f"approver {self.pid} exited (rc={self.proc.returncode}):\n{self.stderr()}")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"approver {self.pid} gave no result in {timeout}s:\n{self.stderr()}")
        line, _, self._buffer = self._buffer.partition(b"\n")
        text = line.decode()
        assert text.startswith(RESULT), text
        return json.loads(text[len(RESULT) :])

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def _fill(self, timeout: float) -> bool:
        """Read what the worker wrote until a whole line is buffered or ``timeout`` passes."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            readable, _, _ = select.select([fd], [], [], min(timeout, 0.05))
            if readable:
                chunk = os.read(fd, 65536)
                if not chunk:  # the worker ended
                    return False
                self._buffer += chunk
            elif timeout <= 0.05:
                return False
            else:
                timeout -= 0.05
        return True

    def close(self, timeout: float = 30.0) -> int:
        """Ask the worker to end (stdin closed) and return its exit code; kill it if it hangs."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return -9
        finally:
            if self.proc.stdout is not None:
                self.proc.stdout.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.close()


class ApproverPool:
    """Workers started on first use (with the environment of the test that needs them), reused after."""

    def __init__(self, folder: Path, env_factory: Any) -> None:
        self.folder = folder
        self._env_factory = env_factory
        self._workers: list[Approver] = []
        self._started = 0

    def take(self, count: int) -> list[Approver]:
        """``count`` distinct live workers, starting more when the pool has fewer."""
        while len(self._workers) < count:
            self._workers.append(Approver(self.folder, self._started, self._env_factory()))
            self._started += 1
        return self._workers[:count]

    def discard(self) -> None:
        """Kill every worker (after a failed trial, whose workers may be mid-order); new ones start on demand."""
        for worker in self._workers:
            worker.kill()
        self._workers = []

    def close(self) -> dict[int, int]:
        """End every worker; return each one's exit code by pid (0 when it ended cleanly)."""
        codes = {worker.pid: worker.close() for worker in self._workers}
        self._workers = []
        return codes


def _load(path: str) -> Any:
    """Import the workflow module at ``path`` under a name of its own (each trial writes its own)."""
    import importlib.util

    name = f"race_flow_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _approve_once(order: dict[str, Any]) -> dict[str, Any]:
    """One trial: warm up, signal ready, wait for the start instant, approve, close the store."""
    import durable_nb as dnb
    from durable_nb.store import disconnect

    result: dict[str, Any] = {"pid": os.getpid(), "comment": order["comment"]}
    try:
        race_flow = _load(order["module"])
        run_id = order["run_id"]
        # Warm up before the race: module loaded, store connection open, run visible and paused.
        warm = dnb.get_run(run_id, store=race_flow.STORE)
        assert warm.status == "paused", warm.status
        race_flow.flow.get(run_id)
    except Exception as exc:  # noqa: BLE001 - reported before the start signal; the parent fails the test
        disconnect()
        result.update(outcome="error", error=f"warm-up: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        return result

    Path(order["ready"]).write_text(str(os.getpid()))
    go_file = order["go"]
    while not os.path.exists(go_file):
        time.sleep(0.001)
    with open(go_file) as handle:
        go_at = float(handle.read())
    while time.time() < go_at:
        remaining = go_at - time.time()
        if remaining > 0.002:
            time.sleep(remaining - 0.002)

    result["started"] = time.time()
    try:
        if order["mode"] == "flow":
            run = race_flow.flow.approve(run_id, approved=True, comment=order["comment"])
        else:
            run = dnb.approve(run_id, comment=order["comment"], store=race_flow.STORE)
        result.update(outcome="won", status=run.status)
    except dnb.AlreadyResumed as exc:
        result.update(outcome="already_resumed", message=str(exc))
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which fails the test
        result.update(outcome="error", error=f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
    result["finished"] = time.time()
    # No connection outlives the trial: the test drops its store (a PostgreSQL schema) right after.
    disconnect()
    return result


def serve() -> None:
    """The worker's loop: one order per stdin line, one result line per order, until stdin closes."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed goes to the log, never into the result channel
    for line in sys.stdin:
        if line.strip():
            channel.write(RESULT + json.dumps(_approve_once(json.loads(line))) + "\n")
            channel.flush()


if __name__ == "__main__":
    serve()
