"""The store conformance suite: every backend passes these unchanged, through the protocol only."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest

import durable_nb as dnb
from durable_nb._ids import new_id
from durable_nb._loop import run_sync
from durable_nb.model import (
    CheckpointDraft,
    CheckpointState,
    CheckpointStatus,
    Commit,
    NewEvent,
    NewRun,
    PendingInterrupt,
    RunKind,
    RunStatus,
    RunUpdate,
    WriteRow,
)
from durable_nb.store import Conflict
from durable_nb.store.codec import decode, encode

T = TypeVar("T")
KEY = b"conformance-key"


def sync(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def new_run(
    name: str = "conf", key: str | None = None, status: RunStatus = RunStatus.RUNNING, owner: str | None = "me"
) -> NewRun:
    blob = encode({"x": 1}, KEY, "x")
    return NewRun(
        run_id=new_id(),
        name=name,
        kind=RunKind.WORKFLOW,
        status=status,
        input_manifest={"x": blob.hash},
        blobs=[blob],
        idempotency_key=key,
        owner=owner,
        events=[NewEvent("run_started")],
    )


def draft(
    step: str = "after:a", node: str | None = "a", status: CheckpointStatus = CheckpointStatus.OK, **fields: Any
) -> CheckpointDraft:
    return CheckpointDraft(
        checkpoint_id=new_id(),
        step=step,
        node_id=node,
        status=status,
        queue=[],
        **fields,
    )


def test_create_and_get(store: dnb.Store) -> None:
    """A created run reads back with its fields; an unknown id raises RunNotFound."""

    async def main() -> None:
        record, created = await store.create_run(new_run())
        assert created
        fetched = await store.get_run(record.run_id)
        assert fetched == record
        assert fetched.status is RunStatus.RUNNING
        assert fetched.event_seq == 1 and fetched.head_seq == 0
        with pytest.raises(dnb.RunNotFound):
            await store.get_run("missing")

    sync(main())


def test_idempotency_key_is_unique_per_name(store: dnb.Store) -> None:
    """The same idempotency key returns the original run; another workflow name may reuse the key."""

    async def main() -> None:
        first, _ = await store.create_run(new_run(key="k1"))
        again, created = await store.create_run(new_run(key="k1"))
        assert not created and again.run_id == first.run_id
        other, created = await store.create_run(new_run(name="other", key="k1"))
        assert created and other.run_id != first.run_id
        assert len(await store.list_runs("conf")) == 1

    sync(main())


def test_concurrent_creates_with_one_key_make_one_run(store: dnb.Store) -> None:
    """Racing creates with one idempotency key yield one run."""

    async def main() -> None:
        results = await asyncio.gather(*(store.create_run(new_run(key="race")) for _ in range(10)))
        assert len({r.run_id for r, _ in results}) == 1
        assert sum(created for _, created in results) == 1

    sync(main())


def test_commit_numbers_checkpoints_and_events_without_gaps(store: dnb.Store) -> None:
    """Event seqs are per run, consecutive, also under concurrent commits."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        commits = [
            store.commit(
                Commit(
                    run_id=record.run_id,
                    checkpoints=[draft(f"after:n{i}", f"n{i}")],
                    events=[NewEvent("node_finished", f"n{i}")],
                )
            )
            for i in range(20)
        ]
        await asyncio.gather(*commits)
        checkpoints = await store.list_checkpoints(record.run_id)
        assert [c.seq for c in checkpoints] == list(range(1, 21))
        events = await store.list_events(record.run_id)
        assert [e.seq for e in events] == list(range(1, 22))
        assert [e.seq for e in await store.list_events(record.run_id, after_seq=19)] == [20, 21]
        assert (await store.get_run(record.run_id)).head_seq == 20

    sync(main())


