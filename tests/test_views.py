"""Views: runs, history, forks, events, compare and status as pandas DataFrames.

Real dtypes (UTC datetimes, timedeltas, categorical statuses, integer byte counts), one store
query per view whatever the number of rows, the whole fork tree from any member, empty stores
and runs without checkpoints, a 10,000-checkpoint history, the styled rendering the magics
return, and RunNotFound for unknown ids.
"""

from __future__ import annotations

import inspect
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest
from conftest import execute_sql
from flows import pricing
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
import durable_nb.views as views
from durable_nb._ids import new_id
from durable_nb._loop import run_sync
from durable_nb.model import CheckpointDraft, CheckpointStatus, Commit, NewRun, RunKind, RunStatus
from durable_nb.store import Store, codec
from durable_nb.store.secret import load_secret
from durable_nb.views import Styled

NS_UTC = "datetime64[ns, UTC]"
NS_DELTA = "timedelta64[ns]"
RUN_STATUSES = [s.value for s in RunStatus]
CHECKPOINT_STATUSES = [s.value for s in CheckpointStatus]
EVENT_TYPES = {  # every type of event the engine records
    "run_started",
    "node_started",
    "node_finished",
    "node_failed",
    "node_retrying",
    "gate_opened",
    "gate_decided",
    "run_paused",
    "run_failed",
    "run_cancelled",
    "run_completed",
    "fork_created",
}
UNKNOWN = "01900000-0000-7000-8000-000000000000"


# -- workflows used by the tests ------------------------------------------------------------------


def failing(store_url: str) -> dnb.Workflow:
    flow = dnb.Workflow("failing", store=store_url)

    @flow.node(retry_count=0)
    def boom(state):
        raise ValueError("no data for <region>")

    return flow


def gated(store_url: str) -> dnb.Workflow:
    flow = dnb.Workflow("gated", store=store_url)

    @flow.node()
    def review(state):
        decision = dnb.gate("ship?", context={"n": 1})
        return {"approved": decision.approved}

    return flow


def checkpoint_of(frame: pd.DataFrame, step: str) -> str:
    return str(frame.loc[frame["step"] == step, "checkpoint_id"].item())


def json_size(value: Any) -> int:
    return codec.encode(value, load_secret()).size


# -- a probe counting the store's calls -------------------------------------------------------------


def protocol_methods() -> list[str]:
    return sorted(n for n, m in vars(Store).items() if not n.startswith("_") and inspect.iscoroutinefunction(m))


