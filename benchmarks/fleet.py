"""Many servers, one store: ``durable-nb serve`` processes killed at random while runs go through.

N servers share one store (a SQLite file or PostgreSQL) and one notebooks folder. Workflow runs
(three nodes) and notebook runs (three cells) are started through any of them; meanwhile a
seeded random choice of servers is killed with SIGKILL and started again. Every node and cell
body appends a ``start`` and an ``end`` line (with the pid of the process running it: the
server for a node, the ``run-notebook`` process for a cell) to one log, so that what ran how
often can be counted afterwards; nothing is judged by time.

``python -m benchmarks.fleet [--runs 200] [--kills 12] [--store URL] [--seed 1]``
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "f" * 24
NODES = ("one", "two", "three")
CELLS = ("c1", "c2", "c3")

FLOWS = r"""
import os, time
import durable_nb as dnb

count = dnb.Workflow("count", store=os.environ["FLEET_STORE"])
LOG = os.environ["FLEET_LOG"]
PAUSE = float(os.environ.get("FLEET_PAUSE", "0.3"))


def mark(tag, node, event):
    fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"wf {tag} {node} {event} {os.getpid()}\n".encode())
    finally:
        os.close(fd)


def body(state, node):
    mark(state["tag"], node, "start")
    time.sleep(PAUSE)
    mark(state["tag"], node, "end")
    return {node: 1}


@count.node
def one(state):
    return body(state, "one")


@count.node(after="one")
def two(state):
    return body(state, "two")


@count.node(after="two")
def three(state):
    return body(state, "three")
"""


def _cell(log: Path, name: str, pause: float) -> str:
    # No function is defined: a cell restored in another kernel finds everything it needs here.
    line = f"f'nb {{tag}} {name} {{_event}} {{os.getppid()}}\\n'.encode()"
    opened = f"_fd = os.open({str(log)!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)"
    write = f"{opened}\nos.write(_fd, {line})\nos.close(_fd)"
    return f"import os, time\n_event = 'start'\n{write}\ntime.sleep({pause})\n_event = 'end'\n{write}"


def write_notebook(path: Path, log: Path, pause: float) -> None:
    """The notebook every notebook run runs (with its own ``tag``): three cells that log their bodies."""
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    notebook.cells = [nbformat.v4.new_code_cell("tag = 'none'", metadata={"tags": ["parameters"]})]
    notebook.cells += [nbformat.v4.new_code_cell(_cell(log, name, pause)) for name in CELLS]
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, str(path))


def free_port() -> int:
    """A TCP port of the loopback address free now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Served:
    """One ``durable-nb serve`` process of the fleet."""

    def __init__(self, fleet: Fleet, number: int) -> None:
        import durable_nb as dnb

        self.port = free_port()
        said = open(fleet.folder / f"server-{number}.log", "ab")
        command = [sys.executable, "-m", "durable_nb.cli", "serve", "--workflow", "fleet_flows:count"]
        command += ["--notebooks", str(fleet.notebooks), "--store", fleet.store, "--port", str(self.port)]
        command += ["--recover-every", str(fleet.recover_every)]
        self.process = subprocess.Popen(
            command, env=fleet.env, cwd=fleet.folder, stdin=subprocess.DEVNULL, stdout=said, stderr=said
        )
        said.close()
        self.client = dnb.Client(f"http://127.0.0.1:{self.port}", token=TOKEN)

    def up(self) -> bool:
        """True once the server answers; AssertionError if it exited."""
        import durable_nb as dnb

        try:
            self.client.runs(status="completed")
            return True
        except dnb.DurableError:
            if self.process.poll() is not None:
                raise AssertionError(f"server {self.process.pid} exited with {self.process.returncode}") from None
            return False

    def kill(self) -> None:
        """SIGKILL, as a machine losing power does to it (its notebook processes live on)."""
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=60)
        self.client.close()

    def stop(self) -> None:
        """Stop the server (SIGTERM, else SIGKILL)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=60)
        self.client.close()


@dataclass
class Report:
    """What one soak did and found."""

    workflows: int = 0
    notebooks: int = 0
    kills: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    executions: int = 0  # node and cell bodies started
    reruns: int = 0  # bodies started again after the process running them was killed
    launches: int = 0  # notebook processes started by the servers
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The figures, for a person or a JSON file."""
        return {k: v for k, v in self.__dict__.items() if k != "problems"} | {"problems": self.problems[:20]}


