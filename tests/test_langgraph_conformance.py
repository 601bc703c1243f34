"""LangGraph's own conformance suite (langgraph-checkpoint-conformance, unchanged) against
DurableSaver on each backend (issue 19 item 2): every capability it knows is detected and passes.

SQLite always runs; PostgreSQL when $DURABLE_NB_TEST_POSTGRES names a server (skipped otherwise,
saying so, by the ``store_url`` fixture).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

pytest.importorskip("langgraph.checkpoint.conformance", reason="pip install langgraph-checkpoint-conformance")

from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES
from langgraph.checkpoint.conformance.report import ProgressCallbacks

from durable_nb.langgraph import DurableSaver

# Capabilities the suite tests that DurableSaver cannot support, with the reason. None today:
# the test fails if one is added here without the report naming it.
UNSUPPORTED: dict[str, str] = {}


def test_conformance_suite_passes_every_capability(store_url: str) -> None:
    """Issue 19 item 2: LangGraph's conformance suite, unchanged, passes every capability."""

    @checkpointer_test(name=f"DurableSaver[{store_url.split(':', 1)[0]}]")
    async def durable_saver() -> AsyncIterator[DurableSaver]:
        yield DurableSaver.from_url(store_url)

    failures: list[str] = []

    def on_result(capability: str, test: str, passed: bool, error: str | None) -> None:
        if not passed:
            failures.append(f"{capability}/{test}:\n{error}")

    report = asyncio.run(validate(durable_saver, progress=ProgressCallbacks(on_test_result=on_result)))
    report.print_report()
    assert not failures, "\n\n".join(failures)
    tested = {cap.value for cap in ALL_CAPABILITIES}
    assert set(report.results) == tested
    for name, result in report.results.items():
        if name in UNSUPPORTED:
            continue
        assert result.detected, f"{name}: not implemented by DurableSaver"
        assert result.passed is True, f"{name}: {result.failures}"
        assert result.tests_passed > 0 and result.tests_failed == 0, name
    assert report.conformance_level() == "FULL"
