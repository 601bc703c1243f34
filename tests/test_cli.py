"""The durable-nb command: every command works, is documented with an example, and fails cleanly."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import env_with_repo

import durable_nb as dnb
from durable_nb.cli import COMMANDS, EXIT_NOT_FOUND, EXIT_STATE, EXIT_USAGE, main

ROOT = Path(__file__).resolve().parent.parent

FLOW = """
import durable_nb as dnb

flow = dnb.Workflow("cli-flow", store={url!r})


@flow.node()
def prepare(state):
    return {{"x": state.get("x", 1)}}


@flow.node(after="prepare")
def review(state):
    decision = dnb.gate("ok?", {{"x": state["x"]}})
    return {{"approved": decision.approved, "comment": decision.comment}}
"""


@pytest.fixture
def flow_module(store_url: str, tmp_path: Path) -> str:
    (tmp_path / "cli_flow.py").write_text(FLOW.format(url=store_url))
    sys.modules.pop("cli_flow", None)
    return "cli_flow:flow"


def paused_run(store_url: str) -> str:
    sys.path.insert(0, "")
    import cli_flow

    run = cli_flow.flow.run({"x": 2})
    assert run.status == "paused"
    return run.id


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_every_command_has_help_with_an_example_and_is_in_the_docs(capsys: pytest.CaptureFixture[str]) -> None:
    """Each command prints help with an example and has a line in the command line's reference page."""
    readme = (ROOT / "docs" / "reference" / "cli.md").read_text()
    for name, _, _, example in COMMANDS:
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0
        text = capsys.readouterr().out
        assert "example:" in text and example in text, name
        assert f"durable-nb {name}" in readme, name