class Fleet:
    """N servers on one store and one notebooks folder, and the runs started through them."""

    def __init__(self, folder: Path, store: str, servers: int = 3, recover_every: float = 0.5, pause: float = 0.3):
        self.folder = folder
        self.store = store
        self.size = servers
        self.recover_every = recover_every
        self.notebooks = folder / "notebooks"
        self.log = folder / "bodies.log"
        self.log.touch()
        (folder / "fleet_flows.py").write_text(FLOWS)
        write_notebook(self.notebooks / "count.ipynb", self.log, pause)
        (folder / "tmp").mkdir(exist_ok=True)
        self.env = dict(
            os.environ,
            FLEET_STORE=store,
            FLEET_LOG=str(self.log),
            FLEET_PAUSE=str(pause),
            DURABLE_NB_TOKENS=f"fleet:admin:{TOKEN}",
            DURABLE_NB_LEASE_SECONDS="5",
            TMPDIR=str(folder / "tmp"),  # kernels' socket folders, left behind by no one else's
            PYTHONPATH=os.pathsep.join([str(ROOT), str(folder), os.environ.get("PYTHONPATH", "")]),
        )
        self.servers: list[Served] = []
        self.started = 0
        self.killed: set[int] = set()
        self.runs: dict[str, tuple[str, str]] = {}  # run id: (kind, tag)

    def start(self) -> None:
        """Start the servers and wait until each answers."""
        self.servers = [self._new() for _ in range(self.size)]
        for server in self.servers:
            until(server.up, "a server to answer", 180)

    def _new(self) -> Served:
        self.started += 1
        return Served(self, self.started)

    def kill_one(self, rng: random.Random) -> bool:
        """SIGKILL a server picked by ``rng`` among those that answer, and start another in its place;
        False if none answers yet (all are starting)."""
        serving = [i for i, server in enumerate(self.servers) if server.up()]
        if not serving:
            return False
        index = rng.choice(serving)
        victim = self.servers[index]
        self.killed.add(victim.process.pid)
        victim.kill()
        self.servers[index] = self._new()
        return True

    def submit(self, kind: str, tag: str, rng: random.Random) -> None:
        """Start one run through a live server (another if that one is down); the same tag is the same run."""
        import durable_nb as dnb

        said: Exception | None = None
        end = time.monotonic() + 300  # servers start slowly on a loaded machine
        while time.monotonic() < end:
            server = rng.choice(self.servers)
            try:
                if kind == "wf":
                    found = server.client.run("count", {"tag": tag}, idempotency_key=f"fleet-{tag}")
                else:
                    found = server.client.start_notebook("count.ipynb", {"tag": tag})
                self.runs[found["id"]] = (kind, tag)
                return
            except (dnb.DurableError, OSError) as error:
                said = error
                time.sleep(0.2)  # down or starting: the next try picks a server again
        raise AssertionError(f"no server took run {tag}: {said!r}")

    def statuses(self) -> dict[str, str]:
        """Each run's status, read from the store."""
        from durable_nb._loop import run_sync
        from durable_nb.store import resolve_store

        store = resolve_store(self.store)
        return {run.run_id: run.status.value for run in run_sync(store.list_runs()) if run.run_id in self.runs}

    def stop(self) -> None:
        """Stop the servers (SIGTERM)."""
        for server in self.servers:
            server.stop()


