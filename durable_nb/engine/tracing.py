"""OpenTelemetry spans for runs, nodes, cells, map items and agents (the optional extra ``otel``).

durable_nb behaves as a library: it asks the OpenTelemetry API's global tracer provider for its
tracer and never configures an SDK or an exporter; the application does. Without
``opentelemetry-api`` installed every function here returns at once; with the API and no SDK
the spans are the API's non-recording ones, and nothing is attached to them. The API is not
imported until something in the process has imported it (or names a provider in the
environment): before that no provider can be set, every span would be a no-op one, and a
kernel attaching to a run does not pay for the import.

A run's first span is stored with the run (its trace and span id, in the run's ``meta``), so a
run resumed by another process after a crash continues that trace: its run span is a child of
the first one and links to it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

# The API's trace and context modules, once the process has loaded them (see _api).
_trace: Any = None
_context: Any = None

__all__ = [
    "AGENT_TOOL",
    "AGENT_TURN",
    "CELL",
    "CHECKPOINT_ID",
    "GATE",
    "MAP_ITEM",
    "NODE",
    "RUN",
    "RUN_ID",
    "TRACE_META",
    "current",
    "enter",
    "error_status",
    "event",
    "failed",
    "finish",
    "name_checkpoint",
    "run_span",
    "start",
    "trace_meta",
    "traced",
]

RUN = "durable_nb.run"
NODE = "durable_nb.node"
CELL = "durable_nb.cell"
MAP_ITEM = "durable_nb.map_item"
AGENT_TURN = "durable_nb.agent.turn"
AGENT_TOOL = "durable_nb.agent.tool"
# The name of the span event a gate adds when it pauses a run and when a decision resumes it.
GATE = "durable_nb.gate"

RUN_ID = "durable_nb.run_id"
CHECKPOINT_ID = "durable_nb.checkpoint_id"
NODE_ID = "durable_nb.node"
ITEM_INDEX = "durable_nb.item_index"

# The key of a run's ``meta`` that holds its first span's context.
TRACE_META = "trace"

_tracer: Any = None

# Whether the environment names a tracer provider, read once per process: a lookup in os.environ
# for every span would cost more than the rest of a no-op span.
_provider_named: bool | None = None


def _api() -> Any:
    """Return OpenTelemetry's trace API once the process uses it; None before that and without it."""
    global _trace, _context, _provider_named
    if _trace is not None:
        return _trace
    if _provider_named is None:
        _provider_named = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
    # A provider is set through opentelemetry.trace (or named by this variable): until one of
    # them is there, spans are the API's no-ops and importing it is all they would cost.
    if "opentelemetry.trace" in sys.modules or _provider_named:
        try:
            from opentelemetry import context, trace
        except ImportError:  # the extra is not installed: spans cost a test of a dict
            _provider_named = False  # not tried again for every span
            return None
        _trace, _context = trace, context
    return _trace


def _get_tracer() -> Any:
    """Return durable_nb's tracer, asked for once: the API's proxy follows a provider set later."""
    global _tracer
    if _tracer is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found: str | None = version("durable-nb")
        except PackageNotFoundError:  # run from a source tree
            found = None
        _tracer = _trace.get_tracer("durable_nb", found)
    return _tracer


def start(
    name: str,
    run_id: str | None,
    node: str | None = None,
    item_index: int | None = None,
    *,
    context: Any = None,
    links: Any = None,
    **attributes: Any,
) -> Any:
    """Start a span (not made current) with the run's id and the node's; None without the API."""
    if _api() is None:
        return None
    span = _get_tracer().start_span(name, context=context, links=links)
    # Attributes are built only for a span that keeps them (an SDK is configured and sampled it).
    if span.is_recording():
        if run_id is not None:
            span.set_attribute(RUN_ID, run_id)
        if node is not None:
            span.set_attribute(NODE_ID, node)
        if item_index is not None:
            span.set_attribute(ITEM_INDEX, item_index)
        for key, value in attributes.items():
            if value is not None:
                span.set_attribute(f"durable_nb.{key}", value)
    return span


