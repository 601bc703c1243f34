"""A real ``durable-nb serve`` for tests: its workflows, tokens, and the server as a subprocess."""

from __future__ import annotations

import importlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest

import durable_nb as dnb

__all__ = [
    "ADMIN",
    "BASE",
    "DECIDER",
    "FLOWS",
    "READER",
    "TOKENS",
    "Server",
    "Servers",
    "free_port",
    "gate_form",
    "load_flows",
    "stranded_in_work",
    "until",
]

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
ADMIN, DECIDER, READER = "a" * 24, "d" * 24, "r" * 24
TOKENS = f"ops:admin:{ADMIN},ana:decide:{DECIDER},viewer:read:{READER}"
# Where tests reach an app in process (Starlette's TestClient): a loopback name, which the
# Host allow-list answers without configuration, and the origin the pages' forms come from.
BASE = "http://127.0.0.1"

FLOWS = """
import os, time, pathlib
import durable_nb as dnb

STORE = os.environ["SERVICE_STORE"]
SIDE = pathlib.Path(os.environ["SERVICE_SIDE"])

gated = dnb.Workflow("gated", store=STORE)


@gated.node
def draft(state):
    return {"draft": "hello " + state.get("who", "world")}


@gated.node(after="draft")
def publish(state):
    decision = dnb.gate("publish?", {"draft": state["draft"]})
    return {"published": decision.approved, "by": decision.by}


slow = dnb.Workflow("slow", store=STORE)


@slow.node
def first(state):
    with open(SIDE, "a") as side:
        side.write("first\\n")
    return {"one": 1}


@slow.node(after="first")
def work(state):
    with open(SIDE, "a") as side:
        side.write("work\\n")
    release = SIDE.with_name("release")
    deadline = time.monotonic() + 120
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return {"two": 2}
"""


DEADLINE = 240.0  # seconds: kernels and servers start slowly on a busy machine


def until(look: Callable[[], T | None], what: str, deadline: float = DEADLINE) -> T:
    """Poll ``look`` until it returns something truthy; fail saying ``what`` was awaited."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        found = look()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"gave up waiting for {what}")


def gate_form(page: str, run_id: str) -> dict[str, str]:
    """The hidden fields (csrf, node) of the approvals page's form for ``run_id``'s gate."""
    section = page.split(f"data-run='{run_id}'", 1)[1].split("</section>", 1)[0]
    return dict(re.findall(r"<input type='hidden' name='(\w+)' value='([^']*)'>", section))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """``durable-nb serve`` as a subprocess (port 0: one the server picks and announces)."""

    def __init__(self, folder: Path, store: str, port: int = 0, options: Sequence[str] = ()) -> None:
        env = dict(os.environ, SERVICE_STORE=store, SERVICE_SIDE=str(folder / "side.txt"), DURABLE_NB_TOKENS=TOKENS)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(folder), env.get("PYTHONPATH", "")])
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "durable_nb.cli",
                "serve",
                "--workflow",
                "service_flows:gated",
                "--workflow",
                "service_flows:slow",
                "--store",
                store,
                "--port",
                str(port),
                "--recover-every",
                "1",
                *options,
            ],
            env=env,
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.announced = self._announcement()
        self.url = self.announced[0].split("listening on ", 1)[1].split()[0]
        self.client = dnb.Client(self.url, token=ADMIN)
        for _ in range(600):
            try:
                self.client.runs()
                return
            except dnb.DurableError:
                if self.process.poll() is not None:
                    raise AssertionError(self.process.stderr.read()[-2000:]) from None  # type: ignore[union-attr]
                time.sleep(0.05)
        raise AssertionError("the server did not start")

    def _announcement(self) -> list[str]:
        """The lines the server prints once it listens, up to the one naming the hosts it answers."""
        lines: list[str] = []
        while not lines or not lines[-1].startswith("  answers requests"):
            line = self.process.stdout.readline()  # type: ignore[union-attr]
            if not line:
                raise AssertionError(f"the server exited: {self.process.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            lines.append(line.rstrip("\n"))
        return lines

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.client.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.client.close()


class Servers:
    """The real servers a test starts on one folder and store (``FLOWS`` written there), each on a port of its own."""

    def __init__(self, folder: Path, store: str) -> None:
        (folder / "service_flows.py").write_text(FLOWS)
        self.folder = folder
        self.store = store
        self.started: list[Server] = []

    def __call__(self, *options: str) -> Server:
        server = Server(self.folder, self.store, free_port(), options)
        self.started.append(server)
        return server

    def stop(self) -> None:
        for server in self.started:
            server.stop()


def stranded_in_work(start: Servers, folder: Path) -> tuple[Path, str]:
    """Start a 'slow' run in a server and kill the server (SIGKILL) in the middle of node 'work'."""
    side = folder / "side.txt"
    first = start()
    run_id = first.client.run("slow")["id"]
    for _ in range(600):
        if side.exists() and "work" in side.read_text():
            break
        time.sleep(0.05)
    first.kill()
    (folder / "release").touch()  # the node's next run may finish
    return side, run_id


def load_flows(folder: Path, store_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Import ``FLOWS`` afresh from ``folder`` on ``store_url``, for an app in this process."""
    monkeypatch.setenv("SERVICE_STORE", store_url)
    monkeypatch.setenv("SERVICE_SIDE", str(folder / "side.txt"))
    (folder / "release").touch()
    (folder / "service_flows.py").write_text(FLOWS)
    monkeypatch.syspath_prepend(str(folder))
    return importlib.reload(importlib.import_module("service_flows"))