class CallCounter:
    """Wraps every protocol method of one store object and counts the calls."""

    def __init__(self, store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: Counter[str] = Counter()
        for name in protocol_methods():
            monkeypatch.setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return await method(*args, **kwargs)

        return counted

    def measure(self, view: Callable[[], Any]) -> tuple[dict[str, int], Any]:
        self.calls.clear()
        result = view()
        return dict(self.calls), result


# -- dtypes ---------------------------------------------------------------------------------------------


def test_runs_has_real_dtypes(store_url: str) -> None:
    """runs() has UTC datetimes, a timedelta elapsed, categorical kind/status, int checkpoints; newest first."""
    before = pd.Timestamp.now(tz="UTC")
    done = pricing(store_url).run({"rate": 0.1})
    broken = failing(store_url).run({})
    paused = gated(store_url).run({})
    frame = dnb.runs(store=store_url)

    assert isinstance(frame, pd.DataFrame)
    assert list(frame["run_id"]) == [paused.id, broken.id, done.id]
    assert str(frame["created_at"].dtype) == NS_UTC
    assert str(frame["updated_at"].dtype) == NS_UTC
    assert str(frame["elapsed"].dtype) == NS_DELTA
    assert isinstance(frame["status"].dtype, pd.CategoricalDtype)
    assert list(frame["status"].cat.categories) == RUN_STATUSES
    assert isinstance(frame["kind"].dtype, pd.CategoricalDtype)
    assert frame["checkpoints"].dtype == "int64"
    assert list(frame["status"]) == ["paused", "failed", "completed"]
    assert list(frame["kind"]) == ["workflow"] * 3
    assert list(frame["checkpoints"]) == [1, 2, 4]  # gate; failed + run_end; 3 nodes + run_end
    assert frame["created_at"].between(before - pd.Timedelta(seconds=5), pd.Timestamp.now(tz="UTC")).all()
    assert ((frame["updated_at"] - frame["created_at"] - frame["elapsed"]).abs() < pd.Timedelta(microseconds=5)).all()
    assert (frame["elapsed"] >= pd.Timedelta(0)).all()
    error = frame.loc[frame["run_id"] == broken.id, "error"].item()
    assert "Node 'boom' failed" in error and "no data for <region>" in error
    assert pd.isna(frame.loc[frame["run_id"] == done.id, "error"].item())

    only = dnb.runs("pricing", store=store_url)
    assert list(only["run_id"]) == [done.id]
    assert only.dtypes.to_dict() == frame.dtypes.to_dict()


def test_history_has_real_dtypes(store_url: str) -> None:
    """history() has seq order, categorical checkpoint status, UTC times, timedelta durations, int bytes."""
    run = pricing(store_url).run({"rate": 0.1})
    frame = dnb.history(run.id, store=store_url)

    assert list(frame["step"]) == ["after:load", "after:discount", "after:total", "run_end"]
    assert list(frame["seq"]) == [1, 2, 3, 4]
    assert frame["seq"].dtype == "int64"
    assert isinstance(frame["status"].dtype, pd.CategoricalDtype)
    assert list(frame["status"].cat.categories) == CHECKPOINT_STATUSES
    assert list(frame["status"]) == ["ok", "ok", "ok", "completed"]
    assert str(frame["created_at"].dtype) == NS_UTC
    assert frame["created_at"].is_monotonic_increasing
    assert str(frame["duration"].dtype) == NS_DELTA
    assert (frame["duration"].iloc[:3] > pd.Timedelta(0)).all()
    assert pd.isna(frame["duration"].iloc[3])  # the tombstone ran nothing
    assert frame["bytes_written"].dtype == "int64"
    assert str(frame["attempts"].dtype) == "Int64"
    assert list(frame["attempts"].iloc[:3]) == [1, 1, 1]
    assert [list(c) for c in frame["changed"]] == [["count", "prices"], ["discounted"], ["total"], []]
    assert list(frame["parent_checkpoint_id"].iloc[1:]) == list(frame["checkpoint_id"].iloc[:-1])
    # A Run object works as well as its id.
    pd.testing.assert_frame_equal(dnb.history(run, store=store_url), frame)


def test_history_bytes_written_are_the_values_each_checkpoint_wrote(store_url: str) -> None:
    """bytes_written is the size of the values a checkpoint wrote; an unchanged large value is not recounted."""
    big = "x" * 100_000  # stored as JSON: the quotes add 2 bytes
    packed = bytes(range(256)) * 200  # stored pickled
    flow = dnb.Workflow("sizes", store=store_url)

    @flow.node()
    def make(state):
        return {"big": big, "n": 7}

    @flow.node(after="make")
    def small(state):
        return {"flag": len(state["big"]) > 0}  # reads big, leaves it unchanged

    @flow.node(after="small")
    def pack(state):
        return {"packed": packed}

    run = flow.run({})
    frame = dnb.history(run.id, store=store_url).set_index("step")
    assert json_size(big) == 100_002
    assert frame.loc["after:make", "bytes_written"] == 100_002 + 1  # "x"*100000 and 7
    assert frame.loc["after:small", "bytes_written"] == len(b"true")
    assert frame.loc["after:pack", "bytes_written"] == json_size(packed)
    assert len(packed) < frame.loc["after:pack", "bytes_written"] < len(packed) + 200
    assert frame.loc["run_end", "bytes_written"] == 0
    # The large value is in the state of every later checkpoint, but counted once in total.
    assert frame["bytes_written"].sum() == 100_002 + 1 + 4 + json_size(packed)
    assert dnb.get_run(run.id, store=store_url).state["big"] == big


def test_history_does_not_count_a_value_returned_unchanged(store_url: str) -> None:
    """A node returning a large value unchanged wrote no new bytes for it."""
    big = "y" * 100_000
    flow = dnb.Workflow("again", store=store_url)

    @flow.node()
    def make(state):
        return {"big": big}

    @flow.node(after="make")
    def touch(state):
        return {"big": state["big"], "n": 1}

    run = flow.run({})
    [(copies,)] = execute_sql(store_url, "SELECT COUNT(*) FROM blobs WHERE size >= 100000")
    assert copies == 1  # the value was stored once
    frame = dnb.history(run.id, store=store_url).set_index("step")
    assert frame.loc["after:make", "bytes_written"] == 100_002
    assert frame.loc["after:touch", "bytes_written"] == 1


def test_fork_checkpoint_shows_its_overrides_as_written(store_url: str) -> None:
    """The fork checkpoint's history row names the overridden values and their bytes."""
    run = pricing(store_url).run({"rate": 0.1})
    forked = dnb.fork(run.id, state={"note": "z" * 1000}, store=store_url)
    row = dnb.history(forked.id, store=store_url).iloc[0]
    assert row["step"] == "fork:total"
    assert list(row["changed"]) == ["note"]
    assert row["bytes_written"] == 1002


def test_events_forks_compare_status_have_real_dtypes(store_url: str) -> None:
    """Events, forks, compare and status have datetimes, categories and ints."""
    flow = pricing(store_url)
    run = flow.run({"rate": 0.1})
    forked = dnb.fork(run.id, state={"rate": 0.5}, store=store_url)

    events = dnb.events(run.id, store=store_url)
    assert list(events["seq"]) == list(range(1, len(events) + 1))
    assert events["seq"].dtype == "int64"
    assert isinstance(events["type"].dtype, pd.CategoricalDtype)
    assert EVENT_TYPES <= set(events["type"].cat.categories)
    assert events["type"].iloc[0] == "run_started" and events["type"].iloc[-1] == "run_completed"
    assert list(events.loc[events["type"] == "node_finished", "node_id"]) == ["load", "discount", "total"]
    assert str(events["at"].dtype) == NS_UTC
    assert events["at"].is_monotonic_increasing

    tree = dnb.forks(run.id, store=store_url)
    assert str(tree["created_at"].dtype) == NS_UTC
    assert isinstance(tree["status"].dtype, pd.CategoricalDtype)
    assert list(tree["status"].cat.categories) == RUN_STATUSES
    assert tree["depth"].dtype == "int64" and tree["checkpoints"].dtype == "int64"
    assert str(tree["fork_seq"].dtype) == "Int64"

    compared = dnb.compare([run.id, forked.id], ["rate", "count", "total"], store=store_url)
    assert isinstance(compared["status"].dtype, pd.CategoricalDtype)
    assert compared["rate"].dtype == "float64" and compared["count"].dtype == "int64"
    assert list(compared["rate"]) == [0.1, 0.5]

    one = views.status(run.id, store=store_url)
    assert len(one) == 1
    assert isinstance(one["status"].dtype, pd.CategoricalDtype) and one["status"].item() == "completed"
    assert str(one["created_at"].dtype) == NS_UTC and str(one["updated_at"].dtype) == NS_UTC
    shape = dnb.status(run.id, store=store_url)
    assert isinstance(shape, dict)  # the top-level status is the {run_id, status, node_counts, executions} dict
    for key, count in shape["node_counts"].items():
        assert one[key].dtype == "int64"
        assert one[key].item() == count
    assert one["ok"].item() == 3 and one["checkpoints"].item() == 4


def test_async_twins_return_the_same_frames(store_url: str) -> None:
    """The async views return what the sync ones do."""
    run = pricing(store_url).run({"rate": 0.2})
    forked = dnb.fork(run.id, state={"rate": 0.3}, store=store_url)
    pairs = [
        (dnb.runs(store=store_url), dnb.aruns(store=store_url)),
        (dnb.history(run.id, store=store_url), dnb.ahistory(run.id, store=store_url)),
        (dnb.forks(forked.id, store=store_url), dnb.aforks(forked.id, store=store_url)),
        (dnb.events(run.id, store=store_url), dnb.aevents(run.id, store=store_url)),
        (dnb.compare([run.id, forked.id], store=store_url), dnb.acompare([run.id, forked.id], store=store_url)),
        (views.status(run.id, store=store_url), views.astatus(run.id, store=store_url)),
    ]
    for frame, coroutine in pairs:
        other = run_sync(coroutine)
        columns = [c for c in frame.columns if c != "updated_at"]
        pd.testing.assert_frame_equal(other[columns], frame[columns])


# -- one query per view ------------------------------------------------------------------------------


def build_world(store_url: str, size: int, tag: str) -> dict[str, Any]:
    """``size`` runs, a run of ``size`` loop iterations, and ``size`` forks with overrides."""
    simple = dnb.Workflow(f"simple-{tag}", store=store_url)

    @simple.node()
    def one(state):
        return {"x": state["i"] * 2}

    looped = dnb.Workflow(f"looped-{tag}", store=store_url)

    @looped.loop(condition=lambda state: True, max_iterations=size)
    def spin(state):
        return {"y": state.get("y", 0) + 1}

    ids = [simple.run({"i": i}).id for i in range(size)]
    long_run = looped.run({}).id
    forked = [dnb.fork(ids[0], state={"i": 100 + k}, store=store_url).id for k in range(size)]
    return {"ids": ids, "long": long_run, "forks": forked, "name": f"simple-{tag}"}


def test_each_view_costs_the_same_queries_for_3_and_50_rows(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each view costs one query for its rows (no query per row): 3 rows and 50 rows cost the same calls."""
    counter = CallCounter(dnb.connect(store_url), monkeypatch)
    measured: dict[int, dict[str, dict[str, int]]] = {}
    for size in (3, 50):
        world = build_world(store_url, size, str(size))
        cases: dict[str, tuple[Callable[[], Any], str, int]] = {
            "runs": (lambda: dnb.runs(store=store_url), "list_runs", -1),
            "runs(name)": (lambda w=world: dnb.runs(w["name"], store=store_url), "list_runs", 2 * size),
            "history": (lambda w=world: dnb.history(w["long"], store=store_url), "history_rows", size + 1),
            "events": (lambda w=world: dnb.events(w["long"], store=store_url), "list_events", -1),
            "status": (lambda w=world: views.status(w["long"], store=store_url), "status_rows", 1),
            "forks": (lambda w=world: dnb.forks(w["forks"][-1], store=store_url), "fork_tree", size + 1),
            "compare": (
                lambda w=world: dnb.compare(w["ids"] + w["forks"], store=store_url),
                "latest_states",
                2 * size,
            ),
        }
        measured[size] = {}
        for label, (view, rows_method, rows) in cases.items():
            calls, frame = counter.measure(view)
            assert calls.get(rows_method) == 1, (label, size, calls)
            assert sum(calls.values()) <= 3, (label, size, calls)
            if rows >= 0:
                assert len(frame) == rows, (label, size)
            measured[size][label] = calls
        assert len(dnb.events(world["long"], store=store_url)) > 2 * size  # the event log grew with the loop
    assert measured[3] == measured[50]


# -- forks and compare --------------------------------------------------------------------------------


def test_forks_gives_the_whole_tree_from_any_member(store_url: str) -> None:
    """forks(run) is the whole tree from its root, whichever member is passed, with fork details."""
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    root_history = dnb.history(root.id, store=store_url)
    after_load = checkpoint_of(root_history, "after:load")
    after_discount = checkpoint_of(root_history, "after:discount")
    child = flow.fork(root.id, after_load, state={"rate": 0.5})
    child_discount = checkpoint_of(dnb.history(child.id, store=store_url), "after:discount")
    grandchild = flow.fork(child.id, child_discount, state={"note": "b", "tags": ["x", "y"]})
    sibling = dnb.fork(root.id, after_discount, state={"rate": 0.9}, store=store_url)
    unrelated = flow.run({"rate": 0.0})
    dnb.fork(unrelated.id, state={"rate": 0.2}, store=store_url)

    tree = dnb.forks(root.id, store=store_url)
    assert list(tree["run_id"]) == [root.id, child.id, grandchild.id, sibling.id]
    # A fork keeps its source's name.
    assert list(tree["name"]) == [root.name] * 4
    assert list(tree["parent_run_id"].fillna("-")) == ["-", root.id, child.id, root.id]
    assert list(tree["depth"]) == [0, 1, 2, 1]
    assert list(tree["fork_step"].fillna("-")) == ["-", "after:load", "after:discount", "after:discount"]
    assert list(tree["fork_seq"].fillna(0)) == [0, 1, 2, 2]
    assert list(tree["parent_checkpoint_id"].fillna("-")) == ["-", after_load, child_discount, after_discount]
    assert list(tree["overrides"]) == [{}, {"rate": 0.5}, {"note": "b", "tags": ["x", "y"]}, {"rate": 0.9}]
    assert list(tree["status"]) == ["completed", "completed", "completed", "pending"]
    assert list(tree["checkpoints"]) == [4, 4, 3, 1]
    for member in (child.id, grandchild.id, sibling.id):
        pd.testing.assert_frame_equal(dnb.forks(member, store=store_url), tree)
    assert len(dnb.forks(unrelated.id, store=store_url)) == 2


def test_compare_one_row_per_run_one_column_per_name(store_url: str) -> None:
    """compare(runs, names) has one row per run, one column per chosen name and the fork point; None = all."""
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    after_load = checkpoint_of(dnb.history(root.id, store=store_url), "after:load")
    child = flow.fork(root.id, after_load, state={"rate": 0.5})
    pending = dnb.fork(root.id, after_load, state={"rate": 0.9, "note": "what if"}, store=store_url)
    ids = [root.id, child.id, pending.id]

    chosen = dnb.compare(ids, ["total", "rate"], store=store_url)
    assert list(chosen.index) == ids
    assert list(chosen.columns) == ["status", "parent_run_id", "fork_point", "total", "rate"]
    assert list(chosen["rate"]) == [0.1, 0.5, 0.9]
    assert chosen["total"].iloc[0] == 54.0 and chosen["total"].iloc[1] == 30.0
    assert pd.isna(chosen["total"].iloc[2])  # the pending fork has not computed it yet
    assert list(chosen["fork_point"].fillna("-")) == ["-", after_load, after_load]
    assert list(chosen["status"]) == ["completed", "completed", "pending"]

    everything = dnb.compare(ids, store=store_url)
    values = [c for c in everything.columns if c not in ("status", "parent_run_id", "fork_point")]
    assert values == ["count", "discounted", "note", "prices", "rate", "total"]
    assert everything.loc[root.id, "discounted"] == [9.0, 18.0, 27.0]
    assert everything.loc[child.id, "discounted"] == [5.0, 10.0, 15.0]
    assert everything.loc[pending.id, "note"] == "what if"
    assert pd.isna(everything.loc[root.id, "note"])
    # Order of the rows follows the ids given.
    assert list(dnb.compare(ids[::-1], ["rate"], store=store_url).index) == ids[::-1]


# -- empty stores and runs without checkpoints -----------------------------------------------------------


def test_runs_on_an_empty_store(store_url: str) -> None:
    """runs() on an empty store is an empty DataFrame with the same columns."""
    empty = dnb.runs(store=dnb.connect(store_url))  # a new store, created by connect() (a URL alone must name one)
    assert isinstance(empty, pd.DataFrame) and empty.empty
    assert dnb.runs("nothing", store=store_url).empty
    pricing(store_url).run({"rate": 0.1})
    full = dnb.runs(store=store_url)
    assert list(empty.columns) == list(full.columns)
    for column in ("status", "kind"):
        assert isinstance(empty[column].dtype, pd.CategoricalDtype)
        assert list(empty[column].cat.categories) == list(full[column].cat.categories)


def test_empty_frames_keep_the_dtypes_of_full_ones(store_url: str) -> None:
    """An empty view has the same dtypes as a full one (datetime64[ns, UTC], timedelta64[ns])."""
    empty_runs = dnb.runs(store=dnb.connect(store_url))
    flow = pricing(store_url)
    run = flow.run({"rate": 0.1})
    bare = new_bare_run(store_url)
    assert empty_runs.dtypes.to_dict() == dnb.runs(store=store_url).dtypes.to_dict()
    full = dnb.history(run.id, store=store_url)
    assert dnb.history(bare, store=store_url).dtypes.to_dict() == full.dtypes.to_dict()


def new_bare_run(store_url: str) -> str:
    """A run created at the store level, with no checkpoint and no event."""
    run_id = new_id()
    run_sync(
        dnb.connect(store_url).create_run(
            NewRun(run_id=run_id, name="bare", kind=RunKind.WORKFLOW, status=RunStatus.PENDING, input_manifest={})
        )
    )
    return run_id


def test_views_of_runs_without_checkpoints(store_url: str) -> None:
    """history/events/forks/status/compare work on runs with no checkpoint (or only a fork point)."""
    # 1. A workflow interrupted in its first node: the run exists, nothing was committed.
    flow = dnb.Workflow("interrupted", store=store_url)

    @flow.node()
    def first(state):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        flow.run({"rate": 0.25})
    [interrupted] = list(dnb.runs("interrupted", store=store_url)["run_id"])
    # 2. A run created at the store level, with no checkpoint and no event.
    bare = new_bare_run(store_url)
    # 3. A store-level fork that no code has run yet: only its fork point.
    source = pricing(store_url).run({"rate": 0.1})
    forked = dnb.fork(source.id, state={"rate": 0.4}, store=store_url)

    for run_id in (interrupted, bare):
        history = dnb.history(run_id, store=store_url)
        assert history.empty and "bytes_written" in history.columns
        assert isinstance(history["status"].dtype, pd.CategoricalDtype)
        tree = dnb.forks(run_id, store=store_url)
        assert list(tree["run_id"]) == [run_id] and list(tree["depth"]) == [0]
        assert list(tree["checkpoints"]) == [0]
        one = views.status(run_id, store=store_url)
        assert len(one) == 1 and one["checkpoints"].item() == 0 and one["ok"].item() == 0
    assert views.status(interrupted, store=store_url)["status"].item() == "cancelled"
    assert dnb.events(bare, store=store_url).empty
    types = list(dnb.events(interrupted, store=store_url)["type"])
    assert types[0] == "run_started" and "node_started" in types and "node_finished" not in types
    # compare falls back to the run's input when it has no checkpoint.
    compared = dnb.compare([interrupted, bare], store=store_url)
    assert compared.loc[interrupted, "rate"] == 0.25 and pd.isna(compared.loc[bare, "rate"])

    history = dnb.history(forked.id, store=store_url)
    assert list(history["step"]) == ["fork:total"] and list(history["status"]) == ["fork"]
    assert pd.isna(history["duration"].item())
    assert list(dnb.events(forked.id, store=store_url)["type"]) == ["fork_created"]
    assert views.status(forked.id, store=store_url)["status"].item() == "pending"
    assert list(dnb.forks(forked.id, store=store_url)["run_id"]) == [source.id, forked.id]


# -- a long history ----------------------------------------------------------------------------------------


@pytest.mark.sqlite_only  # about 10-13 s on PostgreSQL (see the report), 0.4 s on SQLite
def test_history_of_10000_checkpoints(store_url: str) -> None:
    """history() of a 10,000-checkpoint run builds correctly (time printed; run with -s)."""
    store = dnb.connect(store_url)
    secret = load_secret()
    run_id = new_id()
    run_sync(
        store.create_run(
            NewRun(run_id=run_id, name="long", kind=RunKind.WORKFLOW, status=RunStatus.RUNNING, input_manifest={})
        )
    )
    total, batch = 10_000, 1_000
    for start in range(0, total, batch):
        drafts, blobs = [], []
        for i in range(start, start + batch):
            blob = codec.encode(f"value {i:05d}", secret, "v")  # 13 bytes of JSON each
            blobs.append(blob)
            drafts.append(
                CheckpointDraft(
                    checkpoint_id=new_id(),
                    step=f"after:n{i}",
                    node_id=f"n{i}",
                    status=CheckpointStatus.OK,
                    changes={"v": blob.hash},
                    queue=[],
                    node_output={"v": blob.hash},
                    duration=0.5 + i / 1000,
                    attempts=1,
                )
            )
        run_sync(store.commit(Commit(run_id=run_id, checkpoints=drafts, blobs=blobs)))

    started = time.perf_counter()
    frame = dnb.history(run_id, store=store_url)
    took = time.perf_counter() - started
    print(f"\ndnb.history of {total:,} checkpoints took {took:.3f} s ({store_url.split(':')[0]})")

    assert len(frame) == total
    assert list(frame["seq"]) == list(range(1, total + 1))
    assert frame["step"].iloc[0] == "after:n0" and frame["step"].iloc[-1] == f"after:n{total - 1}"
    assert (frame["bytes_written"] == 13).all()
    assert all(list(changed) == ["v"] for changed in frame["changed"])
    assert str(frame["created_at"].dtype) == NS_UTC and frame["created_at"].is_monotonic_increasing
    assert str(frame["duration"].dtype) == NS_DELTA
    assert frame["duration"].iloc[-1] == pd.Timedelta(seconds=0.5 + (total - 1) / 1000)
    assert (frame["status"] == "ok").all()
    assert frame["checkpoint_id"].is_unique


# -- styled rendering in a real shell ----------------------------------------------------------------------


def shell_with_extension() -> InteractiveShell:
    shell = InteractiveShell()
    shell.run_line_magic("load_ext", "durable_nb")
    return shell


def ok(shell: InteractiveShell, source: str) -> Any:
    result = shell.run_cell(source)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


def coloured(status: str, colour: str) -> str:
    """The tail of a status badge's markup: its background colour, then the status (issue 18 item 6)."""
    return f'background:{colour}">{status}</span>'


def test_magics_return_styled_views_and_code_gets_plain_frames(store_url: str) -> None:
    """%durable history/runs/forks return Styled objects whose HTML colours statuses; code gets DataFrames."""
    pricing(store_url).run({"rate": 0.1})  # a completed workflow run in the same store
    shell = shell_with_extension()
    ok(shell, f"%durable run report --store {store_url}")
    from durable_nb.notebook.session import session_for

    run_id = session_for(shell).cell_run.run_id

    nothing_yet = ok(shell, "%durable history")
    assert isinstance(nothing_yet, Styled) and nothing_yet.frame.empty

    ok(shell, "%%durable load\nrows = [1, 2, 3]")
    assert not shell.run_cell("%%durable divide\nratio = 1 / 0").success
    shown = ok(shell, "%durable history")
    assert isinstance(shown, Styled)
    assert type(shown.frame) is pd.DataFrame
    plain = dnb.history(run_id, store=store_url)
    assert type(plain) is pd.DataFrame  # code gets the frame itself
    pd.testing.assert_frame_equal(shown.frame, plain)
    html = shown._repr_html_()
    assert f"History of run {run_id}" in html
    assert coloured("ok", "#16a34a") in html and coloured("failed", "#dc2626") in html
    assert repr(shown) == repr(shown.frame)
    assert list(shown.frame["status"]) == ["ok", "failed"]  # the frame itself is not rewritten

    listed = ok(shell, "%durable runs")
    assert isinstance(listed, Styled) and len(listed.frame) == 2
    html = listed._repr_html_()
    assert coloured("completed", "#16a34a") in html and coloured("failed", "#dc2626") in html
    assert len(ok(shell, "%durable runs report").frame) == 1

    ok(shell, "%durable fork")
    tree = ok(shell, "%durable forks")
    assert isinstance(tree, Styled) and list(tree.frame["depth"]) == [0, 1]
    html = tree._repr_html_()
    assert coloured("failed", "#dc2626") in html and coloured("running", "#2563eb") in html
    assert type(dnb.forks(run_id, store=store_url)) is pd.DataFrame


def test_styled_html_escapes_text_outside_the_status(store_url: str) -> None:
    """Styled HTML shows error text literally, never as markup."""
    flow = dnb.Workflow("hostile", store=store_url)

    @flow.node(retry_count=0)
    def boom(state):
        raise ValueError("<script>alert(1)</script>")

    flow.run({})
    html = views.styled(dnb.runs(store=store_url))._repr_html_()
    assert coloured("failed", "#dc2626") in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<script>" not in html


# -- unknown runs ------------------------------------------------------------------------------------------


def test_unknown_run_raises_run_not_found_for_each_view(store_url: str) -> None:
    """Every view of an unknown run id raises RunNotFound naming it; nothing is created."""
    known = pricing(store_url).run({"rate": 0.1}).id
    attempts: list[Callable[[str], Any]] = [
        lambda r: dnb.history(r, store=store_url),
        lambda r: dnb.forks(r, store=store_url),
        lambda r: dnb.events(r, store=store_url),
        lambda r: views.status(r, store=store_url),
        lambda r: dnb.compare([r], store=store_url),
        lambda r: dnb.compare([known, r], ["rate"], store=store_url),
        lambda r: run_sync(dnb.ahistory(r, store=store_url)),
        lambda r: run_sync(dnb.aforks(r, store=store_url)),
        lambda r: run_sync(dnb.aevents(r, store=store_url)),
        lambda r: run_sync(views.astatus(r, store=store_url)),
        lambda r: run_sync(dnb.acompare([known, r], store=store_url)),
    ]
    for unknown in (UNKNOWN, "not-a-run"):
        for view in attempts:
            with pytest.raises(dnb.RunNotFound) as caught:
                view(unknown)
            assert caught.value.run_id == unknown
            assert unknown in str(caught.value)
    assert list(dnb.runs(store=store_url)["run_id"]) == [known]
