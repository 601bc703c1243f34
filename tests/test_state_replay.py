"""The state at every checkpoint, rebuilt by the store, equals a naive replay of every change, in runs and forks.

Random workflows (waves, loops, switches, maps, gates, failures and resumes, forks of forks,
lists that grow and long loops that cross snapshots) run on a real store. A naive replay then
folds every stored row's changes from the run's input (or, for a fork, from the replayed state of
its parent at the fork point), ignoring snapshots, and the store's rebuild must give the same
values and completed nodes at every checkpoint, before and after prune.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import execute_sql
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.state.values import ValueCodec
from durable_nb.store.secret import load_secret

POOL: list[Any] = [0, 1, "a", "b", [1, 2], {"x": 1}, None, 2.5]
_names = itertools.count()


@dataclass
class NodePlan:
    kind: str  # node, loop, map, gate
    keys: list[int]
    iterations: int = 1
    items: int = 0
    fail_first: bool = False


@dataclass
class FlowPlan:
    layers: list[list[NodePlan]]
    switches: list[bool]  # before layer i (i >= 1): a switch picks some of its nodes
    picks: list[list[bool]]
    long_loop: bool
    forks: list[tuple[int, float, dict[str, Any]]] = field(default_factory=list)


node_plans = st.builds(
    NodePlan,
    kind=st.sampled_from(["node", "node", "loop", "map", "gate"]),
    keys=st.lists(st.integers(0, 5), min_size=0, max_size=3, unique=True),
    iterations=st.integers(1, 4),
    items=st.integers(0, 4),
    fail_first=st.booleans(),
)


@st.composite
def flow_plans(draw: st.DrawFn) -> FlowPlan:
    layers = draw(st.lists(st.lists(node_plans, min_size=1, max_size=3), min_size=1, max_size=4))
    switches = [False] + [draw(st.booleans()) for _ in layers[1:]]
    picks = [[draw(st.booleans()) for _ in layer] for layer in layers]
    overrides = st.dictionaries(st.sampled_from([f"k{i}" for i in range(6)]), st.sampled_from(POOL), max_size=2)
    forks = draw(st.lists(st.tuples(st.integers(0, 8), st.floats(0, 1), overrides), max_size=3))
    return FlowPlan(layers, switches, picks, draw(st.booleans()), forks)


def build(plan: FlowPlan, store: dnb.Store, name: str, calls: Counter[str]) -> dnb.Workflow:
    flow = dnb.Workflow(name, store=store)
    previous: list[str] = []
    for index, layer in enumerate(plan.layers):
        ids = [f"L{index}N{n}" for n in range(len(layer))]
        if plan.switches[index]:
            chosen = [node for node, pick in zip(ids, plan.picks[index], strict=True) if pick]

            def route(state, chosen=chosen):
                return chosen or None

            flow.switch(route, after=previous or None, name=f"route{index}")
            previous = [f"route{index}"]
        for node_id, node in zip(ids, layer, strict=True):
            register(flow, node_id, node, previous, plan, index, calls)
        previous = ids
    return flow


def value_for(node_id: str, key: int, iteration: int) -> Any:
    return random.Random(f"{node_id}/{key}/{iteration}").choice(POOL)


def register(
    flow: dnb.Workflow, node_id: str, node: NodePlan, after: list[str], plan: FlowPlan, layer: int, calls: Counter[str]
) -> None:
    # Nodes of one wave write keys of their own (k0..k5 by position), so no two write one name.
    position = int(node_id.split("N")[1])
    keys = [f"k{k}" for k in node.keys if k % 3 == position]
    loop_key = f"__loop_{node_id}"

    def body(state):
        calls[node_id] += 1
        if node.fail_first and calls[node_id] == 1:
            raise RuntimeError(f"{node_id} fails the first time")
        if node.kind == "gate":
            dnb.gate(f"{node_id}?")
        iteration = int(state.get(loop_key, 0))
        updates = {key: value_for(node_id, int(key[1:]), iteration) for key in keys}
        log = f"log{position}"  # a list each wave position appends to: chunked once it is long
        updates[log] = [*state.get(log, []), f"{node_id}#{iteration}"]
        return updates

    body.__name__ = node_id
    options: dict[str, Any] = {"after": after or None, "name": node_id}
    if node.kind == "loop":
        iterations = 300 if plan.long_loop and layer == 0 and position == 0 else node.iterations
        flow.loop(body, condition=lambda state: True, max_iterations=iterations, retry_count=0, **options)
    elif node.kind == "map":

        def item(state, value):
            calls[f"{node_id}/{value}"] += 1
            return {"item": value, "seen": len(state.get("log0", []))}

        flow.map(item, items=lambda state, n=node.items: list(range(n)), into=f"m_{node_id}", retry_count=0, **options)
    else:
        flow.node(body, retry_count=0, **options)


def drive(flow: dnb.Workflow, run: dnb.Run) -> dnb.Run:
    """Approve gates and resume failures until the run ends."""
    for _ in range(40):
        if run.status == "paused":
            for waiting in run_sync(flow.store.pending_interrupts(run.id)):
                run = flow.approve(run.id, node=waiting.node_id)
        elif run.status == "failed":
            run = flow.resume(run.id)
        else:
            return run
    raise AssertionError(f"run {run.id} did not end: {run.status}")


# -- the naive replay -----------------------------------------------------------------------


def replay(store_url: str, run_id: str) -> dict[int, tuple[dict[str, str], list[str]]]:
    """Fold every row of a run from its start (or its parent's replayed state at the fork point)."""
    [(parent_run, parent_checkpoint, input_manifest)] = execute_sql(
        store_url, "SELECT parent_run_id, parent_checkpoint_id, input_manifest FROM runs WHERE run_id = ?", (run_id,)
    )
    if parent_run is not None:
        [(fork_seq,)] = execute_sql(
            store_url,
            "SELECT seq FROM checkpoints WHERE run_id = ? AND checkpoint_id = ?",
            (parent_run, parent_checkpoint),
        )
        manifest, completed = (
            dict(part) if isinstance(part, dict) else list(part) for part in replay(store_url, parent_run)[fork_seq]
        )
    else:
        manifest, completed = json.loads(input_manifest), []
    states = {}
    for seq, changes, completed_changes in execute_sql(
        store_url, "SELECT seq, changes, completed_changes FROM checkpoints WHERE run_id = ? ORDER BY seq", (run_id,)
    ):
        for name, address in json.loads(changes).items():
            if address is None:
                manifest.pop(name, None)
            else:
                manifest[name] = address
        done = json.loads(completed_changes)
        completed = [node for node in completed if node not in done.get("removed", [])]
        for node in done.get("added", []):
            completed = [n for n in completed if n != node] + [node]
        states[seq] = (dict(manifest), list(completed))
    return states


def check_rebuilt(store: dnb.Store, run_id: str, expected: dict[int, tuple[dict[str, str], list[str]]]) -> None:
    kept = [record.seq for record in run_sync(store.list_checkpoints(run_id))]
    assert kept, run_id
    for seq in kept:
        state = run_sync(store.state_at(run_id, seq))
        assert (state.manifest, state.completed) == expected[seq], (run_id, seq)
    latest = run_sync(store.latest_states([run_id]))[run_id]
    assert (latest.manifest, latest.completed) == expected[max(kept)]


SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.backends("sqlite")
@settings(SETTINGS, max_examples=30)
@given(plan=flow_plans())
def test_rebuilt_state_equals_a_naive_replay(store_url: str, plan: FlowPlan) -> None:
    """At every checkpoint of every run and fork, state and completed are the replayed ones."""
    check_plan(store_url, plan)


# The rebuild is the SQL store's code on both databases: on PostgreSQL a third of the examples
# check its queries there (each example there costs several times one on SQLite).
@pytest.mark.backends("postgres")
@settings(SETTINGS, max_examples=10)
@given(plan=flow_plans())
def test_rebuilt_state_equals_a_naive_replay_on_postgres(store_url: str, plan: FlowPlan) -> None:
    """The same on PostgreSQL, on fewer random workflows."""
    check_plan(store_url, plan)


def check_plan(store_url: str, plan: FlowPlan) -> None:
    """Run the plan's workflow and forks; every rebuilt state must equal the replay, before and after prune."""
    store = dnb.connect(store_url)
    calls: Counter[str] = Counter()
    flow = build(plan, store, f"random{next(_names)}", calls)
    runs = [drive(flow, flow.run({"k0": 0, "log0": []}))]
    for which, where, overrides in plan.forks:
        parent = runs[which % len(runs)]
        checkpoints = run_sync(store.list_checkpoints(parent.id))
        point = checkpoints[min(int(where * len(checkpoints)), len(checkpoints) - 1)]
        runs.append(drive(flow, flow.fork(parent.id, point.checkpoint_id, state=overrides)))
    assert all(run.status == "completed" for run in runs), [(r.id, r.status, r.error) for r in runs]

    expected = {run.id: replay(store_url, run.id) for run in runs}
    codec = ValueCodec(store, load_secret())
    values = {}
    for run in runs:
        check_rebuilt(store, run.id, expected[run.id])
        values[run.id] = run_sync(codec.load(run_sync(store.state_at(run.id)).manifest))
        assert values[run.id] == dnb.get_run(run.id, store=store).state

    dnb.prune(0, store=store)
    for run in runs:
        check_rebuilt(store, run.id, expected[run.id])
        fresh = ValueCodec(store, load_secret())
        assert run_sync(fresh.load(run_sync(store.state_at(run.id)).manifest)) == values[run.id]
