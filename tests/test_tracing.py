"""OpenTelemetry traces: the spans of runs, nodes, map items, agents and cells, gate events, and a
trace that continues across a crash, read from the SDK's in-memory exporter.

durable_nb configures no provider: these tests do, once per process (the API's global can be set
only once), with one exporter cleared before each test.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from shellkit import Shell

import durable_nb as dnb

try:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode
except ImportError:  # the tests of spans need the SDK (the dev extra); the one without it runs anyway
    InMemorySpanExporter = None  # type: ignore[assignment,misc]

ROOT = Path(__file__).resolve().parent.parent
_EXPORTER = InMemorySpanExporter() if InMemorySpanExporter is not None else None


def _install() -> None:
    """Set the global provider once per process; a provider set before (by another test) gets our processor."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    if not getattr(provider, "_durable_nb_test", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._durable_nb_test = True  # type: ignore[attr-defined]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if _EXPORTER is None:
        pytest.skip("needs opentelemetry-sdk (the dev extra)")
    _install()
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def _named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def _parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def _history(run_id: str, url: str) -> list[tuple[str, str]]:
    frame = dnb.history(run_id, store=url)
    return list(zip(frame["step"], frame["checkpoint_id"], strict=True))


def test_a_workflow_run_is_a_run_span_over_its_node_spans(spans: InMemorySpanExporter, store_url: str) -> None:
    flow = dnb.Workflow("traced", store=store_url)

    @flow.node
    def a(state: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1}

    @flow.node(after="a")
    async def b(state: dict[str, Any]) -> dict[str, Any]:
        return {"y": state["x"] + 1}

    @flow.node(after="b")
    def c(state: dict[str, Any]) -> dict[str, Any]:
        # A span the node function starts is the node span's child.
        with trace.get_tracer("user").start_as_current_span("inside"):
            return {"z": 3}

    run = flow.run({})
    assert run.status == "completed"
    (root,) = _named(spans, "durable_nb.run")
    nodes = _named(spans, "durable_nb.node")
    assert [n.attributes["durable_nb.node"] for n in nodes] == ["a", "b", "c"]
    assert {_parent_of(n) for n in nodes} == {root.context.span_id}
    assert {n.context.trace_id for n in nodes} == {root.context.trace_id}
    assert {n.attributes["durable_nb.run_id"] for n in [root, *nodes]} == {run.id}
    committed = dict(_history(run.id, store_url))
    assert [n.attributes["durable_nb.checkpoint_id"] for n in nodes] == [
        committed["after:a"],
        committed["after:b"],
        committed["after:c"],
    ]
    assert root.attributes["durable_nb.checkpoint_id"] == committed["run_end"]
    (inside,) = _named(spans, "inside")
    assert _parent_of(inside) == nodes[2].context.span_id
    assert all(s.status.status_code is not StatusCode.ERROR for s in spans.get_finished_spans())


def test_the_first_run_span_is_stored_with_the_run(spans: InMemorySpanExporter, store_url: str) -> None:
    from durable_nb._loop import run_sync

    flow = dnb.Workflow("stored-trace", store=store_url)

    @flow.node
    def a(state: dict[str, Any]) -> dict[str, Any]:
        return {"x": 1}

    run = flow.run({})
    (root,) = _named(spans, "durable_nb.run")
    record = run_sync(flow.store.get_run(run.id))
    assert record.meta["trace"]["trace_id"] == format(root.context.trace_id, "032x")
    assert record.meta["trace"]["span_id"] == format(root.context.span_id, "016x")


def test_map_items_are_spans_under_their_map_node(spans: InMemorySpanExporter, store_url: str) -> None:
    flow = dnb.Workflow("traced-map", store=store_url)

    @flow.node
    def items(state: dict[str, Any]) -> dict[str, Any]:
        return {"xs": [1, 2, 3, 4]}

    def square(state: dict[str, Any], x: int) -> int:
        return x * x

    flow.map(square, items="xs", into="squares", after="items", max_concurrency=1)
    run = flow.run({})
    assert run.state["squares"] == [1, 4, 9, 16]
    (node,) = [n for n in _named(spans, "durable_nb.node") if n.attributes["durable_nb.node"] == "square"]
    found = _named(spans, "durable_nb.map_item")
    assert sorted(s.attributes["durable_nb.item_index"] for s in found) == [0, 1, 2, 3]
    assert {_parent_of(s) for s in found} == {node.context.span_id}
    committed = {cid for _, cid in _history(run.id, store_url)}
    # Each item names its own commit; the last one rides with the map node's commit.
    by_index = {s.attributes["durable_nb.item_index"]: s.attributes["durable_nb.checkpoint_id"] for s in found}
    assert set(by_index.values()) <= committed and len(set(by_index.values())) == 4
    assert by_index[3] == node.attributes["durable_nb.checkpoint_id"]