def failed(span: Any, error: BaseException) -> None:
    """Mark ``span`` as failed by ``error``, as OpenTelemetry's conventions say."""
    if span is not None and span.is_recording():
        span.record_exception(error)
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, f"{type(error).__name__}: {error}"))


def name_checkpoint(span: Any, checkpoint_id: str | None) -> None:
    """Name on ``span`` the checkpoint its work was committed in."""
    if checkpoint_id is not None and span is not None and span.is_recording():
        span.set_attribute(CHECKPOINT_ID, checkpoint_id)


def error_status(span: Any, description: str) -> None:
    """Set ``span``'s status to ERROR for a failure that raised nothing (a tool's error handed to a model)."""
    if span is not None and span.is_recording():
        span.set_status(_trace.Status(_trace.StatusCode.ERROR, description))


def finish(span: Any, checkpoint_id: str | None = None, error: BaseException | None = None) -> None:
    """End ``span``, naming the checkpoint its work was committed in, and the error it failed with."""
    if span is None or not span.is_recording():
        return
    name_checkpoint(span, checkpoint_id)
    if error is not None:
        failed(span, error)
    span.end()


def event(span: Any, name: str, run_id: str | None, checkpoint_id: str | None, **attributes: Any) -> None:
    """Add an event to ``span`` (the current span when None) with the run and checkpoint ids."""
    if _api() is None:
        return
    if span is None:
        span = _trace.get_current_span()
    if not span.is_recording():
        return
    found = {f"durable_nb.{k}": v for k, v in attributes.items() if v is not None}
    if run_id is not None:
        found[RUN_ID] = run_id
    if checkpoint_id is not None:
        found[CHECKPOINT_ID] = checkpoint_id
    span.add_event(name, found)


def enter(span: Any) -> None:
    """Make ``span`` current in this context for good (a copied context that is dropped after)."""
    if span is not None and span.get_span_context().is_valid:
        _context.attach(_trace.set_span_in_context(span))


@contextlib.contextmanager
def current(span: Any) -> Iterator[None]:
    """Make ``span`` current while the block runs (it is not ended here)."""
    if span is None or not span.get_span_context().is_valid:
        yield
        return
    token = _context.attach(_trace.set_span_in_context(span))
    try:
        yield
    finally:
        _context.detach(token)


@contextlib.contextmanager
def traced(name: str, run_id: str | None, node: str | None = None, **attributes: Any) -> Iterator[Any]:
    """Run the block in a current span that records the exception leaving it, and end it."""
    span = start(name, run_id, node, **attributes)
    try:
        with current(span):
            yield span
    except BaseException as error:
        finish(span, error=error if isinstance(error, Exception) else None)
        raise
    finish(span)


def _stored_context(meta: dict[str, Any] | None) -> Any:
    """Return the span context stored with a run, if any and readable."""
    stored = (meta or {}).get(TRACE_META)
    if not isinstance(stored, dict):
        return None
    try:
        found = _trace.SpanContext(
            trace_id=int(stored["trace_id"], 16),
            span_id=int(stored["span_id"], 16),
            is_remote=True,
            trace_flags=_trace.TraceFlags(int(stored.get("flags", 1))),
        )
    except (KeyError, TypeError, ValueError):
        return None  # a meta written by something else: start a trace of its own
    return found if found.is_valid else None


def run_span(run_id: str, meta: dict[str, Any] | None = None) -> Any:
    """Start the span of a run; a run whose first span was stored continues that span's trace and links to it."""
    if _api() is None:
        return None
    first = _stored_context(meta)
    if first is None:
        return start(RUN, run_id)
    parent = _trace.set_span_in_context(_trace.NonRecordingSpan(first))
    return start(RUN, run_id, context=parent, links=[_trace.Link(first)], resumed=True)


def trace_meta(span: Any) -> dict[str, Any]:
    """Return the run ``meta`` that stores ``span`` as the run's first span (empty when it is not recorded)."""
    if span is None:
        return {}
    found = span.get_span_context()
    if not found.is_valid:
        return {}
    return {
        TRACE_META: {
            "trace_id": format(found.trace_id, "032x"),
            "span_id": format(found.span_id, "016x"),
            "flags": int(found.trace_flags),
        }
    }
