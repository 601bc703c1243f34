"""The service: requests per second, and from an approval to the next node starting.

``durable-nb serve`` (uvicorn, SQLite store) against the nearest peer equivalent: a FastAPI app
on uvicorn whose endpoints call DBOS (``start_workflow``, ``get_workflow_status``, and for the
approval ``DBOS.send`` to a workflow waiting in ``DBOS.recv``), on DBOS's SQLite system
database. Each server runs in its own process; the load comes from 8 concurrent httpx clients.

``python -m benchmarks.service [--requests 400] [--approvals 20]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CONCURRENCY = 8

OURS = r"""
import os, time
import durable_nb as dnb

STORE = os.environ["BENCH_STORE"]
STAMPS = os.environ["BENCH_STAMPS"]
quick = dnb.Workflow("quick", store=STORE)


@quick.node
def one(state):
    return {"done": True}


gated = dnb.Workflow("gated", store=STORE)


@gated.node
def ask(state):
    return {"decision": dnb.gate("go?").approved}


@gated.node(after="ask")
def after(state):
    with open(os.path.join(STAMPS, state["tag"]), "w") as stamp:
        stamp.write(repr(time.time()))
    return {}
"""

PEER = r"""
import os, time, uuid
from dbos import DBOS, SetWorkflowID
from fastapi import FastAPI, Header

DBOS(config={"name": "bench-service", "system_database_url": os.environ["BENCH_DBOS"], "log_level": "ERROR"})
STAMPS = os.environ["BENCH_STAMPS"]


@DBOS.step()
def one():
    return True


@DBOS.workflow()
def quick():
    return one()


@DBOS.workflow()
def gated(tag):
    one()
    DBOS.recv("approve")
    with open(os.path.join(STAMPS, tag), "w") as stamp:
        stamp.write(repr(time.time()))


app = FastAPI()


@app.on_event("startup")
def launch():
    DBOS.launch()


@app.post("/api/workflows/{name}/runs")
def start(name: str, body: dict, idempotency_key: str | None = Header(default=None)):
    workflow_id = idempotency_key or str(uuid.uuid4())
    with SetWorkflowID(workflow_id):
        handle = DBOS.start_workflow(quick) if name == "quick" else DBOS.start_workflow(gated, body["input"]["tag"])
    return {"id": handle.get_workflow_id(), "status": "pending"}


@app.get("/api/runs/{run_id}")
def status(run_id: str):
    found = DBOS.get_workflow_status(run_id)
    return {"run_id": run_id, "status": found.status if found else None}


@app.post("/api/runs/{run_id}/approve")
def approve(run_id: str, body: dict):
    DBOS.send(run_id, "ok", "approve")
    return {"id": run_id}
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(kind: str, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(folder), os.environ.get("PYTHONPATH", "")]))
    env.update(
        BENCH_STORE=f"sqlite:///{folder}/ours.db", BENCH_DBOS=f"sqlite:///{folder}/dbos.db", BENCH_STAMPS=str(folder)
    )
    if kind == "durable_nb":
        (folder / "bench_flows.py").write_text(OURS)
        command = [
            sys.executable,
            "-m",
            "durable_nb.cli",
            "serve",
            "--workflow",
            "bench_flows:quick",
            "--workflow",
            "bench_flows:gated",
            "--store",
            env["BENCH_STORE"],
            "--no-auth",
            "--port",
            str(port),
        ]
    else:
        (folder / "bench_peer.py").write_text(PEER)
        command = [sys.executable, "-m", "uvicorn", "bench_peer:app", "--port", str(port), "--log-level", "warning"]
    process = subprocess.Popen(command, env=env, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    import httpx

    for _ in range(600):
        try:
            httpx.get(f"{url}/api/runs/none", timeout=1)
            return process, url
        except httpx.HTTPError:
            time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"{kind} server did not start")


async def _rate(url: str, count: int, request: Any) -> float:
    """Requests per second of ``count`` requests from CONCURRENCY clients."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        queue = list(range(count))

        async def worker() -> None:
            while queue:
                index = queue.pop()
                response = await request(client, index)
                response.raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
        return count / (time.perf_counter() - started)


async def _approval_latency(url: str, folder: Path, runs: int) -> float:
    """Median seconds from sending an approval to the gated workflow's next node starting."""
    import httpx

    waits = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for _ in range(runs):
            tag = uuid.uuid4().hex
            started = await client.post("/api/workflows/gated/runs", json={"input": {"tag": tag}})
            run_id = started.json()["id"]
            for _ in range(2000):
                status = (await client.get(f"/api/runs/{run_id}")).json()["status"]
                if status in ("paused", "PENDING"):  # ours waits at the gate; DBOS's waits in recv
                    break
                await asyncio.sleep(0.005)
            await asyncio.sleep(0.05)  # both are now waiting for the message
            sent = time.time()
            await client.post(f"/api/runs/{run_id}/approve", json={"approved": True})
            stamp = folder / tag
            for _ in range(4000):
                if stamp.exists() and stamp.read_text():
                    break
                await asyncio.sleep(0.002)
            waits.append(float(stamp.read_text()) - sent)
    return statistics.median(waits)


def measure(kind: str, requests: int, approvals: int) -> dict[str, Any]:
    """The four rates and the approval latency of one server."""
    with tempfile.TemporaryDirectory(prefix=f"dnb-service-{kind}-") as temp:
        folder = Path(temp)
        process, url = _start(kind, folder)
        try:
            import httpx

            # A first run warms the server up, and is the one whose status is asked for.
            known = httpx.post(f"{url}/api/workflows/quick/runs", json={"input": {}}, timeout=60).json()["id"]
            time.sleep(0.5)
            row = {
                "contender": kind,
                "get_per_s": asyncio.run(_rate(url, requests, lambda c, i: c.get(f"/api/runs/{known}"))),
                "start_per_s": asyncio.run(
                    _rate(url, requests, lambda c, i: c.post("/api/workflows/quick/runs", json={"input": {}}))
                ),
                "start_new_key_per_s": asyncio.run(
                    _rate(
                        url,
                        requests,
                        lambda c, i: c.post(
                            "/api/workflows/quick/runs",
                            json={"input": {}},
                            headers={"Idempotency-Key": uuid.uuid4().hex},
                        ),
                    )
                ),
                "start_repeated_key_per_s": asyncio.run(
                    _rate(
                        url,
                        requests,
                        lambda c, i: c.post(
                            "/api/workflows/quick/runs", json={"input": {}}, headers={"Idempotency-Key": "same"}
                        ),
                    )
                ),
                "approve_to_next_node_ms": asyncio.run(_approval_latency(url, folder, approvals)) * 1000,
            }
        finally:
            process.terminate()
            process.wait(timeout=30)
    return row


def render(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    lines = [
        f"**The service** ({CONCURRENCY} concurrent clients; requests per second, and the median time from an "
        "approval to the next node starting)",
        "",
        "| server | GET run/s | start/s | start, new key/s | start, repeated key/s | approve → next node ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['contender']} | {row['get_per_s']:.0f} | {row['start_per_s']:.0f} | "
            f"{row['start_new_key_per_s']:.0f} | {row['start_repeated_key_per_s']:.0f} | "
            f"{row['approve_to_next_node_ms']:.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Measure durable_nb's server and the DBOS + FastAPI peer; print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--approvals", type=int, default=20)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    contenders = ["durable_nb"]
    try:
        import dbos  # noqa: F401

        contenders.append("dbos")
    except ImportError:
        pass
    rows = [measure(kind, args.requests, args.approvals) for kind in contenders]
    print(render(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
