"""``durable_nb.Client``: the service's API from Python, sync and async, raising the library's own errors."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote

from ..errors import ConfigurationError, DurableError, InvalidInput
from .errors import error_from

__all__ = ["FINISHED", "Client"]

FINISHED = ("completed", "failed", "cancelled", "paused")


class Client:
    """A client of ``durable-nb serve`` at ``url``; each method has an async twin named ``a<method>``.

    Errors the server answers come back as the library's own types (``RunNotFound``,
    ``AlreadyResumed``, …), so code written against the library works against the service.

    Args:
        url: The server's address, ``http://host:port`` or ``https://…``.
        token: A bearer token of the scope the calls need (``read``, ``decide`` or ``admin``).
        timeout: Seconds each request may take.

    Raises:
        InvalidInput: ``url`` is not an http(s) address.
        ConfigurationError: httpx is not installed (the ``serve`` extra).

    Example:
        >>> client = dnb.Client("http://localhost:8000", token=token)
        >>> run = client.run("triage", {"ticket": 4813}, idempotency_key="ticket-4813")
        >>> client.wait(run["id"], until="paused")
        >>> client.approve(run["id"], comment="ok")
    """

    def __init__(self, url: str, *, token: str | None = None, timeout: float = 30.0) -> None:
        try:
            import httpx
        except ImportError as error:
            raise ConfigurationError("The client needs httpx: pip install 'durable-nb[serve]'.") from error

        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput(f"Client takes the service's URL (http://host:port), not {url!r}.")
        self.url = url.rstrip("/")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._sync = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)
        self._headers = headers
        self._timeout = timeout

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    # -- the calls -----------------------------------------------------------------------------

    def run(
        self, name: str, input: dict[str, Any] | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Start a run of workflow ``name``; return ``{"id", "status"}`` at once (the server runs it)."""
        return self._call("POST", f"/api/workflows/{name}/runs", {"input": input or {}}, _key(idempotency_key))

    def start_notebook(
        self, path: str, parameters: dict[str, Any] | None = None, run: str | None = None
    ) -> dict[str, Any]:
        """Run the notebook at ``path`` in the server's notebooks folder; return ``{"id", "status", "output"}``.

        The same path and parameters return the same run (resumed if it stopped); others start another.
        """
        return self._call("POST", _notebook_runs(path), {"parameters": parameters or {}, "run": run})

    def get(self, run_id: str) -> dict[str, Any]:
        """Return ``{run_id, status, node_counts, executions}``."""
        return self._call("GET", f"/api/runs/{run_id}")

    def runs(self, name: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """List runs, newest first."""
        return self._call("GET", "/api/runs", params=_params(name=name, status=status))

    def history(self, run_id: str) -> list[dict[str, Any]]:
        """Every checkpoint of a run, in order."""
        return self._call("GET", f"/api/runs/{run_id}/history")

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """A run's events after sequence number ``after``."""
        return self._call("GET", f"/api/runs/{run_id}/events", params={"after": after})

    def approve(
        self, run_id: str, *, comment: str | None = None, value: Any = None, node: str | None = None
    ) -> dict[str, Any]:
        """Approve the gate a run waits at (AlreadyResumed when someone decided first)."""
        return self._call("POST", f"/api/runs/{run_id}/approve", _decision(True, comment, value, node))

    def reject(
        self, run_id: str, *, comment: str | None = None, value: Any = None, node: str | None = None
    ) -> dict[str, Any]:
        """Reject the gate a run waits at."""
        return self._call("POST", f"/api/runs/{run_id}/approve", _decision(False, comment, value, node))

    def resume(self, run_id: str) -> dict[str, Any]:
        """Continue a failed or cancelled run in the server."""
        return self._call("POST", f"/api/runs/{run_id}/resume")

    def cancel(self, run_id: str) -> dict[str, Any]:
        """Cancel a run."""
        return self._call("POST", f"/api/runs/{run_id}/cancel")

    def fork(
        self, run_id: str, checkpoint_id: str | None = None, state: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Branch a run at a checkpoint with state overrides; the server runs the fork."""
        return self._call("POST", f"/api/runs/{run_id}/fork", {"checkpoint_id": checkpoint_id, "state": state or {}})

    def schedule(
        self,
        cron: str,
        *,
        workflow: str | None = None,
        input: dict[str, Any] | None = None,
        notebook: str | None = None,
        parameters: dict[str, Any] | None = None,
        timezone: str = "UTC",
        missed: str = "run-once",
    ) -> dict[str, Any]:
        """Start ``workflow`` (with ``input``) or ``notebook`` (with ``parameters``) at each time of ``cron``;
        return ``{"id", "next_run", "created"}`` (the same schedule again returns the same id)."""
        return self._call(
            "POST", "/api/schedules", _schedule(cron, workflow, input, notebook, parameters, timezone, missed)
        )

    def schedules(self) -> list[dict[str, Any]]:
        """Every schedule of the server's store, the soonest due first, with its next and last runs."""
        return self._call("GET", "/api/schedules")

    def unschedule(self, schedule_id: str) -> dict[str, Any]:
        """Delete a schedule (the runs it started stay)."""
        return self._call("DELETE", f"/api/schedules/{quote(schedule_id, safe='')}")

    def wait(
        self, run_id: str, until: Iterable[str] = FINISHED, *, timeout: float = 600.0, poll: float = 0.2
    ) -> dict[str, Any]:
        """Poll a run until its status is one of ``until``; return it (TimeoutError past ``timeout`` s)."""
        wanted = _statuses(until)
        deadline = time.monotonic() + timeout
        while True:
            found = self.get(run_id)
            if found["status"] in wanted:
                return found
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Run {run_id} is still {found['status']} after {timeout} s.")
            time.sleep(poll)

    # -- async twins ---------------------------------------------------------------------------

    async def arun(
        self, name: str, input: dict[str, Any] | None = None, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        """Async ``run``."""
        return await self._acall("POST", f"/api/workflows/{name}/runs", {"input": input or {}}, _key(idempotency_key))

    async def astart_notebook(
        self, path: str, parameters: dict[str, Any] | None = None, run: str | None = None
    ) -> dict[str, Any]:
        """Async ``start_notebook``."""
        return await self._acall("POST", _notebook_runs(path), {"parameters": parameters or {}, "run": run})

    async def aget(self, run_id: str) -> dict[str, Any]:
        """Async ``get``."""
        return await self._acall("GET", f"/api/runs/{run_id}")

    async def aruns(self, name: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        """Async ``runs``."""
        return await self._acall("GET", "/api/runs", params=_params(name=name, status=status))

    async def ahistory(self, run_id: str) -> list[dict[str, Any]]:
        """Async ``history``."""
        return await self._acall("GET", f"/api/runs/{run_id}/history")

    async def aapprove(
        self, run_id: str, *, comment: str | None = None, value: Any = None, node: str | None = None
    ) -> dict[str, Any]:
        """Async ``approve``."""
        return await self._acall("POST", f"/api/runs/{run_id}/approve", _decision(True, comment, value, node))

    async def areject(
        self, run_id: str, *, comment: str | None = None, value: Any = None, node: str | None = None
    ) -> dict[str, Any]:
        """Async ``reject``."""
        return await self._acall("POST", f"/api/runs/{run_id}/approve", _decision(False, comment, value, node))

    async def aresume(self, run_id: str) -> dict[str, Any]:
        """Async ``resume``."""
        return await self._acall("POST", f"/api/runs/{run_id}/resume")

    async def acancel(self, run_id: str) -> dict[str, Any]:
        """Async ``cancel``."""
        return await self._acall("POST", f"/api/runs/{run_id}/cancel")

    async def afork(
        self, run_id: str, checkpoint_id: str | None = None, state: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Async ``fork``."""
        return await self._acall(
            "POST", f"/api/runs/{run_id}/fork", {"checkpoint_id": checkpoint_id, "state": state or {}}
        )

    async def aschedule(
        self,
        cron: str,
        *,
        workflow: str | None = None,
        input: dict[str, Any] | None = None,
        notebook: str | None = None,
        parameters: dict[str, Any] | None = None,
        timezone: str = "UTC",
        missed: str = "run-once",
    ) -> dict[str, Any]:
        """Async ``schedule``."""
        body = _schedule(cron, workflow, input, notebook, parameters, timezone, missed)
        return await self._acall("POST", "/api/schedules", body)

    async def aschedules(self) -> list[dict[str, Any]]:
        """Async ``schedules``."""
        return await self._acall("GET", "/api/schedules")

    async def aunschedule(self, schedule_id: str) -> dict[str, Any]:
        """Async ``unschedule``."""
        return await self._acall("DELETE", f"/api/schedules/{quote(schedule_id, safe='')}")

    async def await_run(
        self, run_id: str, until: Iterable[str] = FINISHED, *, timeout: float = 600.0, poll: float = 0.2
    ) -> dict[str, Any]:
        """Async ``wait``."""
        wanted = _statuses(until)
        deadline = time.monotonic() + timeout
        while True:
            found = await self.aget(run_id)
            if found["status"] in wanted:
                return found
            if time.monotonic() >= deadline:
                raise TimeoutError(f"Run {run_id} is still {found['status']} after {timeout} s.")
            await asyncio.sleep(poll)

    # -- plumbing ------------------------------------------------------------------------------

    def _call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, params: Any = None
    ) -> Any:
        import httpx

        try:
            response = self._sync.request(method, path, json=body, headers=_typed(method, headers), params=params)
        except httpx.HTTPError as error:
            raise DurableError(f"Cannot reach the service at {self.url}: {error}.") from error
        return _answer(response)

    async def _acall(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None, params: Any = None
    ) -> Any:
        import httpx

        try:
            async with httpx.AsyncClient(base_url=self.url, headers=self._headers, timeout=self._timeout) as client:
                response = await client.request(method, path, json=body, headers=_typed(method, headers), params=params)
        except httpx.HTTPError as error:
            raise DurableError(f"Cannot reach the service at {self.url}: {error}.") from error
        return _answer(response)

    def close(self) -> None:
        """Close the connection."""
        self._sync.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _answer(response: Any) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = response.text
    if response.status_code >= 400:
        raise error_from(body, response.status_code)
    return body


def _notebook_runs(path: str) -> str:
    # Each part escaped, '.' and '..' too: left bare, the HTTP client would resolve them away and
    # the server could not say what was wrong with the path.
    parts = [quote(part, safe="") if part not in (".", "..") else part.replace(".", "%2E") for part in path.split("/")]
    return f"/api/notebooks/{'/'.join(parts)}/runs"


def _typed(method: str, headers: dict[str, str] | None) -> dict[str, str] | None:
    """The headers of a request: a POST is JSON even without a body (the server refuses other types)."""
    return headers if method == "GET" else {"Content-Type": "application/json", **(headers or {})}


def _key(idempotency_key: str | None) -> dict[str, str] | None:
    return {"Idempotency-Key": idempotency_key} if idempotency_key is not None else None


def _params(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _decision(approved: bool, comment: str | None, value: Any, node: str | None) -> dict[str, Any]:
    return {"approved": approved, "comment": comment, "value": value, "node": node}


def _schedule(
    cron: str,
    workflow: str | None,
    input: dict[str, Any] | None,
    notebook: str | None,
    parameters: dict[str, Any] | None,
    timezone: str,
    missed: str,
) -> dict[str, Any]:
    body: dict[str, Any] = {"cron": cron, "timezone": timezone, "missed": missed}
    given = {"workflow": workflow, "input": input, "notebook": notebook, "parameters": parameters}
    return {**body, **{k: v for k, v in given.items() if v is not None}}


def _statuses(until: Iterable[str]) -> set[str]:
    return {until} if isinstance(until, str) else set(until)
