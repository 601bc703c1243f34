"""The examples in the public docstrings (rendered in the API reference) run as written.

They are read as doctest examples and run in order in one namespace, in an empty folder on a store of
its own, as a reader trying them one after the other would: the workflow defined by ``Workflow``'s
example gains the nodes of ``node``'s and ``gate``'s, the run it pauses is the one ``approve``
decides, and so on. ``PREPARE`` holds what a reader would have in hand besides (a paused run, a
fork, their own payments client); an example that cannot run here says why in ``NOT_RUN``.
"""

from __future__ import annotations

import contextlib
import doctest
import inspect
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from readmekit import SETUPS

import durable_nb

# The examples, in the order they build on each other.
ORDER = [
    "Workflow",
    "Workflow.node",
    "gate",
    "interrupt",
    "approve",
    "runs",
    "history",
    "compare",
    "idempotent",
    "prune",
    "recover",
    "agent",
    "connect",
]
# What a reader has in hand before an example (run before it, in the same namespace).
PREPARE = {
    "approve": 'run = flow.run({"ticket": "Charged twice", "draft": "We are on it"})',
    "compare": "fork = dnb.fork(run.id)",
    "idempotent": 'import types\npayments = types.SimpleNamespace(charge=lambda customer, cents: "ch_1")',
    "agent": (
        "import openai\n"
        "def lookup_order(order_id: str) -> dict:\n"
        '    """Look up an order."""\n'
        '    return {"order_id": order_id, "status": "shipped"}\n'
    ),
}
CHECKER = doctest.OutputChecker()
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
NOT_RUN = {"Client": "needs a running server: tests/test_service_readme.py makes the same calls against one"}


def _documented() -> dict[str, Any]:
    """Every public name (and public method of a public class) whose docstring holds an example."""
    found: dict[str, Any] = {}
    for name in durable_nb.__all__:
        value = getattr(durable_nb, name)
        members = [(name, value)]
        if isinstance(value, type):
            members += [(f"{name}.{m}", v) for m, v in inspect.getmembers(value) if not m.startswith("_")]
        for shown, member in members:
            doc = getattr(member, "__doc__", None) or ""
            # An async twin shares its sync twin's docstring: its example is the sync one's.
            if ">>>" in doc and not (shown.startswith("a") and shown[1:] in durable_nb.__all__):
                found[shown] = member
    return found


def test_every_example_is_run_or_says_why_not() -> None:
    assert set(_documented()) == set(ORDER) | set(NOT_RUN)


@pytest.fixture
def reader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An empty folder, a store of its own, and the scripted model server standing in for OpenAI."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("DURABLE_NB_STORE", f"sqlite:///{tmp_path / 'runs.db'}")
    env: dict[str, str] = {}
    with SETUPS["scripted-openai"](tmp_path, env):
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        yield


def test_the_docstring_examples_run_in_order(reader: None) -> None:
    documented = _documented()
    namespace: dict[str, Any] = {"dnb": durable_nb, "__name__": "docstring_examples"}
    parser = doctest.DocTestParser()
    for name in ORDER:
        if name in PREPARE:
            exec(PREPARE[name], namespace)
        for example in parser.get_examples(inspect.getdoc(documented[name]) or ""):
            shown = io.StringIO()
            try:
                with contextlib.redirect_stdout(shown):
                    exec(compile(example.source, f"<{name} docstring>", "single"), namespace)
            except Exception as error:  # noqa: BLE001 - the failing example is the report
                pytest.fail(f"{name}'s example failed at {example.source.strip()!r}: {error!r}")
            # What an example says it shows, it shows (an example that shows nothing is not compared).
            if example.want:
                assert CHECKER.check_output(example.want, shown.getvalue(), FLAGS), (name, shown.getvalue())