def test_a_failing_node_has_an_error_status(spans: InMemorySpanExporter, store_url: str) -> None:
    flow = dnb.Workflow("traced-failure", store=store_url)

    @flow.node(retry_count=0)
    def boom(state: dict[str, Any]) -> dict[str, Any]:
        raise ValueError("no luck")

    run = flow.run({})
    assert run.status == "failed"
    (node,) = _named(spans, "durable_nb.node")
    (root,) = _named(spans, "durable_nb.run")
    assert node.status.status_code is StatusCode.ERROR and "no luck" in (node.status.description or "")
    (recorded,) = [e for e in node.events if e.name == "exception"]
    assert recorded.attributes["exception.type"] == "ValueError"
    assert root.status.status_code is StatusCode.ERROR
    failed_at = dict(_history(run.id, store_url))["failed:boom"]
    assert node.attributes["durable_nb.checkpoint_id"] == failed_at


def test_a_gate_is_an_event_when_it_pauses_and_when_a_decision_resumes(
    spans: InMemorySpanExporter, store_url: str
) -> None:
    flow = dnb.Workflow("traced-gate", store=store_url)

    @flow.node
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        return {"ok": dnb.gate("ship it?").approved}

    run = flow.run({})
    assert run.status == "paused"
    (paused_node,) = _named(spans, "durable_nb.node")
    (paused,) = [e for e in paused_node.events if e.name == "durable_nb.gate"]
    gate_checkpoint = dict(_history(run.id, store_url))["gate:ask"]
    assert dict(paused.attributes) == {
        "durable_nb.run_id": run.id,
        "durable_nb.checkpoint_id": gate_checkpoint,
        "durable_nb.node": "ask",
        "durable_nb.reason": "ship it?",
        "durable_nb.state": "paused",
    }
    first_run_span = _named(spans, "durable_nb.run")[0]
    spans.clear()

    done = flow.approve(run.id)
    assert done.state["ok"] is True
    (resumed_node,) = _named(spans, "durable_nb.node")
    (resumed,) = [e for e in resumed_node.events if e.name == "durable_nb.gate"]
    assert resumed.attributes["durable_nb.reason"] == "ship it?"
    assert resumed.attributes["durable_nb.state"] == "resumed"
    assert resumed.attributes["durable_nb.approved"] is True
    assert resumed.attributes["durable_nb.run_id"] == run.id
    assert resumed.attributes["durable_nb.checkpoint_id"] in {cid for _, cid in _history(run.id, store_url)}
    # The run resumed by the decision continues the first run span's trace, linked to it.
    (second,) = _named(spans, "durable_nb.run")
    assert second.context.trace_id == first_run_span.context.trace_id
    assert [link.context.span_id for link in second.links] == [first_run_span.context.span_id]


def test_an_agent_turn_and_tool_call_are_spans_in_the_node(spans: InMemorySpanExporter, store_url: str) -> None:
    def lookup(x: int) -> str:
        """Look something up."""
        return f"found {x}"

    def model(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Any:
        if not any(m["role"] == "tool" for m in messages):
            call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"x": 7}'}}
            return {"role": "assistant", "content": None, "tool_calls": [call]}
        return "done"

    flow = dnb.Workflow("traced-agent", store=store_url)

    @flow.node
    def talk(state: dict[str, Any]) -> dict[str, Any]:
        return {"answer": dnb.agent(model, "Find it.", [lookup], name="finder").text}

    run = flow.run({})
    assert run.state["answer"] == "done"
    (node,) = _named(spans, "durable_nb.node")
    turns = _named(spans, "durable_nb.agent.turn")
    (tool,) = _named(spans, "durable_nb.agent.tool")
    assert [t.attributes["durable_nb.turn"] for t in turns] == [1, 2]
    assert {_parent_of(s) for s in [*turns, tool]} == {node.context.span_id}
    assert tool.attributes["durable_nb.tool"] == "lookup"
    assert {s.attributes["durable_nb.run_id"] for s in [*turns, tool]} == {run.id}
    # Each names the checkpoint committed before it ran: its turn, its tool call.
    committed = dict(_history(run.id, store_url))
    assert [t.attributes["durable_nb.checkpoint_id"] for t in turns] == [committed["turn:1"], committed["turn:2"]]
    assert tool.attributes["durable_nb.checkpoint_id"] == committed["turn:1/tool:lookup"]


