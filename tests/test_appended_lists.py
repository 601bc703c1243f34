"""Values that grow by appending are stored by appending: a commit writes the new items.

A list a loop or an agent extends, and a map's results, are stored in chunks; these tests count
the bytes each commit wrote and check that every state read back is the list that was returned.
"""

from __future__ import annotations

import random

import pytest
from conftest import execute_sql, new_store

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.state.lists import MERGE_BYTES
from durable_nb.engine.state.values import ValueCodec
from durable_nb.store.secret import load_secret


def message(index: int) -> dict[str, object]:
    """A chat message of about a kilobyte that does not compress to nothing."""
    rng = random.Random(index)
    return {"role": "user" if index % 2 else "assistant", "n": index, "text": rng.randbytes(480).hex()}


def talk(store_url: str, turns: int, name: str = "talk") -> dnb.Workflow:
    flow = dnb.Workflow(name, store=store_url)

    @flow.loop(condition=lambda state: True, max_iterations=turns, retry_count=0)
    def turn(state):
        history = state["history"]
        return {"history": [*history, message(len(history))]}

    return flow


def bytes_by_commit(store_url: str) -> list[int]:
    """Bytes of values each commit stored, in commit order (a commit's blobs share its time)."""
    rows = execute_sql(store_url, "SELECT created_at, SUM(size) FROM blobs GROUP BY created_at ORDER BY created_at")
    return [int(total) for _, total in rows]


def test_a_list_extended_each_turn_writes_its_new_items(store_url: str) -> None:
    """300 turns of a growing history store each message a few times, never the history each turn."""
    turns = 300
    run = talk(store_url, turns).run({"history": []})
    assert run.status == "completed"
    expected = [message(i) for i in range(turns)]
    assert run.state["history"] == expected
    assert dnb.get_run(run.id, store=store_url).state["history"] == expected
    per_commit = bytes_by_commit(store_url)
    raw = sum(len(str(m)) for m in expected)
    # Whole lists at each turn would be about turns/2 = 150 times the messages' bytes.
    assert sum(per_commit) < 16 * raw, (sum(per_commit), raw)
    # No commit writes the history again: at most a bounded merge of recent chunks.
    assert max(per_commit) <= MERGE_BYTES + 16_384, max(per_commit)
    early, late = per_commit[20:70], per_commit[-50:]
    assert sum(late) / len(late) <= 1.5 * sum(early) / len(early), (early, late)


def test_a_list_appended_to_in_place_is_stored_by_appending(store_url: str) -> None:
    """A node that appends to the state's own list and returns it writes only the new item."""
    flow = dnb.Workflow("in_place", store=store_url)

    @flow.loop(condition=lambda state: True, max_iterations=200, retry_count=0)
    def turn(state):
        state["history"].append(message(len(state["history"])))
        return {"history": state["history"]}

    run = flow.run({"history": []})
    expected = [message(i) for i in range(200)]
    assert dnb.get_run(run.id, store=store_url).state["history"] == expected
    assert sum(bytes_by_commit(store_url)) < 16 * sum(len(str(m)) for m in expected)


def test_an_item_changed_in_place_is_stored_not_lost(store_url: str) -> None:
    """Never silently wrong: a node that edits an earlier item in place and appends gets the edit stored."""
    flow = dnb.Workflow("edited", store=store_url)

    @flow.loop(condition=lambda state: True, max_iterations=60, retry_count=0)
    def turn(state):
        history = state["history"]
        history.append({"n": len(history)})
        if len(history) == 40:
            history[3]["seen"] = True  # an item stored many commits ago, changed where it lies
        if len(history) == 50:
            history[45:] = [{"n": "rewritten"}] * 5  # the tail replaced, not appended to
        return {"history": history}

    run = flow.run({"history": []})
    stored = dnb.get_run(run.id, store=store_url).state["history"]
    assert stored == run.state["history"]
    assert stored[3] == {"n": 3, "seen": True}
    assert stored[45:50] == [{"n": "rewritten"}] * 5
    assert [item["n"] for item in stored[50:]] == list(range(50, 60))


def test_a_list_shrunk_or_replaced_is_stored_whole(store_url: str) -> None:
    """A list that is not the stored one plus items (shorter, reordered) is stored as it is."""
    flow = dnb.Workflow("reshaped", store=store_url)

    @flow.loop(condition=lambda state: True, max_iterations=30, retry_count=0)
    def turn(state):
        history = [*state["history"], len(state["history"])]
        if len(history) == 20:
            history = history[::-1]
        if len(history) == 25:
            history = history[:10]
        return {"history": history}

    run = flow.run({"history": list(range(18))})
    # The state at every checkpoint reads back as the node returned it then.
    store = dnb.connect(store_url)
    codec = ValueCodec(store, load_secret())
    states = []
    for record in run_sync(store.list_checkpoints(run.id)):
        if record.node_id == "turn":
            state = run_sync(store.state_at(run.id, record.seq))
            states.append(run_sync(codec.load(state.manifest))["history"])
    expected, history = [], list(range(18))
    for _ in range(30):
        history = [*history, len(history)]
        if len(history) == 20:
            history = history[::-1]
        if len(history) == 25:
            history = history[:10]
        expected.append(history)
    assert states == expected
    assert run.state["history"] == expected[-1]


