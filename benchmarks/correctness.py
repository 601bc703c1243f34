"""The double-approval race: two processes approve (resume) the same paused run at the same
moment. How many times does the side effect after the approval fire? Once is correct."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

OURS = """
import sys, time
import durable_nb as dnb

flow = dnb.Workflow("race", store="sqlite:///{folder}/ours.db")


@flow.node(retry_count=0)
def review(state):
    dnb.gate("send?")
    with open("{folder}/ours-effects.txt", "a") as handle:
        handle.write("sent\\n")
    return {{"sent": True}}


if __name__ == "__main__":
    if sys.argv[1] == "start":
        print(flow.run({{}}).id)
    else:
        while time.time() < float(sys.argv[3]):
            time.sleep(0.0005)
        try:
            flow.approve(sys.argv[2])
        except dnb.AlreadyResumed:
            pass
"""

LANGGRAPH = """
import sqlite3, sys, time
from typing import TypedDict
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt


class State(TypedDict, total=False):
    sent: bool


def review(state: State):
    interrupt("send?")
    with open("{folder}/langgraph-effects.txt", "a") as handle:
        handle.write("sent\\n")
    return {{"sent": True}}


graph = StateGraph(State)
graph.add_node("review", review)
graph.add_edge(START, "review")
graph.add_edge("review", END)
app = graph.compile(checkpointer=SqliteSaver(sqlite3.connect("{folder}/langgraph.db", check_same_thread=False)))

if __name__ == "__main__":
    config = {{"configurable": {{"thread_id": sys.argv[2]}}}}
    if sys.argv[1] == "start":
        app.invoke({{}}, config)
        print(sys.argv[2])
    else:
        while time.time() < float(sys.argv[3]):
            time.sleep(0.0005)
        app.invoke(Command(resume=True), config)
"""

# A DBOS user's human approval: the workflow publishes "awaiting approval" with set_event and blocks in
# DBOS.recv; an Approve click is DBOS.send to the workflow. The process that started the run goes away
# while it waits (os._exit: a plain exit would block on DBOS's non-daemon executor thread until recv times
# out), leaving the run PENDING under the default executor id "local". Each approver is an app server on
# its own machine: DBOS.launch() recovers that pending run (DBOS's recovery-on-launch, no explicit resume
# call), and at the shared instant it sends the approval and waits for the run to finish.
DBOS_RACE = """
import os, sys, threading, time
from dbos import DBOS, SetWorkflowID

DBOS(config={{"name": "race", "system_database_url": "sqlite:///{folder}/dbos.db", "log_level": "ERROR"}})


@DBOS.step()
def send_effect():
    with open("{folder}/dbos-effects.txt", "a") as handle:
        handle.write("sent\\n")


@DBOS.workflow()
def review():
    DBOS.set_event("status", "awaiting approval")
    if DBOS.recv("approval", timeout_seconds=3600):
        send_effect()
        return True
    return False


if __name__ == "__main__":
    DBOS.launch()
    if sys.argv[1] == "start":
        with SetWorkflowID(sys.argv[2]):
            DBOS.start_workflow(review)
        DBOS.get_event(sys.argv[2], "status", timeout_seconds=30)
        print(sys.argv[2], flush=True)
        os._exit(0)
    while time.time() < float(sys.argv[3]):
        time.sleep(0.0005)
    DBOS.send(sys.argv[2], True, topic="approval")
    deadline = time.time() + 60
    while DBOS.get_workflow_status(sys.argv[2]).status in ("PENDING", "ENQUEUED") and time.time() < deadline:
        time.sleep(0.05)
    DBOS.destroy()
    # Let a second copy of the run that is mid-step in this process finish its effect, then exit without
    # joining one that still blocks in recv (which would hang until its timeout).
    for thread in threading.enumerate():
        if thread.name.startswith("dbos-executor"):
            thread.join(timeout=5)
            if thread.is_alive():
                print("dbos: a copy of the run is still waiting in recv", file=sys.stderr, flush=True)
    os._exit(0)
"""


def _race(folder: Path, name: str, source: str, trials: int) -> list[int]:
    script = folder / f"{name}_race.py"
    script.write_text(textwrap.dedent(source.format(folder=folder)))
    effects = folder / f"{name}-effects.txt"
    counts = []
    for trial in range(trials):
        before = len(effects.read_text().splitlines()) if effects.exists() else 0
        run_id = subprocess.run(
            [sys.executable, str(script), "start", f"t{trial}"], capture_output=True, text=True, check=True
        ).stdout.split()[-1]
        moment = str(time.time() + 1.5)  # both processes start their approval at this instant
        racers = [subprocess.Popen([sys.executable, str(script), "approve", run_id, moment]) for _ in range(2)]
        for racer in racers:
            racer.wait(timeout=120)
        after = len(effects.read_text().splitlines()) if effects.exists() else 0
        counts.append(after - before)
    return counts


def correctness_scenario(trials: int) -> dict[str, Any]:
    """Run the race for each contender; report how often the side effect fired per approval race."""
    folder = Path(tempfile.mkdtemp(prefix="durable-nb-race-"))
    rows = [{"contender": "durable_nb", "effects_per_race": _race(folder, "ours", OURS, trials)}]
    try:
        import langgraph.checkpoint.sqlite  # noqa: F401

        rows.append(
            {"contender": "LangGraph SqliteSaver", "effects_per_race": _race(folder, "langgraph", LANGGRAPH, trials)}
        )
    except ImportError:
        pass
    try:
        import dbos  # noqa: F401

        rows.append({"contender": "DBOS", "effects_per_race": _race(folder, "dbos", DBOS_RACE, trials)})
    except ImportError:
        pass
    return {"scenario": "Two processes approve the same paused run at once", "trials": trials, "rows": rows}


def render_correctness(result: dict[str, Any]) -> str:
    """Format the race as a Markdown table."""
    lines = [f"**{result['scenario']}** ({result['trials']} races)", ""]
    lines += ["| contender | side effects per race | races with a double effect |", "|---|---|---:|"]
    for row in result["rows"]:
        doubled = sum(count > 1 for count in row["effects_per_race"])
        lines.append(f"| {row['contender']} | {row['effects_per_race']} | {doubled} |")
    return "\n".join(lines)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    print(render_correctness(correctness_scenario(int(sys.argv[1]) if len(sys.argv) > 1 else 5)))