def until(look: Any, what: str, deadline: float) -> Any:
    """Poll ``look`` until it returns something truthy; AssertionError naming ``what`` past ``deadline`` s."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = look()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}")


def soak(
    folder: Path,
    store: str,
    *,
    workflows: int,
    notebooks: int,
    kills: int,
    seed: int = 1,
    servers: int = 3,
    window: int = 12,
    deadline: float = 1800.0,
) -> Report:
    """Run the soak; ``window`` runs at most are started ahead of those completed."""
    rng = random.Random(seed)
    fleet = Fleet(folder, store, servers)
    report = Report(workflows=workflows, notebooks=notebooks)
    began = time.monotonic()
    todo = [("wf", f"w{i}") for i in range(workflows)] + [("nb", f"n{i}") for i in range(notebooks)]
    rng.shuffle(todo)
    fleet.start()
    try:
        end = time.monotonic() + deadline
        next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
        status: dict[str, str] = {}
        while time.monotonic() < end:
            # Runs go in as others finish, so that kills land on workflows and notebooks alike.
            in_flight = sum(1 for run in fleet.runs if status.get(run) != "completed")
            while todo and in_flight < window:
                kind, tag = todo.pop(0)
                fleet.submit(kind, tag, rng)
                in_flight += 1
            status = fleet.statuses()
            finished = len(status) == len(fleet.runs) and all(
                s in ("completed", "failed", "cancelled") for s in status.values()
            )
            if not todo and finished:
                break
            if report.kills < kills and time.monotonic() >= next_kill and fleet.kill_one(rng):
                report.kills += 1
                next_kill = time.monotonic() + rng.uniform(1.0, 3.0)
            time.sleep(0.2)
        report.statuses = dict(sorted(_counts(fleet.statuses().values()).items()))
    finally:
        fleet.stop()
    report.seconds = round(time.monotonic() - began, 1)
    check(fleet, report)
    return report


def _counts(values: Any) -> dict[str, int]:
    found: dict[str, int] = defaultdict(int)
    for value in values:
        found[value] += 1
    return found


def check(fleet: Fleet, report: Report) -> None:
    """Count what ran and write each broken promise into ``report.problems``."""
    status = fleet.statuses()
    for run_id, (kind, tag) in fleet.runs.items():
        if status.get(run_id) != "completed":
            report.problems.append(f"{kind} run {tag} ({run_id}) is {status.get(run_id)}")
    # (kind, tag, body) -> [pid that started it, finished?] in the order they started
    runs: dict[tuple[str, str, str], list[list[Any]]] = defaultdict(list)
    order: dict[str, list[int]] = defaultdict(list)  # a notebook's tag: the processes that ran its cells, in order
    for line in fleet.log.read_text().splitlines():
        kind, tag, body, event, pid_text = line.split()
        pid = int(pid_text)
        executions = runs[(kind, tag, body)]
        if event == "start":
            executions.append([pid, False])
            report.executions += 1
            if kind == "nb":
                order[tag].append(pid)
        else:
            started = [e for e in executions if e[0] == pid and not e[1]]
            if not started:
                report.problems.append(f"{kind} {tag} {body}: an end without a start in {pid}")
            else:
                started[-1][1] = True
    for (kind, tag, body), executions in sorted(runs.items()):
        *before, last = executions
        if not last[1]:
            report.problems.append(f"{kind} {tag} {body}: its last run (in {last[0]}) did not finish")
        for pid, _ in before:
            report.reruns += 1
            if pid not in fleet.killed:
                report.problems.append(f"{kind} {tag} {body} ran again though process {pid} was not killed")
        pids = [pid for pid, _ in before]
        if len(set(pids)) != len(pids):
            report.problems.append(f"{kind} {tag} {body} ran twice in one killed process")
    for kind, tag in fleet.runs.values():
        for body in NODES if kind == "wf" else CELLS:
            if (kind, tag, body) not in runs:
                report.problems.append(f"{kind} {tag} {body} never ran")
    for tag, pids in order.items():
        # The processes that ran one notebook's cells take turns, never at once: one's lines end before the next's.
        seen: list[int] = []
        for pid in pids:
            if not seen or seen[-1] != pid:
                if pid in seen:
                    report.problems.append(f"nb {tag}: processes {seen} and {pid} ran its cells at the same time")
                seen.append(pid)
    _check_outputs(fleet, report)


def _check_outputs(fleet: Fleet, report: Report) -> None:
    for run_id, (kind, tag) in fleet.runs.items():
        if kind != "nb":
            continue
        output = fleet.notebooks / ".durable-nb-outputs" / f"count-{run_id}.ipynb"
        log = output.with_suffix(".log")
        said = log.read_text(errors="replace") if log.exists() else ""
        report.launches += sum(1 for line in said.splitlines() if line.startswith("-- "))
        if "attached to another live kernel" in said:
            # A notebook process got as far as a kernel (and so writes the output) while another held the run.
            report.problems.append(f"nb {tag}: a second process started a kernel for it while another worked on it")
        try:
            cells = json.loads(output.read_text())["cells"]
        except (OSError, ValueError, KeyError) as error:
            report.problems.append(f"nb {tag}: no whole output notebook ({error})")
            continue
        if sum(1 for cell in cells if cell["cell_type"] == "code") < len(CELLS) + 1:
            report.problems.append(f"nb {tag}: its output lacks cells")


def main(argv: list[str] | None = None) -> int:
    """Run the soak from the command line; print its figures as JSON; exit 1 if a promise broke."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fleet", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs in all, half of them notebooks' (default 200)")
    parser.add_argument("--kills", type=int, default=12, help="servers killed with SIGKILL along the way")
    parser.add_argument("--servers", type=int, default=3)
    parser.add_argument("--store", default=None, help="a postgresql:// URL (default: a SQLite file)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--window", type=int, default=12, help="runs at most in flight at once")
    parser.add_argument("--keep", action="store_true", help="keep the folder (logs, outputs, store) and say where")
    args = parser.parse_args(argv)
    kept = tempfile.mkdtemp(prefix="durable-nb-fleet-") if args.keep else None
    with contextlib.nullcontext(kept) if kept else tempfile.TemporaryDirectory(prefix="durable-nb-fleet-") as temporary:
        folder = Path(temporary)
        print(f"working in {folder}", file=sys.stderr)
        store = args.store or f"sqlite:///{folder}/runs.db"
        notebooks = args.runs // 2
        report = soak(
            folder,
            store,
            workflows=args.runs - notebooks,
            notebooks=notebooks,
            kills=args.kills,
            seed=args.seed,
            servers=args.servers,
            window=args.window,
        )
    print(json.dumps(report.as_json(), indent=2))
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
