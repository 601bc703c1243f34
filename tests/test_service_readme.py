"""The service examples of the README and of the docs' service how-to run as written: their shell
and Python blocks, against the server their first block starts.

The blocks are read from README.md's service section and from docs/how-to/service.md, and run
unchanged but for the port (8000 becomes a free one) and the ``pip install`` line (the package is
installed already); the workflow ``app.flows:triage`` they name is a small one written here. Where
a page shows the server's first lines, they must be the ones it prints.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from servicekit import ROOT, free_port

pytest.importorskip("fastapi", reason="the service needs the serve extra (fastapi, uvicorn)")

# Each page with its service examples, and the heading they follow (None: the whole page).
PAGES = {"README.md": "## The service", "docs/how-to/service.md": None}
TRIAGE = """
import durable_nb as dnb

triage = dnb.Workflow("triage")


@triage.node()
def classify(state):
    return {"category": "billing"}


@triage.node(after="classify")
def review(state):
    decision = dnb.gate("refund?", {"ticket": state["ticket"]})
    return {"approved": decision.approved}
"""


def _blocks(page: str) -> list[tuple[str, str]]:
    """The fenced blocks of a page's service examples: (language, text)."""
    text = (ROOT / page).read_text()
    heading = PAGES[page]
    section = text if heading is None else text.split(heading + "\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```(\w+)\n(.*?)```", section, re.DOTALL)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, object]]:
    if shutil.which("curl") is None:
        pytest.skip("the README's examples use curl")
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__init__.py").write_text("")
    (tmp_path / "app" / "flows.py").write_text(TRIAGE)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])  # durable-nb, python
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(tmp_path), env.get("PYTHONPATH", "")])
    env.pop("DURABLE_NB_TOKENS", None)
    yield {"folder": tmp_path, "env": env, "port": str(free_port())}


@pytest.mark.parametrize("page", list(PAGES))
def test_the_service_examples_run_as_written(page: str, world: dict[str, object]) -> None:
    blocks = _blocks(page)
    start, shown, shell, python = (
        next((b for lang, b in blocks if lang == kind and (marker in b)), "")
        for kind, marker in (("bash", "durable-nb serve"), ("text", "listening on"), ("bash", "curl"), ("python", ""))
    )
    assert start and shell, f"{page} shows no server start or no curl calls"
    port, folder, env = str(world["port"]), Path(str(world["folder"])), dict(world["env"])  # type: ignore[call-overload]
    lines = [line.replace("8000", port) for line in start.splitlines() if not line.startswith("pip install")]
    assert lines[-1].startswith("durable-nb serve ")
    # The setup lines as written, then the server (exec: stopping the shell stops the server).
    script = "\n".join([*lines[:-1], 'printf "%s\\n" "$TOKEN"', "exec " + lines[-1]])
    server = subprocess.Popen(
        ["bash", "-euc", script], cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        token = server.stdout.readline().strip()  # type: ignore[union-attr]
        assert len(token) >= 16, server.stderr.read()  # type: ignore[union-attr]
        # The server prints its first line once it listens: the calls wait for it, shown or not.
        expected = [line.replace("8000", port) for line in shown.strip().splitlines()] or ["listening on"]
        printed = [server.stdout.readline().rstrip("\n") for _ in expected]  # type: ignore[union-attr]
        if shown:
            assert printed == expected
        else:
            assert "listening on" in printed[0], printed
        env["TOKEN"] = token

        def run(*command: str) -> str:
            ran = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=240)
            assert ran.returncode == 0, ran.stderr
            return ran.stdout

        said = run("bash", "-euo", "pipefail", "-c", shell.replace("8000", port))
        assert '"status":"' in said and '"approved":true' in said, said
        if python:
            run(sys.executable, "-c", python.replace("8000", port))
    finally:
        server.terminate()
        server.wait(timeout=60)
