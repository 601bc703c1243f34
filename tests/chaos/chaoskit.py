"""Harness of the chaos suite: a workflow whose node injects a fault, run and resumed in real processes.

The flow writes one value per node and appends the node's index to a side file each time its
body runs, so a test can count executions. Node ``FAULT_AT`` runs a shell command first (make
the store read-only, fill the disk, kill the database's connections …); the process that hit
the fault prints what it raised and stays alive until the test releases it, so that another
process must be able to resume the run while the first one still lives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]

FLOW = """
import json, os, subprocess, sys
import durable_nb as dnb

STORE = {store!r}
SIDE = {side!r}
FAULT_AT = {fault_at!r}
FAULT = {fault!r}
SIZE = {size!r}
flow = dnb.Workflow("chaos", store=STORE)


def payload(i):
    return bytes([i % 251]) * SIZE[i] if isinstance(SIZE, list) else bytes([i % 251]) * SIZE


def make(i):
    def node(state):
        with open(SIDE, "a") as side:
            side.write("%d\\n" % i)
        if i == FAULT_AT and FAULT and not os.path.exists(SIDE + ".faulted"):
            open(SIDE + ".faulted", "w").close()
            subprocess.run(FAULT, shell=True, check=True)
        return {{"v%02d" % i: payload(i)}}

    node.__name__ = "n%02d" % i
    return node


previous = None
for index in range({nodes}):
    flow.node(make(index), after=previous, retry_count=0)
    previous = "n%02d" % index


def report(**fields):
    print(json.dumps(fields), flush=True)


if __name__ == "__main__":
    try:
        if sys.argv[1] == "run":
            run = flow.run({{}})
        else:
            run = flow.resume(sys.argv[2])
        report(status=run.status, run_id=run.id, error=run.error)
    except Exception as error:
        try:
            runs = dnb.runs("chaos", store=STORE)
            run_id = str(runs.run_id.iloc[0]) if len(runs) else None
        except dnb.StoreError:
            run_id = None  # the store is out of reach: the test finds the run itself
        report(raised=type(error).__name__, message=str(error), run_id=run_id)
    if "--hold" in sys.argv:
        sys.stdin.read()  # alive until the test closes our stdin
"""


class ChaosFlow:
    """A flow module in a folder, run in child processes."""

    def __init__(self, folder: Path, store: str, nodes: int, fault_at: int, fault: str, size: Any) -> None:
        self.folder = folder
        self.store = store
        self.side = folder / "side.txt"
        self.script = folder / "chaos_flow.py"
        self.nodes = nodes
        self.script.write_text(
            FLOW.format(store=store, side=str(self.side), fault_at=fault_at, fault=fault, size=size, nodes=nodes)
        )
        self.held: list[subprocess.Popen[str]] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        return env

    def start(self, *args: str) -> dict[str, Any]:
        """Run ``chaos_flow.py args`` and keep it alive after it reports; return its report."""
        child = subprocess.Popen(
            [sys.executable, str(self.script), *args, "--hold"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env(),
            cwd=self.folder,
        )
        self.held.append(child)
        assert child.stdout is not None
        line = child.stdout.readline()
        if not line:
            child.wait(timeout=60)
            raise AssertionError(f"the child reported nothing (exit {child.returncode}): {child.stderr.read()}")
        return json.loads(line)

    def run_to_end(self, *args: str) -> dict[str, Any]:
        """Run ``chaos_flow.py args`` to its exit and return its report."""
        done = subprocess.run(
            [sys.executable, str(self.script), *args],
            capture_output=True,
            text=True,
            env=self._env(),
            cwd=self.folder,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    def crash(self, *args: str) -> int:
        """Run ``chaos_flow.py args`` whose fault kills it; return its exit code."""
        done = subprocess.run(
            [sys.executable, str(self.script), *args], capture_output=True, env=self._env(), cwd=self.folder
        )
        return done.returncode

    def release(self) -> list[int]:
        """Let the held children exit; return their exit codes (a crash on exit shows here)."""
        codes = []
        for child in self.held:
            assert child.stdin is not None
            child.stdin.close()
            codes.append(child.wait(timeout=60))
        self.held = []
        return codes

    def executions(self) -> Counter[int]:
        """How many times each node's body ran."""
        return Counter(int(line) for line in self.side.read_text().split())

    def expected_value(self, index: int, size: int) -> bytes:
        return bytes([index % 251]) * size


def need_root_tool(*tools: str) -> None:
    """Skip unless this process is root and has ``tools`` (mount, chattr)."""
    if os.geteuid() != 0:
        pytest.skip("this fault is injected with mount/chattr, which need root")
    for tool in tools:
        if shutil.which(tool) is None:
            pytest.skip(f"this fault needs the {tool} command")


def sh(command: str) -> subprocess.CompletedProcess[str]:
    """Run a shell command of the test (not of the flow)."""
    return subprocess.run(command, shell=True, capture_output=True, text=True)


class CuttableProxy:
    """A TCP proxy to a database server that a flag file cuts off, as a network partition would.

    While ``flag`` exists, every connection through the proxy is closed at its next packet and
    new ones are closed at once; remove the file and connections go through again. The check
    happens on the data itself, so a cut made by a node hits that node's very next operation.
    """

    def __init__(self, target: tuple[str, int], flag: Path) -> None:
        import socket
        import threading

        self.target = target
        self.flag = flag
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import socket
        import threading

        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.flag.exists():
                client.close()
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: Any, sink: Any) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data or self.flag.exists():
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                # shutdown wakes the pump blocked in recv on the other direction; close alone may not.
                for step in (lambda e: e.shutdown(2), lambda e: e.close()):
                    try:
                        step(end)
                    except OSError:
                        pass

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