def test_a_commit_that_returns_no_checkpoints_stores_them_all_the_same(store: dnb.Store) -> None:
    """A caller that does not read its checkpoints back gets none; the store holds them as ever."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        for seen in (None, record):  # the row read in the transaction, and the conditional update
            written = draft(f"after:{seen is None}", "a")
            result = await store.commit(
                Commit(run_id=record.run_id, checkpoints=[written], seen=seen, return_checkpoints=False)
            )
            assert result.checkpoints == []
            record = result.run
        stored = await store.list_checkpoints(record.run_id)
        assert [c.step for c in stored] == ["after:True", "after:False"] and record.head_seq == 2

    sync(main())


def test_failed_expectation_writes_nothing(store: dnb.Store) -> None:
    """Atomicity: when a commit's expectation fails, none of it is written."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        blob = encode((1, 2, 3), KEY, "t")
        wrong_status = Commit(
            run_id=record.run_id,
            checkpoints=[draft()],
            blobs=[blob],
            events=[NewEvent("node_finished", "a")],
            run=RunUpdate(status=RunStatus.COMPLETED),
            expect_status=frozenset({RunStatus.PAUSED}),
        )
        with pytest.raises(Conflict) as raised:
            await store.commit(wrong_status)
        assert raised.value.run.status is RunStatus.RUNNING
        wrong_owner = Commit(run_id=record.run_id, checkpoints=[draft()], expect_owner="someone-else")
        with pytest.raises(Conflict):
            await store.commit(wrong_owner)
        after = await store.get_run(record.run_id)
        assert after.status is RunStatus.RUNNING and after.head_seq == 0 and after.event_seq == 1
        assert await store.list_checkpoints(record.run_id) == []
        assert await store.get_blobs([blob.hash]) == {}

    sync(main())


def test_failing_statement_rolls_back_the_whole_commit(store: dnb.Store) -> None:
    """Atomicity: a commit that fails half-way (a duplicate checkpoint id) leaves no trace."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        first = draft()
        await store.commit(Commit(run_id=record.run_id, checkpoints=[first]))
        blob = encode((9, 9), KEY, "t")
        duplicate = Commit(
            run_id=record.run_id,
            blobs=[blob],
            checkpoints=[draft("after:b", "b"), first],
            events=[NewEvent("node_finished", "b")],
            run=RunUpdate(status=RunStatus.FAILED),
        )
        with pytest.raises(Exception):  # noqa: B017 - each backend raises its driver's integrity error
            await store.commit(duplicate)
        assert [c.step for c in await store.list_checkpoints(record.run_id)] == ["after:a"]
        assert (await store.get_run(record.run_id)).status is RunStatus.RUNNING
        assert await store.get_blobs([blob.hash]) == {}
        assert len(await store.list_events(record.run_id)) == 1

    sync(main())


def _interrupt(run_id: str, node: str, checkpoint_id: str) -> PendingInterrupt:
    return PendingInterrupt(
        run_id=run_id,
        node_id=node,
        checkpoint_id=checkpoint_id,
        reason="ok?",
        context={"n": node},
        created_at=time.time(),
    )


def test_claim_happens_once(store: dnb.Store) -> None:
    """Of many concurrent claims of one pending interrupt exactly one wins."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        gate = draft("gate:a", "a", CheckpointStatus.INTERRUPTED)
        await store.commit(
            Commit(
                run_id=record.run_id,
                checkpoints=[gate],
                open_interrupts=[_interrupt(record.run_id, "a", gate.checkpoint_id)],
                run=RunUpdate(status=RunStatus.PAUSED),
            )
        )
        pending = await store.pending_interrupts(record.run_id)
        assert [p.context for p in pending] == [{"n": "a"}]
        claims = [
            store.commit(
                Commit(
                    run_id=record.run_id,
                    checkpoints=[draft("approved:a", "a", CheckpointStatus.APPROVED)],
                    claim="a",
                    status_after_claim=RunStatus.PENDING,
                )
            )
            for _ in range(8)
        ]
        results = await asyncio.gather(*claims, return_exceptions=True)
        winners = [r for r in results if not isinstance(r, BaseException)]
        losers = [r for r in results if isinstance(r, BaseException)]
        assert len(winners) == 1
        assert all(isinstance(r, dnb.AlreadyResumed) for r in losers)
        assert winners[0].claimed.node_id == "a"
        assert winners[0].run.status is RunStatus.PENDING
        assert await store.pending_interrupts(record.run_id) == []
        steps = [c.step for c in await store.list_checkpoints(record.run_id)]
        assert steps.count("approved:a") == 1

    sync(main())


