"""An agent in a %%durable cell, in real Jupyter kernels (issue 16): killed mid-exchange, Run All goes on.

The first kernel's agent is killed (SIGKILL, by the scripted model server) in the middle of its
fourth model request. Run All in a new kernel shows the answered turns as restored from the
store, asks the model only from the turn in flight, and never runs a finished tool call again.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from agentkit import ModelServer, Script
from kernelkit import Kernel

# Real kernels on SQLite: the kernel's PostgreSQL case is in test_kernels.py, the store's in the conformance tests.
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]


@pytest.fixture
def server() -> Iterator[ModelServer]:
    running = ModelServer(Script(turns=6, calls_per_turn=1, tools=("lookup",)))
    yield running
    running.close()


def _cells(server: ModelServer, side: Path) -> list[str]:
    setup = (
        "%load_ext durable_nb\n"
        "import durable_nb as dnb, openai, os\n"
        "%durable run agent-nb\n"
        f"client = openai.OpenAI(base_url={server.url + '/v1'!r}, api_key='t', max_retries=0,\n"
        "                       default_headers={'x-kill-pid': str(os.getpid())})\n"
        "def lookup(turn: int, k: int) -> str:\n"
        '    """Look something up."""\n'
        f"    open({str(side)!r}, 'a').write(f'{{turn}},{{k}}\\n')\n"
        "    return f'found {turn}'\n"
    )
    ask = "%%durable ask\nreply = dnb.agent(client, 'Go.', [lookup], model='scripted')\nprint(reply.text)"
    return [setup, ask, "%durable end"]


def test_run_all_after_a_kill_continues_at_the_turn_in_flight(
    server: ModelServer, tmp_path: Path, store_url: str
) -> None:
    side = tmp_path / "side.txt"
    cells = _cells(server, side)
    server.kill_at = {3}
    first = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        first.run_all(cells[:2], timeout=120)
    finally:
        first.close()
    assert server.killed == [3]
    second = Kernel(tmp_path, env={"DURABLE_NB_STORE": store_url})
    try:
        results = second.run_all(cells, timeout=120)
    finally:
        second.close()
    assert all(r.status == "ok" for r in results), [r.text for r in results]
    output = results[1].text
    assert "done after 6 turns" in output
    assert "restored from the store" in output and "(stored)" in output
    # Turns 0-2 were answered before the kill: never asked again; turn 3 was in flight: asked twice.
    assert [server.requests[("openai", t)] for t in range(6)] == [1, 1, 1, 2, 1, 1]
    assert side.read_text().split() == [f"{t},0" for t in range(5)]
