"""Drive a run on an engine thread while the calling thread watches it.

Under the sync API the calling thread's loop has nothing to do but wait for the run. So the run's
waves go to an engine thread (a node thread with a loop of its own) that runs each lone sync node
inline, then its commit: no thread switch per node. The calling thread keeps what a node must not
hold up: the run's watch (lease renewal, cancels from this process or another) and Ctrl-C. When
the run is taken away mid-node it answers at once; the engine's node is abandoned, and its late
commit is refused (the run is marked abandoned here, and the store checks status and owner).
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Protocol

from ..._loop import run_on_engine_loop
from ...model import RunRecord
from ..agents.steps import AgentSteps
from ..execution.attempts import NODE_THREADS
from ..runs.watch import Watch
from .run_commits import RunCommits

__all__ = ["drive_on_engine_thread"]


class Waves(Protocol):
    """What the engine thread needs of a run's runner (which imports this module)."""

    commits: RunCommits
    attempter: Any

    def abandon(self) -> None:
        """Stop the run: it was cancelled or taken over."""
        ...

    async def run_waves(self, *, watched: bool = True) -> RunRecord:
        """Run the waves on this loop; ``watched``: with a watch of its own."""
        ...


class _Engine:
    """The engine thread's loop and the task running the waves, once it has started."""

    __slots__ = ("loop", "task")

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None

    def call(self, fn: Any) -> None:
        """Run ``fn`` on the engine's loop when it gets to it (nothing, before it started or after it closed)."""
        if self.loop is None:
            return  # not started: its first wave sees the run abandoned
        try:
            self.loop.call_soon_threadsafe(fn)
        except RuntimeError:
            pass  # its loop is closed: it has ended


async def drive_on_engine_thread(runner: Waves) -> RunRecord:
    """Run ``runner``'s waves on an engine thread; watch the run here; return the run as it ends."""
    commits = runner.commits
    loop = asyncio.get_running_loop()
    engine = _Engine()
    taken = loop.create_future()

    async def waves() -> RunRecord:
        engine.loop, engine.task = asyncio.get_running_loop(), asyncio.current_task()
        # Agents of inline nodes write on the watching loop (this one is busy with their node):
        # one loop, so writes from several threads of a node still go one at a time.
        runner.attempter.inline = AgentSteps(loop, commits.agent_steps, commits.values)
        return await runner.run_waves(watched=False)

    def abandon() -> None:
        # The run was cancelled or taken over: the engine's next commit is refused from now on,
        # and the caller hears at once, even while a node runs inline there.
        commits.abandoned = True
        engine.call(runner.abandon)
        if not taken.done():
            taken.set_result(None)

    # The engine sees this thread's context variables (the run's span, how an interrupt settles).
    job = NODE_THREADS.submit(contextvars.copy_context().run, run_on_engine_loop, waves())
    ended = NODE_THREADS.wait(job, loop)
    if ended is None:
        return job.outcome()  # type: ignore[no-any-return]
    try:
        with Watch(commits.store, commits.run.run_id, commits.owner, abandon) as commits.watch:
            await asyncio.wait((ended, taken), return_when=asyncio.FIRST_COMPLETED)
    except (asyncio.CancelledError, KeyboardInterrupt):
        # Interrupted here (Ctrl-C lands on this thread): record the cancel now, without waiting
        # for a node the engine may be running; the engine stops at its next await.
        commits.abandoned = True
        if engine.task is not None:
            engine.call(engine.task.cancel)
        ended.cancel()
        await asyncio.shield(commits.record_interrupt())
        raise
    if ended.done():
        return ended.result()  # type: ignore[no-any-return]
    ended.cancel()  # the engine's late answer is dropped
    # Someone else settled the run (a cancel, a takeover): report it as it now stands.
    return await commits.store.get_run(commits.run.run_id)
