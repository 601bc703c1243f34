"""Harness for crash tests: a workflow module children import, spawning, killing, counting."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FLOW = """
import os, random, sys, time
import durable_nb as dnb

STORE = {store!r}
SIDE = {side!r}
CHARGES = {charges!r}
flow = dnb.Workflow("crash-flow", store=STORE)


def append(path, line):
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\\n").encode())
    finally:
        os.close(fd)


@dnb.idempotent
def charge(i):
    append(CHARGES, str(i))
    return "receipt-%d" % i


def make(i):
    def node(state):
        append(SIDE, str(i))
        receipt = charge(i)
        time.sleep(random.uniform(0.002, {max_sleep}))
        return {{"n%02d" % i: receipt}}

    node.__name__ = "n%02d" % i
    return node


previous = None
for index in range({nodes}):
    flow.node(make(index), after=previous, retry_count=0)
    previous = "n%02d" % index

if __name__ == "__main__":
    if sys.argv[1] == "run":
        print(flow.run({{}}, idempotency_key=sys.argv[2]).status, flush=True)
    else:
        print(dnb.recover([flow]), flush=True)
"""


class CrashFlow:
    """A 20-node workflow in its own module and store, run and killed in child processes."""

    def __init__(self, folder: Path, nodes: int = 20, max_sleep: float = 0.012) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.db = folder / "runs.db"
        self.side = folder / "side-effects.txt"
        self.charges = folder / "charges.txt"
        self.nodes = nodes
        self.module = folder / "crash_flow.py"
        self.module.write_text(
            FLOW.format(
                store=f"sqlite:///{self.db}",
                side=str(self.side),
                charges=str(self.charges),
                nodes=nodes,
                max_sleep=max_sleep,
            )
        )
        self.kills = 0

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(self.folder), env.get("PYTHONPATH", "")])
        return env

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start ``crash_flow.py run KEY`` or ``crash_flow.py recover`` in a child process."""
        return subprocess.Popen(
            [sys.executable, str(self.module), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self._env(),
        )

    def lines(self, path: Path | None = None) -> list[str]:
        path = path or self.side
        return path.read_text().split() if path.exists() else []

    def kill_after_progress(self, child: subprocess.Popen[str], delay: float, timeout: float = 30) -> bool:
        """SIGKILL the child ``delay`` seconds after it ran one more node body; False if it finished first."""
        seen = len(self.lines())
        deadline = time.monotonic() + timeout
        while len(self.lines()) <= seen:
            if child.poll() is not None:
                return False
            if time.monotonic() > deadline:
                raise TimeoutError("the child made no progress")
            time.sleep(0.002)
        time.sleep(delay)
        if child.poll() is not None:
            return False
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        self.kills += 1
        return True

    def finish(self, child: subprocess.Popen[str], timeout: float = 60) -> str:
        out, err = child.communicate(timeout=timeout)
        if child.returncode != 0:
            raise AssertionError(f"child failed ({child.returncode}):\n{err}")
        return out.strip()

    def committed_nodes(self) -> set[str]:
        """Return the nodes with an after: checkpoint, read straight from the file."""
        if not self.db.exists():
            return set()
        with sqlite3.connect(self.db) as conn:
            return {row[0] for row in conn.execute("SELECT node_id FROM checkpoints WHERE step LIKE 'after:%'")}

    def counts(self, path: Path | None = None) -> Counter[str]:
        return Counter(self.lines(path))

    def integrity(self) -> str:
        with sqlite3.connect(self.db) as conn:
            return conn.execute("PRAGMA integrity_check").fetchone()[0]
