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


SAMPLES = [
    "",
    "a",
    "load",
    "train.v2",
    "cell-3f9a",
    "_x",
    "9lives",
    "-x",
    ".x",
    "a b",
    "é",
    "a" * 64,
    "a" * 65,
    "x/y",
    "a:b",
    "A+b.c-d:rest",
    "+a:",
    ":x",
    "sqlite:///x.db",
    "runs.db",
    "C:\\runs.db",
    "kernel-1234.json",
    "p-" + "0" * 64,
    "js-" + "ab" * 32,
    "ls-" + "f" * 64,
    "x-" + "0" * 64,
    "p-" + "0" * 63,
    "p-" + "A" * 64,
    "p-" + "0" * 64 + "-",
    "abc\n",
]


@pytest.mark.parametrize("text", SAMPLES)
def test_text_checks_say_what_their_regular_expressions_said(text: str) -> None:
    """The set-based checks that replaced regular expressions (compiled at every attach) agree with them
    (but for a trailing newline, which ``$`` let through and they refuse)."""
    import re

    from durable_nb._ids import is_short_id
    from durable_nb.notebook.cell_names import _is_word
    from durable_nb.store.blob_files import _is_address
    from durable_nb.store.url import _has_scheme

    def agrees(check: bool, pattern: str) -> bool:
        said = re.match(pattern, text) is not None
        return check == said or (said and text.endswith("\n"))

    assert agrees(is_short_id(text), r"^[A-Za-z0-9_-]{1,64}$")
    assert agrees(_is_word(text), r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")
    assert agrees(_is_address(text), r"^(?:[pjgrl]|js|ls)-[0-9a-f]{64}$")
    assert agrees(_has_scheme(text), r"^[A-Za-z][A-Za-z0-9+.-]*:")
