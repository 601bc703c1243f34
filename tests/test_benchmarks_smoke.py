"""The benchmark harness runs end to end at tiny sizes (the real run is `python -m benchmarks`)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import env_with_repo

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.slow, pytest.mark.sqlite_only]


def _run(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m module args`` from the repository, with its output."""
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env_with_repo(),
    )


def test_smoke_run_writes_tables_and_json(tmp_path: Path) -> None:
    """README Benchmarks: every scenario reports medians and ratios against durable_nb and the floor."""
    out = tmp_path / "results.json"
    result = _run("benchmarks", "--smoke", "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "x floor" in result.stdout
    data = json.loads(out.read_text())
    assert [r["scenario"] for r in data["results"]] == [
        "Per-node overhead, small state",
        "Unchanged 1 MB value carried through the chain",
    ]
    for scenario in data["results"]:
        names = {row["contender"] for row in scenario["rows"]}
        assert {"floor (INSERT+COMMIT, FULL)", "durable_nb (synchronous=FULL)"} <= names
        ours = next(r for r in scenario["rows"] if r["contender"] == "durable_nb (synchronous=FULL)")
        assert ours["vs_durable_nb"] == 1.0 and ours["ms_per_node"] > 0
    carried = data["results"][1]["rows"]
    ours = next(r for r in carried if r["contender"] == "durable_nb (synchronous=FULL)")
    assert ours["growth_bytes_per_run"] < 1_000_000  # the 1 MB value is never written again
    # Cost by run size: every size measured, start and end of the run, listings, the notebook.
    scale = data["scale"]
    assert [(row["shape"], row["size"]) for row in scale["rows"]] == [
        ("chain", 10),
        ("chain", 40),
        ("map", 10),
        ("map", 40),
    ]
    for row in scale["rows"]:
        assert row["start_ms"] > 0 and row["end_ms"] > 0 and row["bytes_per_checkpoint"] > 0, row
        assert row["history_rows"] >= row["size"], row
    assert scale["notebook"]["cells"] == 12
    assert "Cost by run size" in result.stdout
    # Agents: killed at random points, durable_nb finishes and redoes at most the call in flight per kill.
    (ours_agent,) = data["agents"]["rows"]
    assert ours_agent["contender"] == "durable_nb" and ours_agent["finished"], ours_agent
    assert ours_agent["kills"] == 3 and ours_agent["refused"] == 0, ours_agent
    assert ours_agent["model_calls_redone"] + ours_agent["tool_calls_redone"] <= ours_agent["kills"], ours_agent
    assert "paid calls redone after a crash" in result.stdout
    # LangGraph savers: the same graphs under SqliteSaver (when installed) and DurableSaver, every measure.
    saver = data["saver"]
    expected = ["DurableSaver (SQLite)"]
    if importlib.util.find_spec("langgraph.checkpoint.sqlite"):
        expected.insert(0, "LangGraph SqliteSaver")
    for table in saver["per_step"]:
        assert [row["checkpointer"] for row in table["rows"]] == expected, table
        assert table["rows"][0]["vs_reference"] == 1.0 and all(row["ms_per_step"] > 0 for row in table["rows"])
    ours = next(r for r in saver["per_step"][1]["rows"] if r["checkpointer"] == "DurableSaver (SQLite)")
    assert ours["growth_bytes_per_run"] < 3_000_000  # the 1 MB value stored per run, not per step
    assert [row["checkpoints"] for row in saver["history"]["rows"]] == [50] * len(expected)
    # Both racers ran; how many side effects each race had is reported, not asserted.
    for row in saver["race"]["rows"]:
        assert len(row["effects_per_race"]) == 1 and row["effects_per_race"][0] >= 1, row
    assert "Two processes resume the same interrupt at once" in result.stdout
    # Dask: a durable map on a 2-worker cluster against Dask alone and one process; each durable run's
    # history was read back (whether every item was committed once is reported, not asserted).
    if importlib.util.find_spec("distributed"):
        dask = data["dask"]
        assert dask["workers"] == 2 and dask["startup_s"] > 0 and dask["loops"] > 0, dask
        assert [row["contender"] for row in dask["cpu"]["rows"]] == [
            "durable_nb in 1 process, max_concurrency=1",
            "durable_nb in 1 process, 8 threads (default)",
            "durable_nb on Dask, 2 workers",
            "Dask alone (client.map + as_completed)",
        ]
        assert len(dask["trivial"]["rows"]) == 4  # SQLite only in the smoke run
        for table in (dask["cpu"], dask["trivial"]):
            assert table["items"] == 20
            for row in table["rows"]:
                assert row["items_per_s"] > 0, row
                if row["contender"].startswith("durable_nb"):
                    assert row["committed"]["runs"] == 2 and row["committed"]["checkpoints_per_run"], row
        assert "A map on a 2-worker Dask LocalCluster" in result.stdout


@pytest.mark.skipif(importlib.util.find_spec("langgraph") is None, reason="LangGraph is not installed")
def test_profile_prints_where_a_node_and_a_saver_step_spend_their_time() -> None:
    """`python -m benchmarks.profile`: phases and areas, per workflow node and per saver step."""
    result = _run("benchmarks.profile", "--runs", "1")
    assert result.returncode == 0, result.stderr
    assert "**One workflow node**" in result.stdout
    assert "**One LangGraph step with DurableSaver**" in result.stdout
    for phase in (
        "| node (whole process) | 1.00 |",
        "| step (whole process) | 1.00 |",
        "| saver.put |",
        "store: commit",
    ):
        assert phase in result.stdout, phase
    assert result.stdout.count("| area (cProfile own CPU time) |") == 2


@pytest.mark.skipif(importlib.util.find_spec("langgraph") is None, reason="LangGraph is not installed")
def test_saver_counts_print_calls_statements_and_frames_per_step_and_checkpoint() -> None:
    """`python -m benchmarks.saver_counts`: counts, side by side, per chain step and per checkpoint."""
    result = _run("benchmarks.saver_counts", "--runs", "1", "--checkpoints", "20")
    assert result.returncode == 0, result.stderr
    assert "**Counted per step (50-node chain, 1 runs)**" in result.stdout
    assert "**Counted per checkpoint (a thread of 20)**" in result.stdout
    for row in ("| put Python calls |", "| put_writes statements |", "| WAL frames |", "| list Python calls"):
        assert row in result.stdout, row
    # A put of DurableSaver is one transaction: BEGIN, the run's row, values, the checkpoint, COMMIT.
    line = next(line for line in result.stdout.splitlines() if line.startswith("| put statements |"))
    assert float(line.rstrip(" |").rsplit("|", 1)[1]) <= 6.5, line


@pytest.mark.skipif(shutil.which("callgrind_control") is None, reason="valgrind is not installed")
def test_cell_counts_print_what_attaching_and_a_no_change_cell_add() -> None:
    """`python -m benchmarks.cell_counts`: instructions counted in real kernels under callgrind."""
    result = _run("benchmarks.cell_counts", "--cells", "1", "--imports", "")
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("durable: attaching adds"))
    assert line.endswith("M") and "a no-change cell" in line, line
