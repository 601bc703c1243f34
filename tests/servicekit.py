"""A real ``durable-nb serve`` for tests: its workflows, tokens, and the server as a subprocess."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import durable_nb as dnb

__all__ = ["ADMIN", "DECIDER", "FLOWS", "READER", "TOKENS", "Server", "free_port"]

ROOT = Path(__file__).resolve().parent.parent
ADMIN, DECIDER, READER = "a" * 24, "d" * 24, "r" * 24
TOKENS = f"ops:admin:{ADMIN},ana:decide:{DECIDER},viewer:read:{READER}"

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


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """``durable-nb serve`` as a subprocess."""

    def __init__(self, folder: Path, store: str, port: int) -> None:
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
            ],
            env=env,
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        self.client = dnb.Client(f"http://127.0.0.1:{port}", token=ADMIN)
        for _ in range(600):
            try:
                self.client.runs()
                return
            except dnb.DurableError:
                if self.process.poll() is not None:
                    raise AssertionError(self.process.stderr.read().decode()[-2000:]) from None
                time.sleep(0.05)
        raise AssertionError("the server did not start")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self.client.close()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        self.client.close()