def test_runs_show_history(flow_module: str, store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """runs, show and history print tables, or JSON with --json."""
    run_id = paused_run(store_url)
    code, out, _ = cli(capsys, "runs", "--store", store_url)
    assert code == 0 and run_id in out and "paused" in out
    code, out, _ = cli(capsys, "runs", "--store", store_url, "--json", "--status", "paused")
    assert code == 0 and json.loads(out)[0]["run_id"] == run_id
    code, out, _ = cli(capsys, "show", run_id, "--store", store_url)
    assert code == 0 and "waiting at gate 'ok?'" in out and "gate:review" in out
    code, out, _ = cli(capsys, "show", run_id, "--store", store_url, "--json")
    shown = json.loads(out)
    assert shown["status"] == "paused" and shown["node_counts"]["suspended"] == 1
    code, out, _ = cli(capsys, "history", run_id, "--store", store_url, "--json")
    assert [row["step"] for row in json.loads(out)] == ["after:prepare", "gate:review"]


def test_approve_then_resume(flow_module: str, store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """approve records the decision without code; resume --workflow continues the run."""
    run_id = paused_run(store_url)
    code, out, _ = cli(capsys, "approve", run_id, "--comment", "fine", "--by", "cli", "--store", store_url)
    assert code == 0 and "pending" in out
    code, out, _ = cli(capsys, "resume", run_id, "--workflow", flow_module, "--store", store_url)
    assert code == 0 and "completed" in out
    assert dnb.get_run(run_id, store=store_url).state["comment"] == "fine"
    code, _, err = cli(capsys, "approve", run_id, "--store", store_url)
    assert code == EXIT_STATE and err.startswith("error: ")


def test_reject_with_value(flow_module: str, store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """reject records approved=False (with an optional JSON value)."""
    run_id = paused_run(store_url)
    code, out, _ = cli(capsys, "reject", run_id, "--value", '{"why": "late"}', "--store", store_url, "--json")
    assert code == 0 and json.loads(out)["status"] == "pending"
    code, _, err = cli(capsys, "reject", run_id, "--value", "{not json", "--store", store_url)
    assert code != 0 and "JSON" in err


def test_cancel_and_fork(flow_module: str, store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """cancel settles a paused run; fork --set creates a branch with a changed value."""
    run_id = paused_run(store_url)
    code, out, _ = cli(capsys, "fork", run_id, "--set", "x=5", "--store", store_url, "--json")
    forked = json.loads(out)
    assert code == 0 and forked["parent_run_id"] == run_id
    assert dnb.get_run(forked["run_id"], store=store_url).state["x"] == 5
    code, _, err = cli(capsys, "fork", run_id, "--set", "x=__import__('os')", "--store", store_url)
    assert code != 0 and "not a Python literal" in err
    code, out, _ = cli(capsys, "cancel", run_id, "--store", store_url)
    assert code == 0 and "cancelled" in out
    code, _, _ = cli(capsys, "cancel", run_id, "--store", store_url)
    assert code == EXIT_STATE


def test_prune_and_recover(flow_module: str, store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """prune --older-than takes a duration; recover --workflow resumes runs approved elsewhere."""
    run_id = paused_run(store_url)
    cli(capsys, "approve", run_id, "--store", store_url)
    code, out, _ = cli(capsys, "recover", "--workflow", flow_module, "--store", store_url, "--json")
    assert code == 0 and json.loads(out)["resumed"] == {run_id: "completed"}
    code, out, _ = cli(capsys, "prune", "--older-than", "30d", "--store", store_url, "--json")
    assert code == 0 and json.loads(out)["checkpoints"] == 0
    with pytest.raises(SystemExit) as bad:
        main(["prune", "--older-than", "soon", "--store", store_url])
    assert bad.value.code == 2


def test_unknown_run_and_bad_workflow(store_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown run exits 4 with one line; a --workflow that is not a Workflow says so."""
    dnb.runs(store=dnb.connect(store_url))  # the store exists (a store that does not is refused as such)
    code, out, err = cli(capsys, "show", "no-such-run", "--store", store_url)
    assert code == EXIT_NOT_FOUND and out == "" and err.count("\n") == 1 and "No run with id" in err
    code, _, err = cli(capsys, "resume", "no-such-run", "--workflow", "json:dumps", "--store", store_url)
    assert code == 1 and "not a durable_nb.Workflow" in err


def test_console_script_and_demo(tmp_path: Path) -> None:
    """The installed command runs the demo end to end: a killed kernel, restored cells, a CLI approval, completion."""
    script = Path(sys.executable).parent / "durable-nb"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "durable_nb.cli"]
    result = subprocess.run(
        [*command, "demo", "--folder", str(tmp_path / "demo")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env_with_repo(),
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "killed (kill -9)" in out
    assert "restored from checkpoint" in out
    assert "approved: run" in out
    assert textwrap.dedent(out).strip().splitlines()[-1].split()[2:4] == ["is", "completed;"]


def _common_start(first: str, second: str) -> str:
    size = next((i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a != b), len(first))
    return first[:size]


def _unique_start(run_id: str, store_url: str) -> str:
    """The shortest start of ``run_id`` that no other run in the store has, as the store is now."""
    others = [other for other in dnb.runs(store=store_url)["run_id"] if other != run_id]
    return run_id[: 1 + max((len(_common_start(run_id, other)) for other in others), default=0)]


def test_any_start_of_a_run_id_that_one_run_has_names_it(
    flow_module: str, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every command taking a run accepts its whole id or any start of it no other run's id has, and
    prints the whole id; a start several runs share exits 2 listing them, one none has exits 4."""
    first, second = paused_run(store_url), paused_run(store_url)
    shared = _common_start(first, second)
    unique = first[: len(shared) + 1]
    code, out, _ = cli(capsys, "show", unique, "--store", store_url)
    assert code == 0 and f"run {first} " in out
    code, out, _ = cli(capsys, "history", unique, "--store", store_url, "--json")
    assert code == 0 and [row["step"] for row in json.loads(out)] == ["after:prepare", "gate:review"]
    code, out, _ = cli(capsys, "fork", unique, "--set", "x=7", "--store", store_url, "--json")
    assert code == 0 and json.loads(out)["parent_run_id"] == first
    # Run ids start with the time: the fork's may share more of the first run's id than the second's did.
    unique = _unique_start(first, store_url)
    code, out, _ = cli(capsys, "approve", unique, "--store", store_url)
    assert code == 0 and f"approved: run {first} " in out
    code, out, _ = cli(capsys, "resume", unique, "--workflow", flow_module, "--store", store_url)
    assert code == 0 and f"resumed: run {first} " in out and "completed" in out
    code, out, _ = cli(capsys, "cancel", _unique_start(second, store_url), "--store", store_url)
    assert code == 0 and f"cancelled: run {second} " in out

    code, out, err = cli(capsys, "reject", shared, "--store", store_url)
    assert code == EXIT_USAGE and out == "" and err.count("\n") == 1
    assert first in err and second in err and "Give more of the id" in err
    code, out, err = cli(capsys, "show", shared, "--store", store_url, "--json")
    assert code == EXIT_USAGE and json.loads(err)["error"]["type"] == "AmbiguousRunId"
    code, _, err = cli(capsys, "show", "zz" + first[2:8], "--store", store_url)
    assert code == EXIT_NOT_FOUND and "No run with id" in err


def test_tables_show_durations_and_times_as_the_notebook_does(
    flow_module: str, store_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Terminal tables read ``0.18 ms`` / ``1.52 s`` and local times to the second, never pandas'
    ``0 days 00:00:00.000176173`` or nanosecond UTC stamps; missing values are empty; ids are whole;
    a gate's checkpoint reads as waiting for a decision, not as its stored status."""
    from durable_nb.model import format_seconds
    from durable_nb.views.render import local_text

    run_id = paused_run(store_url)
    history = dnb.history(run_id, store=store_url)
    created = dnb.runs(store=store_url)["created_at"].iloc[0]
    for command in (["runs"], ["history", run_id], ["show", run_id]):
        code, out, _ = cli(capsys, *command, "--store", store_url)
        assert code == 0, command
        assert "0 days" not in out and "+00:00" not in out and "<NA>" not in out and "NaT" not in out, out
        assert run_id in out or command[0] == "history", out
    code, out, _ = cli(capsys, "runs", "--store", store_url)
    assert local_text(created) in out.splitlines()[1]
    for command in (["history", run_id], ["show", run_id]):
        code, out, _ = cli(capsys, *command, "--store", store_url)
        [gate_line] = [line for line in out.splitlines() if "gate:" in line]
        assert "waiting for a decision" in gate_line and "interrupted" not in out, out
    code, out, _ = cli(capsys, "history", run_id, "--store", store_url)
    for line, (_, row) in zip(out.splitlines()[1:], history.iterrows(), strict=True):
        assert local_text(row["created_at"]) in line
        assert format_seconds(row["duration"].total_seconds(), compound=True) in line


def test_demo_runs_on_the_given_store_and_summarises_in_json(store_url: str, tmp_path: Path) -> None:
    """``durable-nb demo --store URL --json`` runs the demo's run in that store and prints one JSON
    summary on stdout (its steps on stderr); the approval step shows the whole run id, which the
    commands take as it is."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_nb.cli",
            "demo",
            "--store",
            store_url,
            "--json",
            "--folder",
            str(tmp_path / "demo"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env_with_repo(),
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    run_id = summary["run_id"]
    assert summary["status"] == "completed" and summary["store"] == store_url and summary["seconds"] > 0
    assert [row["step"] for row in summary["history"]][-1] == "run_end"
    assert f"durable-nb approve {run_id} --comment 'Looks good' --by demo" in result.stderr
    assert dnb.get_run(run_id, store=store_url).status == "completed"
    assert not (tmp_path / "demo" / "runs.db").exists()  # the store given, not one in the folder
