"""A support-triage workflow on the embedded SQLite store: pause for approval, decide, fork, read history.

Pass a folder to keep the store: run again with the same folder and the idempotency key
returns the first run instead of starting a second.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import durable_nb as dnb


def build(store_url: str) -> dnb.Workflow:
    """Define the README's workflow example (The workflow API) with a side effect guarded by @idempotent."""
    flow = dnb.Workflow("support-triage", store=store_url)

    @dnb.idempotent
    def send_reply(ticket: str, text: str) -> str:
        print(f"    (sending the reply for {ticket!r} — this happens once per run)")
        return f"msg-{abs(hash((ticket, text))) % 10_000:04d}"

    @flow.node()
    def classify(state):
        category = "billing" if "charged" in state["ticket"].lower() else "general"
        return {"category": category}

    @flow.node(after="classify", retry_count=3, timeout_seconds=30)
    def draft(state):
        tone = state.get("tone", "friendly")
        return {"draft_reply": f"[{tone}] Sorry about the {state['category']} issue — we refunded you."}

    @flow.node(after="draft")
    def review(state):
        decision = dnb.gate("approve_reply", context={"draft": state["draft_reply"]})
        return {"approved": decision.approved, "reviewer": decision.by}

    @flow.node(after="review")
    def send(state):
        if not state["approved"]:
            return {"sent": None}
        return {"sent": send_reply(state["ticket"], state["draft_reply"])}

    return flow


def main(folder: str | None = None) -> None:
    """Walk through a run: pause at the gate, approve from the store, resume, fork, history."""
    folder = folder or tempfile.mkdtemp(prefix="durable-nb-demo-")
    store_url = f"sqlite:///{Path(folder).resolve()}/runs.db"
    flow = build(store_url)
    print(f"store: {store_url}")

    run = flow.run({"ticket": "Charged twice for March"}, idempotency_key="ticket-8841")
    print(f"1. started run {run.id}: {run.status}, waiting at {run.pending_interrupt}")

    if run.status == "paused":
        # Any process can decide, without the workflow's code (as the CLI will).
        dnb.approve(run.id, comment="refund confirmed", by="alice", store=store_url)
        print("2. approved from the store; the run waits for a process with its code")
        run = flow.resume(run.id)
    print(f"3. resumed: {run.status}; state = {run.state}")

    first = dnb.history(run.id, store=store_url)
    fork_at = first.loc[first["step"] == "after:classify", "checkpoint_id"].item()
    what_if = flow.fork(run.id, fork_at, state={"tone": "formal"})
    print(f"4. forked at after:classify with tone='formal': {what_if.status}, waiting at {what_if.pending_interrupt}")
    what_if = flow.reject(what_if.id, comment="too stiff", by="bob")
    print(f"5. rejected the fork's draft: {what_if.status}; sent = {what_if.state['sent']}")

    print("\nhistory of the first run:")
    print(first[["seq", "step", "status", "duration"]].to_string(index=False))
    print("\nruns in the store:")
    print(dnb.runs(store=store_url)[["run_id", "status", "parent_run_id"]].to_string(index=False))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