def test_claim_with_several_pending(store: dnb.Store) -> None:
    """With two gates open, an unnamed claim is refused; the run stays paused until both are claimed."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        a, b = draft("gate:a", "a", CheckpointStatus.INTERRUPTED), draft("gate:b", "b", CheckpointStatus.INTERRUPTED)
        await store.commit(
            Commit(
                run_id=record.run_id,
                checkpoints=[a, b],
                open_interrupts=[
                    _interrupt(record.run_id, "a", a.checkpoint_id),
                    _interrupt(record.run_id, "b", b.checkpoint_id),
                ],
                run=RunUpdate(status=RunStatus.PAUSED),
            )
        )
        with pytest.raises(dnb.InvalidDecision):
            await store.commit(Commit(run_id=record.run_id, claim="*", status_after_claim=RunStatus.PENDING))
        first = await store.commit(Commit(run_id=record.run_id, claim="a", status_after_claim=RunStatus.PENDING))
        assert first.run.status is RunStatus.PAUSED
        second = await store.commit(Commit(run_id=record.run_id, claim="*", status_after_claim=RunStatus.PENDING))
        assert second.claimed.node_id == "b" and second.run.status is RunStatus.PENDING
        with pytest.raises(dnb.AlreadyResumed):
            await store.commit(Commit(run_id=record.run_id, claim="*"))

    sync(main())


def test_blobs_are_content_addressed(store: dnb.Store) -> None:
    """One value is stored once; missing addresses are left out of get_blobs."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        blob = encode(list(range(1000)), KEY, "v")
        for _ in range(3):
            await store.commit(Commit(run_id=record.run_id, blobs=[blob]))
        found = await store.get_blobs([blob.hash, "j-missing", blob.hash])
        assert list(found) == [blob.hash]
        assert found[blob.hash].data == blob.data
        # Large values: SQLite reads these in chunks, hashing them as it goes.
        for size in (3_000_000, 20_000_003):
            big = encode(os.urandom(size), KEY, "big")
            await store.commit(Commit(run_id=record.run_id, blobs=[big]))
            loaded = (await store.get_blobs([big.hash, blob.hash], KEY))[big.hash]
            assert loaded.data == big.data
            assert loaded.read_digest in (None, (KEY, big.hash[2:]))
            assert decode(loaded, KEY) == decode(big, KEY)
            assert (await store.get_blobs([big.hash]))[big.hash].read_digest is None

    sync(main())


def test_resume_point_skips_tombstone(store: dnb.Store) -> None:
    """The resume point is the latest checkpoint that is not run_end."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        assert await store.resume_point(record.run_id) is None
        node = draft()
        await store.commit(
            Commit(run_id=record.run_id, checkpoints=[node, draft("run_end", None, CheckpointStatus.COMPLETED)])
        )
        assert (await store.resume_point(record.run_id)).checkpoint_id == node.checkpoint_id
        assert (await store.head_checkpoint(record.run_id)).step == "run_end"
        assert (await store.get_checkpoint(record.run_id, node.checkpoint_id)).seq == 1
        with pytest.raises(dnb.CheckpointNotFound):
            await store.get_checkpoint(record.run_id, "nope")

    sync(main())


def test_unfinished_steps_are_a_nodes_agent_checkpoints_since_it_last_finished(store: dnb.Store) -> None:
    """Only the node's checkpoints of that agent path written after its latest after: checkpoint, in order."""

    def item(node: str, path: str, index: int) -> CheckpointDraft:
        return draft(f"item:{index}", node, agent_path=path, item_index=index)

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        assert await store.unfinished_steps(record.run_id, "a", "map:x") == []
        earlier = [item("a", "map:x", 0), item("a", "map:x", 1), draft("after:a", "a")]
        now = [item("a", "map:x", 2), item("a", "map:y", 0), item("b", "map:x", 0), item("a", "map:x", 3)]
        await store.commit(Commit(run_id=record.run_id, checkpoints=earlier))
        assert await store.unfinished_steps(record.run_id, "a", "map:x") == []
        await store.commit(Commit(run_id=record.run_id, checkpoints=now))
        found = await store.unfinished_steps(record.run_id, "a", "map:x")
        assert [(c.step, c.item_index, c.seq) for c in found] == [("item:2", 2, 4), ("item:3", 3, 7)]
        assert [c.checkpoint_id for c in found] == [now[0].checkpoint_id, now[3].checkpoint_id]
        # A node that never finished: everything its agent wrote.
        assert [c.item_index for c in await store.unfinished_steps(record.run_id, "b", "map:x")] == [0]
        assert await store.unfinished_steps("no-such-run", "a", "map:x") == []

    sync(main())


