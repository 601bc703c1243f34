"""Run and checkpoint ids: UUIDv7, in creation order, never repeated, also across fork()."""

from __future__ import annotations

import os
import uuid

import pytest

from durable_nb._ids import new_id


def test_ids_are_uuid7_in_creation_order_and_distinct() -> None:
    ids = [new_id() for _ in range(10_000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert {uuid.UUID(i).version for i in ids} == {7}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_forked_child_draws_ids_of_its_own() -> None:
    """The random part of the next id is not inherited: parent and child never make the same one."""
    new_id()  # the parent holds random bytes for its next ids
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next ids and leave at once
        try:
            os.write(write, " ".join(new_id() for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        child = pipe.read().split()
    parent = [new_id() for _ in range(5)]
    assert len(child) == 5
    # The random bits (after the millisecond and the counter) differ pairwise.
    assert not {c[-12:] for c in child} & {p[-12:] for p in parent}
