"""Notebook runs the service starts: each in a child process, ``durable-nb run-notebook``.

The service finds or creates the run in the store under the very name and key by which the
child's kernel attaches (``%durable run NAME --key KEY``): the run's id is known before the
kernel starts, the same path and parameters find the same run, and other parameters make
another (a schedule's run has a key of its own, made of the schedule and its due time). The
notebook's path (relative to the folder) and its parameters ride with the run in its ``meta``,
so that a decision, a resume or the next server can start the child again; the child resumes
the run after its last committed cell.

Several servers may share one store and one notebooks folder. A server claims a run (see
``engine.runs.claims``) before it starts a child for it, so that of servers racing to start or
recover one run exactly one does; the child takes the claim over, and its kernel takes the run
from the child. The child holds its output file while it lives, so no second child writes it.
A child outlives a server killed under it (it runs in a session of its own) and finishes its run.

When a child exits, the service settles what the command leaves open: a run whose cells all
ran is ended (completed, as ``%durable end`` does), a run left running by a child that
stopped outside any durable cell is marked failed with the child's last words, and a claim
the child never took (another process held the run or its output) is let go.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from ..engine.cells.cell_run import CellRun, new_notebook_run
from ..engine.execution.executors import usable_cores
from ..engine.runs.claims import CLAIM_VARIABLE, claim, unclaim
from ..engine.runs.ownership import owner_alive, this_owner
from ..engine.runs.settle import mark_failed
from ..engine.state.values import ValueCodec
from ..errors import ConfigurationError, DurableError, InvalidInput
from ..headless.inputs import check_parameters
from ..headless.notebook_run import run_key
from ..headless.run_claim import META
from ..model import RunKind, RunRecord, RunStatus
from ..store import Store
from ..store.protocol import Conflict
from ..store.secret import load_secret
from ..store.url import ENV_VAR, parse_url
from .notebook_folder import NotebookFolder

__all__ = ["META", "NotebookRuns"]

log = logging.getLogger("durable_nb.service")

_PAUSED = 3  # the command's exit code for a run paused at a gate (or one held by another process)
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")


def _run_name(notebook: Path, run: str | None) -> str:
    name = notebook.stem if run is None else run
    if not _NAME.match(name):
        fix = 'give a "run" name that is' if run is None else "use"
        raise InvalidInput(
            f"{name!r} cannot name a notebook's run: {fix} letters, digits, '_', '.' and '-' "
            "(up to 64, not starting with '.' or '-')."
        )
    return name


def _check_notebook(notebook: Path) -> None:
    try:
        cells = json.loads(notebook.read_bytes()).get("cells")
    except (OSError, ValueError, AttributeError) as error:
        raise InvalidInput(f"{notebook.name} cannot be read as a notebook ({error}); save it from Jupyter.") from None
    if not isinstance(cells, list):
        raise InvalidInput(f"{notebook.name} is JSON but no notebook (it has no cells); save it from Jupyter.")


def _child_url(store: Store) -> str:
    """The store URL a child opens: the service's own, with a SQLite path made absolute (kernels run elsewhere)."""
    url = getattr(store, "url", None)
    if not isinstance(url, str):
        raise ConfigurationError("Notebook runs need a store opened from a URL (sqlite:///… or postgresql://…).")
    parsed = parse_url(url)
    if parsed.is_memory:
        raise ConfigurationError("Notebook runs cannot share an in-memory store; use a SQLite file or PostgreSQL.")
    if parsed.scheme == "sqlite" and parsed.path is not None:
        return "sqlite:///" + os.path.abspath(parsed.path)
    return url


def _parameters_text(parameters: dict[str, Any]) -> str:
    # Written as the command reads its -f file: YAML when PyYAML is there, else JSON. JSON text
    # through a YAML parser would turn some floats (1e-05) into strings, and so into another key.
    try:
        import yaml
    except ImportError:
        return json.dumps(parameters)
    return str(yaml.safe_dump(parameters, allow_unicode=True, sort_keys=False))