def test_checkpoint_fields_round_trip(store: dnb.Store) -> None:
    """Every checkpoint field reads back as written."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        full = CheckpointDraft(
            checkpoint_id=new_id(),
            step="failed:a",
            node_id="a",
            status=CheckpointStatus.FAILED,
            changes={"x": "j-1", "y": "p-2", "gone": None},
            completed_added=["s"],
            completed_removed=["t"],
            snapshot=CheckpointState({"x": "j-1", "y": "p-2"}, ["s"]),
            queue=["a", "b"],
            parent_checkpoint_id="parent",
            node_input={"in": [1, "2"]},
            node_output={"y": "p-2"},
            error="Node 'a' failed: E",
            error_type="ValueError",
            traceback="Traceback …",
            interrupt={"reason": "r", "context": {"k": "ü"}},
            decision={"approved": True},
            resumes={"a": [{"approved": False}]},
            counters={"__loop_a": 3},
            agent_path="turn:3/tool:search",
            duration=1.25,
            attempts=2,
            extra={"outputs": []},
        )
        result = await store.commit(Commit(run_id=record.run_id, checkpoints=[full]))
        stored = (await store.list_checkpoints(record.run_id))[0]
        assert stored == result.checkpoints[0]
        for name in CheckpointDraft.__slots__:  # type: ignore[attr-defined]
            assert getattr(stored, name) == getattr(full, name), name

    sync(main())


def test_list_runs_newest_first(store: dnb.Store) -> None:
    """Runs are listed newest first, optionally by name."""

    async def main() -> None:
        ids = [(await store.create_run(new_run(name=n)))[0].run_id for n in ("a", "b", "a")]
        assert [r.run_id for r in await store.list_runs()] == ids[::-1]
        assert [r.run_id for r in await store.list_runs("a")] == [ids[2], ids[0]]

    sync(main())


def test_idempotent_results(store: dnb.Store) -> None:
    """An @idempotent result is stored per run and key."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        blob = encode("result", KEY, "r")
        assert await store.get_idempotent(record.run_id, "k") is None
        await store.commit(Commit(run_id=record.run_id, blobs=[blob], idempotent=[("k", blob.hash)]))
        assert await store.get_idempotent(record.run_id, "k") == blob.hash
        other, _ = await store.create_run(new_run())
        assert await store.get_idempotent(other.run_id, "k") is None

    sync(main())


def test_prune_keeps_what_paused_runs_resume_and_forks_need(store: dnb.Store) -> None:
    """Prune deletes old finished history and unreferenced blobs, never paused runs or gate checkpoints."""

    async def main() -> None:
        old_value = encode(("old", 1), KEY, "v")
        kept_value = encode(("kept", 2), KEY, "v")
        done, _ = await store.create_run(new_run())
        steps = [
            draft(f"after:n{i}", f"n{i}", changes={"v": old_value.hash if i < 2 else kept_value.hash}) for i in range(4)
        ]
        gate = draft("gate:g", "g", CheckpointStatus.INTERRUPTED, changes={"v": old_value.hash})
        await store.commit(
            Commit(
                run_id=done.run_id,
                blobs=[old_value, kept_value],
                checkpoints=[
                    steps[0],
                    gate,
                    *steps[1:],
                    draft("run_end", None, CheckpointStatus.COMPLETED),
                ],
                events=[NewEvent("node_finished")],
                idempotent=[("k", kept_value.hash)],
                run=RunUpdate(status=RunStatus.COMPLETED),
            )
        )
        paused, _ = await store.create_run(new_run())
        await store.commit(Commit(run_id=paused.run_id, checkpoints=[draft()], run=RunUpdate(status=RunStatus.PAUSED)))
        orphan = encode(("orphan", 3), KEY, "v")
        await store.commit(Commit(run_id=paused.run_id, blobs=[orphan]))

        states = {c.seq: await store.state_at(done.run_id, c.seq) for c in await store.list_checkpoints(done.run_id)}
        before = {seq: (state.manifest, state.completed) for seq, state in states.items()}
        report = await store.prune(time.time() + 10)
        remaining = [c.step for c in await store.list_checkpoints(done.run_id)]
        # What stays is rebuilt as it was: the rows it was rebuilt from went, a snapshot replaced them.
        for checkpoint in await store.list_checkpoints(done.run_id):
            after = await store.state_at(done.run_id, checkpoint.seq)
            assert (after.manifest, after.completed) == before[checkpoint.seq]
        # The gate checkpoint, the resume point and the tombstone stay.
        assert remaining == ["gate:g", "after:n3", "run_end"]
        assert report.checkpoints == 3
        assert report.events == 2
        assert report.idempotency == 1
        assert [c.step for c in await store.list_checkpoints(paused.run_id)] == ["after:a"]
        assert await store.list_events(paused.run_id) != []
        found = await store.get_blobs([old_value.hash, kept_value.hash, orphan.hash])
        assert set(found) == {old_value.hash, kept_value.hash}  # old value still referenced by the gate
        assert report.blobs >= 1

        nothing = await store.prune(time.time() - 3600)
        assert (nothing.checkpoints, nothing.events) == (0, 0)

    sync(main())


