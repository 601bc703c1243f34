"""The definition half of a workflow: nodes, loops, switches and maps added to its graph."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from ...errors import ConfigurationError
from ..execution.executors import check_executor
from .graph import Graph, NodeSpec

__all__ = ["GraphDefinition"]

F = TypeVar("F", bound=Callable[..., Any])


class GraphDefinition:
    """Registers node functions on a named graph it owns; ``Workflow`` adds running them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._graph = Graph(name)

    @property
    def nodes(self) -> list[str]:
        """Node ids in definition order."""
        return list(self._graph.nodes)

    def node(
        self,
        fn: F | None = None,
        *,
        after: str | Callable[..., Any] | Iterable[str | Callable[..., Any]] | None = None,
        retry_count: int = 1,
        timeout_seconds: float | None = None,
        label: str | None = None,
        name: str | None = None,
        writes: Iterable[str] = (),
        executor: Any = None,
    ) -> Any:
        """Register a node function ``fn(state) -> dict of updates`` (sync or async).

        Used as ``@flow.node`` or ``@flow.node(...)``. Nodes whose dependencies are met run
        together; each is committed on its own as ``after:<node>``.

        Args:
            fn: The function (given when used as ``@flow.node`` without parentheses).
            after: The nodes (names or functions) it waits for; none: it starts the run.
            retry_count: Extra attempts after a failure, with backoff 1, 2, 4, … 30 s (default 1).
            timeout_seconds: A hard wall-clock limit per attempt; an overrun is a failed attempt.
            label: The name shown in errors and views (default: the node's name).
            name: The node's name (default: the function's).
            writes: The state keys it returns, so that two nodes of one wave writing one key are
                refused before anything runs.
            executor: A Dask client, any ``concurrent.futures.Executor``, or ``"local"``: where
                the function runs (default: the workflow's executor, else here).

        Returns:
            The function, unchanged (or a decorator that registers it).

        Raises:
            ConfigurationError: An argument is of the wrong kind or a name is taken.

        Example:
            >>> @flow.node(after="classify", retry_count=3, timeout_seconds=30)
            ... def draft(state):
            ...     return {"draft": "We are on it"}
        """
        if isinstance(writes, str) or not isinstance(writes, Iterable) or not all(isinstance(k, str) for k in writes):
            raise ConfigurationError(f"writes= takes a list of the state names the node returns, not {writes!r}.")
        return self._register(
            "node",
            fn,
            after,
            retry_count,
            timeout_seconds,
            label,
            name,
            writes=tuple(writes),
            executor=check_executor(executor),
        )

    def loop(
        self,
        fn: F | None = None,
        *,
        condition: Callable[[dict[str, Any]], Any],
        max_iterations: int = 5,
        after: str | Callable[..., Any] | Iterable[str | Callable[..., Any]] | None = None,
        retry_count: int = 1,
        timeout_seconds: float | None = None,
        label: str | None = None,
        name: str | None = None,
    ) -> Any:
        """Register a loop node: its body runs, then runs again while ``condition(state)`` holds.

        Each iteration is committed on its own; the counter is kept in state as
        ``__loop_<node>``, and ``max_iterations`` (default 5) ends the loop whatever the condition.
        """
        if not callable(condition):
            raise ConfigurationError("A loop needs condition=callable(state) -> bool.")
        if not isinstance(max_iterations, int) or isinstance(max_iterations, bool) or max_iterations < 1:
            raise ConfigurationError(f"max_iterations must be a whole number >= 1, not {max_iterations!r}.")
        return self._register(
            "loop",
            fn,
            after,
            retry_count,
            timeout_seconds,
            label,
            name,
            condition=condition,
            max_iterations=max_iterations,
        )

    def switch(
        self,
        fn: F | None = None,
        *,
        after: str | Callable[..., Any] | Iterable[str | Callable[..., Any]] | None = None,
        branches: dict[str, str | Iterable[str]] | None = None,
        label: str | None = None,
        name: str | None = None,
    ) -> Any:
        """Register a routing node: ``fn(state)`` picks which of the nodes after it run.

        It returns a node name, a list of them or None; with ``branches`` it returns a key of
        that mapping instead. Untaken branches are ``skipped``; a switch writes no checkpoint.
        """
        if branches is not None and not (
            isinstance(branches, Mapping)
            and all(
                isinstance(t, str) or (isinstance(t, Iterable) and all(isinstance(n, str) for n in t))
                for t in branches.values()
            )
        ):
            raise ConfigurationError(
                "branches= maps each value the switch returns to a node name or a list of them "
                f"(e.g. {{'refund': 'refund_node'}}), not {branches!r}."
            )
        extra = {"branches": None if branches is None else dict(branches)}
        return self._register("switch", fn, after, 0, None, label, name, extra=extra)

    def map(
        self,
        fn: F | None = None,
        *,
        items: str | Callable[[dict[str, Any]], Iterable[Any]],
        into: str | None = None,
        after: str | Callable[..., Any] | Iterable[str | Callable[..., Any]] | None = None,
        max_concurrency: int | None = None,
        retry_count: int = 1,
        timeout_seconds: float | None = None,
        label: str | None = None,
        name: str | None = None,
        executor: Any = None,
    ) -> Any:
        """Register a map node: ``fn(state, item)`` runs once per item, each result committed on its own.

        ``items`` is a state key or ``callable(state)``; the results, in item order, become the
        state value ``into`` (default: the node's name). After a crash only unfinished items run.
        ``executor`` (a Dask client, any ``concurrent.futures.Executor``, or "local") runs the items
        there; ``max_concurrency`` caps the items in flight (default 8 here, all of them on an executor).
        """
        if not (isinstance(items, str) or callable(items)):
            raise ConfigurationError("A map needs items= a state key or callable(state) -> items.")
        check_concurrency(max_concurrency)
        return self._register(
            "map",
            fn,
            after,
            retry_count,
            timeout_seconds,
            label,
            name,
            items=items,
            into=into,
            max_concurrency=max_concurrency,
            executor=check_executor(executor),
        )

    def _register(
        self,
        kind: str,
        fn: Any,
        after: Any,
        retry_count: Any,
        timeout_seconds: Any,
        label: str | None,
        name: str | None,
        **options: Any,
    ) -> Any:
        if not isinstance(retry_count, int) or isinstance(retry_count, bool) or retry_count < 0:
            raise ConfigurationError(f"retry_count must be a whole number >= 0, not {retry_count!r}.")
        if timeout_seconds is not None and (
            not isinstance(timeout_seconds, (int, float))
            or isinstance(timeout_seconds, bool)
            or not math.isfinite(timeout_seconds)
            or timeout_seconds <= 0
        ):
            raise ConfigurationError(f"timeout_seconds must be a positive number, not {timeout_seconds!r}.")
        for option, value in (("name", name), ("label", label), ("into", options.get("into"))):
            if value is not None and (not isinstance(value, str) or not value):
                raise ConfigurationError(f"{option}= takes non-empty text, not {value!r}.")
        dependencies = _dependency_ids(after)

        def register(function: F) -> F:
            if not callable(function):
                raise ConfigurationError(f"Workflow {self.name!r} registers functions as nodes, not {function!r}.")
            node_id = name or function.__name__
            self._graph.add(
                NodeSpec(
                    node_id=node_id,
                    fn=function,
                    after=dependencies,
                    retry_count=retry_count,
                    timeout_seconds=None if timeout_seconds is None else float(timeout_seconds),
                    label=label or node_id,
                    kind=kind,
                    **options,
                )
            )
            return function

        return register(fn) if fn is not None else register


def check_concurrency(max_concurrency: Any) -> None:
    """Refuse a ``max_concurrency`` that is not None or a whole number >= 1."""
    if max_concurrency is not None and (
        not isinstance(max_concurrency, int) or isinstance(max_concurrency, bool) or max_concurrency < 1
    ):
        raise ConfigurationError(f"max_concurrency must be a whole number >= 1, not {max_concurrency!r}.")


def _dependency_ids(after: Any) -> tuple[str, ...]:
    if after is None:
        return ()
    if isinstance(after, str) or callable(after):
        items = [after]
    elif isinstance(after, Iterable):
        items = list(after)
    else:
        raise ConfigurationError(f"after= takes a node name, a node function or a list of them, not {after!r}.")
    ids = []
    for item in items:
        if isinstance(item, str):
            ids.append(item)
        elif callable(item) and hasattr(item, "__name__"):
            ids.append(item.__name__)
        else:
            raise ConfigurationError(f"after= takes node names or node functions, not {item!r}.")
    return tuple(ids)