def test_map_results_are_their_items_extended_later(store_url: str) -> None:
    """A map's results are the items as each committed; a loop that extends them appends."""
    flow = dnb.Workflow("mapped", store=store_url)

    @flow.map(items="docs", into="results", max_concurrency=4)
    def read(state, doc):
        return {"doc": doc, "words": len(doc.split())}

    @flow.loop(after="read", condition=lambda state: True, max_iterations=40, retry_count=0)
    def extend(state):
        return {"results": [*state["results"], {"extra": len(state["results"])}]}

    docs = [f"document {i} " * (i % 7 + 1) for i in range(300)]
    run = flow.run({"docs": docs})
    expected = [{"doc": d, "words": len(d.split())} for d in docs] + [{"extra": 300 + i} for i in range(40)]
    assert run.state["results"] == expected
    assert dnb.get_run(run.id, store=store_url).state["results"] == expected
    # Reading from another store object (another process would) assembles the same list.
    other = new_store(store_url)
    try:
        assert run_sync(dnb.aget_run(run.id, store=other)).state["results"] == expected
    finally:
        run_sync(other.close())


def test_a_fork_appends_to_the_list_it_was_forked_with(store_url: str) -> None:
    """A fork reads the parent's chunked list at the fork point and extends it in its own run."""
    flow = talk(store_url, 60)
    run = flow.run({"history": []})
    middle = dnb.history(run.id, store=store_url).iloc[30]["checkpoint_id"]
    forked = flow.fork(run.id, middle)
    assert forked.status == "completed"
    assert forked.state["history"] == [message(i) for i in range(60)]
    assert dnb.get_run(forked.id, store=store_url).state["history"] == forked.state["history"]
    again = flow.fork(forked.id, dnb.history(forked.id, store=store_url).iloc[-5]["checkpoint_id"], state={"extra": 1})
    assert dnb.get_run(again.id, store=store_url).state["history"] == [message(i) for i in range(60)]


def test_a_resumed_run_goes_on_appending(store_url: str) -> None:
    """After a pause and a resume in a new workflow object, the loaded chunks are appended to, not rewritten."""

    def build() -> dnb.Workflow:
        flow = dnb.Workflow("paused", store=store_url)

        @flow.loop(condition=lambda state: True, max_iterations=80, retry_count=0)
        def first(state):
            return {"history": [*state["history"], message(len(state["history"]))]}

        @flow.node(after="first")
        def check(state):
            dnb.gate("go on?")
            return {}

        @flow.loop(after="check", condition=lambda state: True, max_iterations=80, retry_count=0)
        def second(state):
            return {"history": [*state["history"], message(len(state["history"]))]}

        return flow

    run = build().run({"history": []})
    assert run.status == "paused"
    before = len(bytes_by_commit(store_url))
    run = build().approve(run.id)
    assert run.status == "completed"
    expected = [message(i) for i in range(160)]
    assert dnb.get_run(run.id, store=store_url).state["history"] == expected
    after_resume = bytes_by_commit(store_url)[before:]
    assert max(after_resume) <= MERGE_BYTES + 16_384, max(after_resume)


def test_prune_keeps_every_part_of_a_kept_list(store_url: str) -> None:
    """Prune keeps the chunks of a kept list at any depth: map items reached only through the list."""
    flow = dnb.Workflow("pruned", store=store_url)

    @flow.map(items="docs", into="results", max_concurrency=2)
    def read(state, doc):
        return {"doc": doc}

    @flow.loop(after="read", condition=lambda state: True, max_iterations=600, retry_count=0)
    def extend(state):
        return {"results": [*state["results"], len(state["results"])]}

    run = flow.run({"docs": [f"d{i}" for i in range(20)]})
    expected = [{"doc": f"d{i}"} for i in range(20)] + list(range(20, 620))
    assert run.state["results"] == expected
    report = dnb.prune(0, store=store_url)
    assert report.checkpoints > 0, "the run is long enough for prune to drop early checkpoints"
    assert report.blobs > 0
    assert dnb.get_run(run.id, store=store_url).state["results"] == expected


def _a_chunk_of_the_final_list(store_url: str, run_id: str) -> str:
    import json

    [(changes,)] = execute_sql(
        store_url,
        "SELECT changes FROM checkpoints WHERE run_id = ? AND node_id = 'turn' ORDER BY seq DESC LIMIT 1",
        (run_id,),
    )
    root = json.loads(changes)["history"]
    assert root.startswith("ls-")
    [(parts,)] = execute_sql(store_url, "SELECT parts FROM blobs WHERE hash = ?", (root,))
    return json.loads(parts)[0]


def test_a_tampered_chunk_is_refused(store_url: str) -> None:
    """A chunk whose bytes changed is never loaded: TamperedValueError."""
    run = talk(store_url, 40).run({"history": []})
    chunk = _a_chunk_of_the_final_list(store_url, run.id)
    forged = dnb.TamperedValueError
    execute_sql(store_url, "UPDATE blobs SET data = ? WHERE hash = ?", (b'[{"n": 0}]', chunk))
    with pytest.raises(forged, match="signature check"):
        dict(dnb.get_run(run.id, store=store_url).state)


def test_a_missing_chunk_is_named(store_url: str) -> None:
    """A list whose chunk was deleted outside durable_nb raises StoreError saying so."""
    run = talk(store_url, 40).run({"history": []})
    chunk = _a_chunk_of_the_final_list(store_url, run.id)
    execute_sql(store_url, "DELETE FROM blobs WHERE hash = ?", (chunk,))
    with pytest.raises(dnb.StoreError, match="part"):
        dict(dnb.get_run(run.id, store=store_url).state)