def test_prune_keeps_fork_points(store: dnb.Store) -> None:
    """A checkpoint another run was forked from survives prune."""

    async def main() -> None:
        done, _ = await store.create_run(new_run())
        fork_point = draft("after:a", "a")
        await store.commit(
            Commit(
                run_id=done.run_id,
                checkpoints=[fork_point, draft("after:b", "b"), draft("run_end", None, CheckpointStatus.COMPLETED)],
                run=RunUpdate(status=RunStatus.COMPLETED),
            )
        )
        child = new_run()
        child = NewRun(
            **{
                **{k: getattr(child, k) for k in NewRun.__slots__},
                "parent_run_id": done.run_id,
                "parent_checkpoint_id": fork_point.checkpoint_id,
            }
        )  # type: ignore[attr-defined]
        await store.create_run(child)
        await store.prune(time.time() + 10)
        assert [c.step for c in await store.list_checkpoints(done.run_id)] == ["after:a", "after:b", "run_end"]

    sync(main())


@pytest.mark.parametrize("driver", ["asyncio.run", "run_sync"])
def test_commit_from_a_stale_view_of_the_run(store: dnb.Store, driver: str) -> None:
    """A commit that passes the run as its writer saw it (``seen``) is numbered and checked
    against the stored row, never against that view: a moved-on run still gets gap-free seqs,
    and a run settled elsewhere raises Conflict and keeps nothing. ``run_sync`` drives the
    store from durable_nb's own loop, where SQLite runs the work on the calling thread."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        running = frozenset({RunStatus.RUNNING})

        def node_commit(node: str, seen: Any) -> Commit:
            return Commit(
                run_id=record.run_id,
                checkpoints=[draft(f"after:{node}", node)],
                events=[NewEvent("node_finished", node)],
                expect_status=running,
                expect_owner="me",
                seen=seen,
            )

        first = await store.commit(node_commit("a", record))
        assert (first.run.head_seq, first.run.event_seq) == (1, 2)
        # Another writer renews the lease: the view of ``first`` is now stale.
        await store.commit(Commit(run_id=record.run_id, run=RunUpdate(lease_until=time.time() + 60)))
        second = await store.commit(node_commit("b", first.run))
        third = await store.commit(node_commit("c", record))  # older still
        assert [c.seq for c in second.checkpoints + third.checkpoints] == [2, 3]
        assert (third.run.head_seq, third.run.event_seq) == (3, 4)
        assert third.run.lease_until is not None
        # Cancelled elsewhere: a commit from the last view is refused.
        await store.commit(Commit(run_id=record.run_id, run=RunUpdate(status=RunStatus.CANCELLED, owner=None)))
        with pytest.raises(Conflict) as raised:
            await store.commit(node_commit("d", third.run))
        assert raised.value.run.status is RunStatus.CANCELLED
        stored = await store.list_checkpoints(record.run_id)
        assert [(c.seq, c.step) for c in stored] == [(1, "after:a"), (2, "after:b"), (3, "after:c")]
        assert [e.seq for e in await store.list_events(record.run_id)] == [1, 2, 3, 4]

    if driver == "run_sync":
        run_sync(main())
    else:
        sync(main())


def test_a_running_nodes_commit_writes_repeats_once_and_all_or_nothing(store: dnb.Store) -> None:
    """A commit from the run as its writer saw it (a running node's) may name one value or one
    @idempotent key twice: each is stored once. One that fails half-way (a checkpoint id
    already taken) keeps nothing of its values, events or run update."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        running = frozenset({RunStatus.RUNNING})
        blob = encode("twice", KEY, "t")
        first = draft("after:a", "a")
        done = await store.commit(
            Commit(
                run_id=record.run_id,
                blobs=[blob, blob],
                checkpoints=[first],
                events=[NewEvent("node_finished", "a"), NewEvent("node_started", "b")],
                idempotent=[("k", blob.hash), ("k", blob.hash)],
                expect_status=running,
                expect_owner="me",
                seen=record,
            )
        )
        assert (done.run.head_seq, done.run.event_seq) == (1, 3)
        assert await store.get_idempotent(record.run_id, "k") == blob.hash
        assert list(await store.get_blobs([blob.hash])) == [blob.hash]
        other = encode("kept?", KEY, "t")
        with pytest.raises(Exception):  # noqa: B017 - each backend raises its driver's integrity error
            await store.commit(
                Commit(
                    run_id=record.run_id,
                    blobs=[other],
                    checkpoints=[draft("after:b", "b"), first],
                    events=[NewEvent("node_finished", "b")],
                    idempotent=[("k2", other.hash)],
                    run=RunUpdate(status=RunStatus.COMPLETED),
                    expect_status=running,
                    expect_owner="me",
                    seen=done.run,
                )
            )
        after = await store.get_run(record.run_id)
        assert (after.status, after.head_seq, after.event_seq) == (RunStatus.RUNNING, 1, 3)
        assert [c.step for c in await store.list_checkpoints(record.run_id)] == ["after:a"]
        assert await store.get_blobs([other.hash]) == {}
        assert await store.get_idempotent(record.run_id, "k2") is None

    sync(main())


def test_state_at_any_checkpoint_is_rebuilt_from_changes(store: dnb.Store) -> None:
    """A checkpoint stores what it changed; the state at any checkpoint equals a replay of
    every change from the run's input, with or without snapshots on the way."""

    async def main() -> None:
        record, _ = await store.create_run(
            NewRun(
                run_id=new_id(),
                name="t",
                kind=RunKind.WORKFLOW,
                status=RunStatus.RUNNING,
                input_manifest={"seed": "j-0"},
                events=[NewEvent("run_started")],
            )
        )
        manifest: dict[str, str] = {"seed": "j-0"}
        completed: list[str] = []
        expected: list[tuple[dict[str, str], list[str]]] = []
        drafts = []
        for i in range(40):
            changes: dict[str, str | None] = {f"k{i % 7}": f"j-{i}"}
            if i % 5 == 4:
                changes[f"k{(i + 3) % 7}"] = None
            added = [f"n{i % 9}"]
            for name, address in changes.items():
                if address is None:
                    manifest.pop(name, None)
                else:
                    manifest[name] = address
            completed = [n for n in completed if n not in added] + added
            snapshot = CheckpointState(dict(manifest), list(completed)) if i in (13, 14, 30) else None
            drafts.append(draft(f"after:n{i}", f"n{i}", changes=changes, completed_added=added, snapshot=snapshot))
            expected.append((dict(manifest), list(completed)))
        for start in range(0, 40, 8):
            await store.commit(Commit(run_id=record.run_id, checkpoints=drafts[start : start + 8]))
        for seq, (want_manifest, want_completed) in enumerate(expected, start=1):
            state = await store.state_at(record.run_id, seq)
            assert (state.manifest, state.completed) == (want_manifest, want_completed), seq
        latest = await store.state_at(record.run_id)
        assert (latest.manifest, latest.completed) == expected[-1]
        # Many states at once (a listing) equal the one-by-one rebuilds, snapshots or not.
        wanted = [1, 2, 13, 14, 15, 29, 31, 32, 40]
        many = await store.states_at(record.run_id, wanted)
        assert sorted(many) == wanted
        for seq in wanted:
            one = await store.state_at(record.run_id, seq)
            assert (many[seq].manifest, many[seq].completed, many[seq].since_snapshot) == (
                one.manifest,
                one.completed,
                one.since_snapshot,
            ), seq
        assert await store.states_at(record.run_id, []) == {}
        assert latest.since_snapshot == 40 - 31  # rows after the last snapshot (seq 31)

    sync(main())


def test_a_fork_reads_its_parents_state_without_copying_it(store: dnb.Store) -> None:
    """A fork's state is its parent's at the fork point plus its own changes; what the
    parent does later is not seen by the fork, and the fork's first row holds only its overrides."""

    async def main() -> None:
        parent, _ = await store.create_run(new_run())
        first = draft("after:a", "a", changes={"x": "j-1", "y": "j-2"}, completed_added=["a"])
        await store.commit(Commit(run_id=parent.run_id, checkpoints=[first]))
        fork_point = (await store.list_checkpoints(parent.run_id))[-1]
        fork_first = draft("fork:a", "a", CheckpointStatus.FORK, changes={"y": "j-9"})
        fork, _ = await store.create_run(
            NewRun(
                run_id=new_id(),
                name="t",
                kind=RunKind.WORKFLOW,
                status=RunStatus.PENDING,
                input_manifest={},
                parent_run_id=parent.run_id,
                parent_checkpoint_id=fork_point.checkpoint_id,
                checkpoints=[fork_first],
            )
        )
        later = draft("after:b", "b", changes={"x": "j-3", "z": "j-4"}, completed_added=["b"])
        await store.commit(Commit(run_id=parent.run_id, checkpoints=[later]))
        forked = await store.state_at(fork.run_id)
        assert forked.manifest == {"x": "j-1", "y": "j-9"} and forked.completed == ["a"]
        assert (await store.state_at(parent.run_id)).manifest == {"x": "j-3", "y": "j-2", "z": "j-4"}
        [row] = await store.list_checkpoints(fork.run_id)
        assert row.changes == {"y": "j-9"} and row.snapshot is None

    sync(main())


def test_narrow_reads_of_a_listing(store: dnb.Store) -> None:
    """A listing's reads: which checkpoints a run holds (seq and id), the extra and state of
    some of them in one pass (across a snapshot), and keyed results by several prefixes."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        run_id = record.run_id
        drafts = [draft(f"after:n{i}", f"n{i}", changes={f"v{i % 2}": f"j-{i}"}, extra={"n": i}) for i in range(5)]
        drafts[1] = dataclasses.replace(drafts[1], changes={}, snapshot=CheckpointState({"v0": "j-0", "s": "j-9"}, []))
        keyed = [(f"w:{i}:{j}", "j-1") for i in (1, 22) for j in range(2)] + [("w:3:0", "j-2")]
        await store.commit(Commit(run_id=run_id, checkpoints=drafts, idempotent=keyed))
        index = await store.checkpoint_index(run_id)
        assert index == [(i + 1, d.checkpoint_id) for i, d in enumerate(drafts)]
        extras = await store.checkpoint_extras(run_id, [5, 2, 3])
        assert sorted(extras) == [2, 3, 5]
        assert extras[2] == ({"n": 1}, {"v0": "j-0", "s": "j-9"})
        assert extras[3] == ({"n": 2}, {"v0": "j-2", "s": "j-9"})
        assert extras[5] == ({"n": 4}, {"v0": "j-4", "s": "j-9", "v1": "j-3"})
        assert await store.checkpoint_extras(run_id, []) == {}
        found = await store.keyed_results_of(run_id, ["w:1:", "w:22:", "w:22:"])
        assert sorted(key for key, _ in found) == ["w:1:0", "w:1:1", "w:22:0", "w:22:1"]
        assert await store.keyed_results_of(run_id, []) == []

    sync(main())


def test_bulk_reads_and_deletes(store: dnb.Store) -> None:
    """Issue 19: keyed results by prefix, checkpoints found by a field of their extra, and
    deleting checkpoints (the rest stays rebuildable; a run left empty goes) or whole runs."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        run_id = record.run_id
        blobs = [encode(i, KEY, f"v{i}") for i in range(4)]
        drafts = [
            draft(f"after:n{i}", f"n{i}", changes={f"v{i}": blobs[i].hash}, extra={"tag": {"of": f"r{i % 2}"}})
            for i in range(4)
        ]
        keyed = [(f"w:{i}:{j}", blobs[i].hash) for i in range(4) for j in range(2)] + [("other", blobs[0].hash)]
        writes = [WriteRow(f"c{i}", "task", j, "ch", "", blobs[i].hash, 0, "mac") for i in range(4) for j in range(2)]
        await store.commit(Commit(run_id=run_id, checkpoints=drafts, blobs=blobs, idempotent=keyed, writes=writes))
        assert sorted(await store.keyed_results(run_id, "w:1:")) == [("w:1:0", blobs[1].hash), ("w:1:1", blobs[1].hash)]
        assert len(await store.keyed_results(run_id, "w:")) == 8 and await store.keyed_results(run_id, "none") == []
        found = await store.checkpoints_by_extra(("tag", "of"), ["r1"])
        assert [c.seq for c in found] == [2, 4] and {c.run_id for c in found} == {run_id}
        assert await store.checkpoints_by_extra(("tag", "of"), []) == []
        # Deleting seq 1 and 2: seq 3 and 4 still read the state they had, with their own values.
        before = await store.state_at(run_id, 4)
        assert await store.forget_checkpoints({run_id: [(1, "c0"), (2, "c1")]}) == []
        assert [c.seq for c in await store.list_checkpoints(run_id)] == [3, 4]
        assert (await store.state_at(run_id, 4)).manifest == before.manifest
        # The pending writes stored under the deleted checkpoints went with them; keyed results stay.
        left = await store.pending_writes_of(run_id, ["c0", "c1", "c2", "c3"])
        assert sorted((w.checkpoint_id, w.idx) for w in left) == [("c2", 0), ("c2", 1), ("c3", 0), ("c3", 1)]
        assert len(await store.keyed_results(run_id, "w:")) == 8
        assert await store.get_idempotent(run_id, "other") == blobs[0].hash
        # Deleting every checkpoint deletes the run; delete_runs deletes another whole.
        assert await store.forget_checkpoints({run_id: [(3, ""), (4, "")]}) == [run_id]
        assert await store.pending_writes_of(run_id, ["c2", "c3"]) == []
        with pytest.raises(dnb.RunNotFound):
            await store.get_run(run_id)
        other, _ = await store.create_run(new_run())
        await store.delete_runs([other.run_id])
        with pytest.raises(dnb.RunNotFound):
            await store.get_run(other.run_id)

    sync(main())


def test_pending_writes_are_kept_replaced_copied_and_need_their_run(store: dnb.Store) -> None:
    """A pending write with idx >= 0 stored again keeps the first; a special one (idx < 0) is
    replaced by the latest; a run's writes copy to another run; writes of a run that does not
    exist are refused, whether the commit carries only writes or more."""

    async def main() -> None:
        record, _ = await store.create_run(new_run())
        run_id = record.run_id
        blobs = [encode(i, KEY, f"v{i}") for i in range(3)]

        def write(idx: int, value: int, stamp: int = 0) -> WriteRow:
            return WriteRow("c1", "task", idx, "ch", "p", blobs[value].hash, stamp, f"mac{value}")

        await store.commit(Commit(run_id, blobs=blobs, writes=[write(0, 0), write(-3, 0, 1)], seen=record))
        await store.commit(Commit(run_id, writes=[write(0, 1), write(-3, 2, 2)], seen=record))
        found = sorted(await store.pending_writes_of(run_id, ["c1", "c1", "none"]))
        assert found == [write(-3, 2, 2), write(0, 0)]
        # With a run update in the same commit: the general path stores them the same way.
        after = await store.commit(Commit(run_id, writes=[write(1, 1)], run=RunUpdate(status=RunStatus.PAUSED)))
        assert after.run.status is RunStatus.PAUSED
        copy, _ = await store.create_run(new_run())
        await store.copy_pending_writes(run_id, copy.run_id)
        await store.copy_pending_writes(run_id, copy.run_id)
        assert sorted(await store.pending_writes_of(copy.run_id, ["c1"])) == sorted(
            await store.pending_writes_of(run_id, ["c1"])
        )
        await store.delete_runs([run_id])
        assert await store.pending_writes_of(run_id, ["c1"]) == []
        for seen in (record, None):
            with pytest.raises(dnb.RunNotFound):
                await store.commit(Commit(run_id, blobs=blobs, writes=[write(5, 0)], seen=seen))
        assert await store.pending_writes_of(run_id, ["c1"]) == []

    sync(main())


def test_figures_count_runs_open_gates_and_durations_since_a_time(store: dnb.Store) -> None:
    """A server's metrics read runs by status, the open gates and the durations written after a time."""

    async def main() -> None:
        empty = await store.figures(0.0)
        assert (empty.runs, empty.gates, empty.first_gate_at, empty.durations) == ({}, 0, None, [])
        paused, _ = await store.create_run(new_run())
        gate = draft("gate:a", "a", CheckpointStatus.INTERRUPTED)
        opened = _interrupt(paused.run_id, "a", gate.checkpoint_id)
        await store.commit(
            Commit(
                run_id=paused.run_id,
                checkpoints=[gate],
                open_interrupts=[opened],
                run=RunUpdate(status=RunStatus.PAUSED),
            )
        )
        done, _ = await store.create_run(new_run())
        await store.commit(Commit(run_id=done.run_id, checkpoints=[draft(duration=1.5)]))
        between = time.time()
        await store.commit(
            Commit(
                run_id=done.run_id,
                checkpoints=[draft("after:b", "b", duration=0.25)],
                run=RunUpdate(status=RunStatus.COMPLETED),
            )
        )
        figures = await store.figures(0.0)
        assert figures.runs == {"paused": 1, "completed": 1}
        assert (figures.gates, figures.first_gate_at, figures.gate_times_sum) == (
            1,
            opened.created_at,
            opened.created_at,
        )
        # The gate's checkpoint has no duration: only the nodes' ends are read.
        assert sorted((run_id, d) for run_id, _, _, d in figures.durations) == [(done.run_id, 0.25), (done.run_id, 1.5)]
        assert [d for _, _, _, d in (await store.figures(between)).durations] == [0.25]

    sync(main())