def test_a_durable_cell_is_a_span(spans: InMemorySpanExporter, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cells.db"
    shell = Shell(url, "traced-cells")
    try:
        shell.ok("%%durable load\nx = 41")
        shell.ok(
            "%%durable items\nimport durable_nb as dnb\nys = dnb.map_items(lambda i: i + x, range(3), name='plus')"
        )
        result = shell.run("%%durable broken\nraise KeyError('gone')")
        assert not result.success
        run_id = shell.run_id
    finally:
        shell.close()
    cells = _named(spans, "durable_nb.cell")
    assert [c.attributes["durable_nb.node"] for c in cells] == ["load", "items", "broken"]
    assert {c.attributes["durable_nb.run_id"] for c in cells} == {run_id}
    committed = dict(_history(run_id, url))
    assert cells[0].attributes["durable_nb.checkpoint_id"] == committed["after:load"]
    assert cells[0].status.status_code is not StatusCode.ERROR
    assert cells[2].status.status_code is StatusCode.ERROR
    # map_items in a cell: its items are the cell span's children, each naming its item checkpoint.
    items = sorted(_named(spans, "durable_nb.map_item"), key=lambda s: s.attributes["durable_nb.item_index"])
    assert [_parent_of(i) for i in items] == [cells[1].context.span_id] * 3
    assert [i.attributes["durable_nb.checkpoint_id"] for i in items] == [committed[f"item:{n}"] for n in range(3)]


CHILD = """
import sys, time
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
trace.set_tracer_provider(TracerProvider())
import durable_nb as dnb

flow = dnb.Workflow("crash-traced", store={store!r})

@flow.node
def first(state):
    return {{"x": 1}}

@flow.node(after="first")
def second(state):
    open({reached!r}, "w").close()
    time.sleep(60)  # killed here
    return {{"y": 2}}

flow.run({{}})
"""


@pytest.mark.sqlite_only
def test_a_run_recovered_after_a_kill_continues_its_first_span_trace(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    reached = tmp_path / "reached"
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(store=f"sqlite:///{db}", reached=str(reached)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    child = subprocess.Popen([sys.executable, str(script)], env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not reached.exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else ""
            assert time.monotonic() < deadline, "the child never reached its second node"
            time.sleep(0.01)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()

    flow = dnb.Workflow("crash-traced", store=f"sqlite:///{db}")

    @flow.node
    def first(state: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("committed before the kill: never runs again")

    @flow.node(after="first")
    def second(state: dict[str, Any]) -> dict[str, Any]:
        return {"y": 2}

    report = dnb.recover([flow])
    (recovered,) = report.resumed
    assert recovered.status == "completed"
    from durable_nb._loop import run_sync

    stored = run_sync(flow.store.get_run(recovered.id)).meta["trace"]
    (root,) = _named(spans, "durable_nb.run")
    (link,) = root.links
    assert format(link.context.trace_id, "032x") == stored["trace_id"]
    assert format(link.context.span_id, "016x") == stored["span_id"]
    # The same trace: the recovered run span is the first one's child.
    assert format(root.context.trace_id, "032x") == stored["trace_id"]
    assert root.parent is not None and format(root.parent.span_id, "016x") == stored["span_id"]
    assert root.attributes["durable_nb.resumed"] is True
    (node,) = _named(spans, "durable_nb.node")
    assert node.attributes["durable_nb.node"] == "second" and _parent_of(node) == root.context.span_id


NO_SDK = """
import sys
{block}
import durable_nb as dnb
from durable_nb.engine import tracing
flow = dnb.Workflow("plain", store={store!r})

@flow.node
def a(state):
    return {{"x": 1}}

@flow.node(after="a")
def b(state):
    return {{"ok": dnb.gate("go?").approved}}

run = flow.run({{}})
assert run.status == "paused", run.status
assert flow.approve(run.id).state["ok"] is True
from durable_nb._loop import run_sync
assert run_sync(flow.store.get_run(run.id)).meta == {{}}
print(tracing._trace is None, "opentelemetry.trace" in sys.modules)
"""

# How the process stands with OpenTelemetry before durable_nb runs: the API imported by the
# application (no SDK), installed but imported by nobody, not installed.
_BLOCKS = {
    "api-no-sdk": "import opentelemetry.trace",
    "api-unused": "",
    "no-api": "sys.modules['opentelemetry'] = None",
}


@pytest.mark.sqlite_only
@pytest.mark.parametrize("case", list(_BLOCKS))
def test_without_an_sdk_or_the_api_nothing_breaks_and_nothing_is_stored(tmp_path: Path, case: str) -> None:
    """With the API imported, durable_nb uses it; installed and unused, durable_nb does not import it."""
    if case != "no-api":
        pytest.importorskip("opentelemetry.trace")
    # A fresh process: no provider was ever set there, and without the API its import fails.
    script = tmp_path / "plain.py"
    script.write_text(NO_SDK.format(block=_BLOCKS[case], store=f"sqlite:///{tmp_path}/runs.db"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]))
    env.pop("OTEL_PYTHON_TRACER_PROVIDER", None)
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    used = case == "api-no-sdk"
    assert done.stdout.split() == [str(not used), str(used)]