def _last_words(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()[-40:]
    except OSError:
        return ""
    said = [line.strip() for line in lines if line.strip() and not line.startswith("--") and "WARNING" not in line]
    return said[-1] if said else ""


class _Without:
    """A store whose run listing leaves out some runs; everything else is the store's own.

    Between a kernel's exit and its child's, the run's owner is dead while the child still
    works; and a run this folder can start again may lose its owner (a server, a child) between
    this server's look for notebook runs and the workflows' recovery, which marks such runs
    failed and reads the store through this.
    """

    def __init__(self, store: Store, hidden: Callable[[RunRecord], bool]) -> None:
        self._store = store
        self._hidden = hidden

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def list_runs(self, name: str | None = None, statuses: Any = None) -> list[RunRecord]:
        """The store's runs, less the hidden ones."""
        return [run for run in await self._store.list_runs(name, statuses) if not self._hidden(run)]


@dataclass(frozen=True)
class _Spec:
    """What a notebook run's child is started with."""

    notebook: Path
    relative: str
    parameters: dict[str, Any]
    run: str | None
    key: str | None = None  # a schedule's run of one due time; None: the path's and parameters' own


@dataclass
class _Child:
    """A child process working on a run."""

    process: asyncio.subprocess.Process | None = None
    again: bool = False  # decided or resumed while it was alive: start it again once it exits


class NotebookRuns:
    """The notebook runs of one server: at most one child process per run, started again when needed."""

    def __init__(self, folder: NotebookFolder, store: Store, max_children: int | None = None) -> None:
        if max_children is not None and (
            isinstance(max_children, bool) or not isinstance(max_children, int) or max_children < 1
        ):
            raise ConfigurationError(
                f"--max-notebooks takes a number of notebook processes of 1 or more, not {max_children!r}."
            )
        self.folder = folder
        self.store = store
        self.store_url = _child_url(store)
        self.children: dict[str, _Child] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stopping = False
        self.owner = this_owner()  # the token of this server's claims
        # At most this many children at once: a burst of runs must not start a kernel each on one
        # machine; the others wait, pending and unclaimed, for a free place here or on another server.
        self.max_children = max_children if max_children is not None else max(4, 2 * usable_cores())
        self._starting = 0  # claims under way, counted against the limit before their child registers

    def check(self, path: str, parameters: dict[str, Any]) -> str:
        """Refuse what ``start`` would refuse of ``path`` and ``parameters``; return the path in the folder."""
        notebook = self.folder.notebook(path)
        _run_name(notebook, None)
        check_parameters(parameters)
        _check_notebook(notebook)
        return self.folder.relative(notebook)

    async def start(
        self, path: str, parameters: dict[str, Any], run: str | None, key: str | None = None
    ) -> dict[str, Any]:
        """Find or create the run of ``path`` with ``parameters`` (or of ``key``: a schedule's due time);
        start its child unless it is finished, paused, or already worked on. Return ``{"id", "status", "output"}``."""
        notebook = await asyncio.to_thread(self.folder.notebook, path)
        name = _run_name(notebook, run)
        # The same checks as run-notebook's, here before the run exists: a refused call leaves nothing behind.
        check_parameters(parameters)
        await asyncio.to_thread(_check_notebook, notebook)
        spec = _Spec(notebook, self.folder.relative(notebook), parameters, run, key)
        recorded: dict[str, Any] = {"path": spec.relative, "parameters": parameters, "run": run}
        if key is not None:
            recorded["key"] = key
        # The same row `%durable run NAME --key KEY` creates, pending and unowned: the kernel takes it.
        record, _ = await self.store.create_run(
            new_notebook_run(name, key or run_key(notebook, parameters), owned=False, meta={META: recorded})
        )
        await self._claim_and_launch(record, spec)
        output = self.folder.output(spec.relative, record.run_id)
        return {"id": record.run_id, "status": record.status.value, "output": str(output)}

    async def resume(self, run: RunRecord) -> bool:
        """Start the child of one of these notebook runs again (after a decision or a resume); False if not one."""
        child = self.children.get(run.run_id)
        if child is not None:
            child.again = True
            return True
        spec = self._spec_of(run)
        if spec is None:
            return False
        await self._claim_and_launch(run, spec)
        return True

    async def recover(self) -> None:
        """Start again the notebook runs of this folder left pending, or running by a dead owner."""
        for run in await self.store.list_runs(statuses=[RunStatus.RUNNING, RunStatus.PENDING]):
            if run.kind is not RunKind.NOTEBOOK or META not in run.meta or not self._may_start(run):
                continue
            try:
                spec = self._spec_of(run)
            except DurableError:
                spec = None  # its notebook is not (or no longer) in this folder: it waits for a server that has it
            if spec is not None:
                # Claimed first (pending, ours): the workflows' recovery of any server would mark
                # a dead owner's run failed before the new child attaches to it.
                await self._claim_and_launch(run, spec)

    async def stop(self) -> None:
        """Stop the children; their runs stay with a dead owner, for the next server to start again."""
        self.stopping = True
        for child in self.children.values():
            if child.process is not None and child.process.returncode is None:
                # SIGKILL, not SIGTERM or SIGINT: those reach the kernel as an interrupt, which
                # cancels the run. The kernel exits on its own once its parent is gone.
                child.process.kill()
        tasks = list(self.tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- children ------------------------------------------------------------------------------

    def _may_start(self, run: RunRecord) -> bool:
        if run.run_id in self.children or run.status in (RunStatus.COMPLETED, RunStatus.PAUSED):
            return False
        if run.owner == self.owner:
            return True  # a claim of ours whose child is gone
        held = run.status in (RunStatus.RUNNING, RunStatus.PENDING) and run.owner is not None
        return not (held and owner_alive(run.run_id, run.owner, run.lease_until))

    def full(self) -> bool:
        """True while this server runs (or is starting) as many children as it may."""
        return len(self.children) + self._starting >= self.max_children

    async def _claim_and_launch(self, run: RunRecord, spec: _Spec) -> None:
        """Start a child for ``run`` if this server has room and wins the claim on it (other servers may race)."""
        if not self._may_start(run) or self.stopping or self.full():
            return  # a run left for later stays pending: this server's next look, or another server's, starts it
        self._starting += 1  # before any await: a request meanwhile sees the place taken
        try:
            if run.owner != self.owner and await claim(self.store, run, self.owner) is None:
                return  # another server (or a command) claimed or took it first
            await self._launch(run.run_id, spec)
        finally:
            self._starting -= 1

    def _spec_of(self, run: RunRecord) -> _Spec | None:
        """What a run's child starts with, from its meta; None for a run this folder did not start
        (none recorded, a fork, or a folder moved since: the key would find another run)."""
        recorded = run.meta.get(META)
        if not isinstance(recorded, dict) or not isinstance(recorded.get("parameters"), dict):
            return None
        path = str(recorded.get("path"))
        if os.path.isabs(path):  # a run `durable-nb run-notebook` started: runs here if the notebook is in this folder
            inside = Path(path)
            if not inside.is_relative_to(self.folder.root):
                return None
            path = inside.relative_to(self.folder.root).as_posix()
        notebook = self.folder.notebook(path)
        parameters, name, key = recorded["parameters"], recorded.get("run"), recorded.get("key")
        expected = key if isinstance(key, str) else run_key(notebook, parameters)
        if run.idempotency_key != expected or run.name != _run_name(notebook, name):
            return None
        return _Spec(notebook, self.folder.relative(notebook), parameters, name, key if isinstance(key, str) else None)

    async def _launch(self, run_id: str, spec: _Spec) -> None:
        if run_id in self.children or self.stopping:
            return
        child = _Child()
        self.children[run_id] = child  # before any await: a request meanwhile finds it
        try:
            child.process = await self._spawn(run_id, spec)
        except OSError as error:
            del self.children[run_id]
            await unclaim(self.store, run_id, self.owner)
            raise ConfigurationError(f"Cannot start the process of notebook {spec.relative}: {error}.") from error
        task = asyncio.get_running_loop().create_task(self._watch(run_id, spec, child))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _spawn(self, run_id: str, spec: _Spec) -> asyncio.subprocess.Process:
        output = self.folder.output(spec.relative, run_id)
        output.parent.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "durable_nb.cli", "run-notebook", str(spec.notebook), "-o", str(output)]
        if spec.run is not None:
            command += ["--run", spec.run]
        if spec.key is not None:
            command += ["--key", spec.key]
        if spec.parameters:
            parameters = output.with_suffix(".parameters.yaml")
            # Renamed into place: the child of another server (one that died) may be reading it.
            partial = output.with_name(f".{output.name}.{os.getpid()}.parameters")
            partial.write_text(_parameters_text(spec.parameters), encoding="utf-8")
            os.replace(partial, parameters)
            command += ["-f", str(parameters)]
        with open(output.with_suffix(".log"), "ab") as said:
            said.write(f"-- {datetime.now(UTC).isoformat()} started for run {run_id}\n".encode())
            said.flush()
            # A session of its own: a Ctrl-C meant for the server does not interrupt the kernel.
            # The store's URL (a PostgreSQL password, say) goes in the child's environment, not on its
            # command line, which every user of the machine can read (ps).
            return await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=said,
                stderr=said,
                start_new_session=True,
                env={**os.environ, ENV_VAR: self.store_url, CLAIM_VARIABLE: self.owner},
            )

    async def _watch(self, run_id: str, spec: _Spec, child: _Child) -> None:
        assert child.process is not None
        code = await child.process.wait()
        # Registered until settled: recovery (ours and the workflows') leaves the run alone meanwhile.
        try:
            if not self.stopping:
                await self._settle(run_id, code, spec, child)
        except Exception:  # the run keeps what it committed; the next recovery looks again
            log.exception("settling notebook run %s failed", run_id)
        finally:
            if self.children.get(run_id) is child:
                del self.children[run_id]
        if child.again and not self.stopping:
            try:
                await self._claim_and_launch(await self.store.get_run(run_id), spec)
            except Exception:
                log.exception("starting notebook run %s again failed", run_id)
        if not self.stopping and not self.full():
            try:  # a place is free: a run waiting for one starts now, not at the next recovery
                await self.recover()
            except Exception:
                log.exception("starting the notebook runs that wait failed; trying again later")

    async def _settle(self, run_id: str, code: int, spec: _Spec, child: _Child) -> None:
        """End a run whose child ran every cell; fail one its child left running; let go of a claim it never took."""
        run = await self.store.get_run(run_id)
        if run.owner == self.owner and (child.again or code in (0, _PAUSED)):
            # Another process held the run or its output (or it was decided meanwhile): it waits, unowned.
            await unclaim(self.store, run_id, self.owner)
            return
        held = run.owner != self.owner and owner_alive(run.run_id, run.owner, run.lease_until)
        if child.again or held:
            return  # decided or resumed meanwhile: it starts again; or in a live process's hands
        if code == 0 and run.status in (RunStatus.RUNNING, RunStatus.PENDING):
            await (
                await CellRun.attach(self.store, ValueCodec(self.store, load_secret()), run.name, run_id=run_id)
            ).end()
        elif code not in (0, _PAUSED) and run.status in (RunStatus.RUNNING, RunStatus.PENDING):
            said = self.folder.output(spec.relative, run_id).with_suffix(".log")
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            words = _last_words(said)
            await self._fail(
                run,
                f"The notebook process {how}{': ' + words if words else ''}. Start the notebook again "
                f"(or resume the run) once fixed; its log is {said}.",
            )

    def recovery_view(self) -> Store:
        """The store as the workflows' recovery should read it: without the runs of live children here,
        nor those this folder can start again (this server's or the next one's recovery does)."""
        return cast(Store, _Without(self.store, lambda run: run.run_id in self.children or self._restartable(run)))

    def _restartable(self, run: RunRecord) -> bool:
        if run.kind is not RunKind.NOTEBOOK or META not in run.meta:
            return False
        try:
            return self._spec_of(run) is not None
        except DurableError:
            return False

    async def _fail(self, run: RunRecord, message: str) -> None:
        try:
            await self.store.commit(mark_failed(run, message, "NotebookFailed", owner=run.owner))
        except Conflict:
            pass  # it moved on meanwhile: nothing to settle
