"""Record what a cell writes to stdout and stderr as the front end receives it, and write it again.

In a kernel, ipykernel buffers each stream and sends what it holds as one ``stream`` message
when it flushes: on an interval, before a display, at the end of the cell. Which messages come
out (``print``, a warning, ``print`` again within the interval is all stdout, then stderr) is what
the front end shows, so the records are those messages, read from the streams' message hooks;
a restore writes and flushes each record, which sends the same messages again. Outside a kernel
(terminal IPython, a plain shell) there are no messages: the writes are recorded in order.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["StreamRecorder", "write_stream"]

_NAMES = ("stdout", "stderr")


class _Tee:
    """A text stream that writes through to the real one and keeps a copy."""

    def __init__(self, name: str, real: Any, sink: list[dict[str, Any]]) -> None:
        self._name = name
        self._real = real
        self._sink = sink

    def write(self, text: str) -> int:
        if text:
            last = self._sink[-1] if self._sink else None
            if last is not None and last.get("type") == "stream" and last["name"] == self._name:
                last["text"] += text
            else:
                self._sink.append({"type": "stream", "name": self._name, "text": text})
        return int(self._real.write(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _kernel_stream(stream: Any) -> bool:
    iostream = sys.modules.get("ipykernel.iostream")
    return iostream is not None and isinstance(stream, iostream.OutStream) and hasattr(stream, "register_hook")


def _on_io_thread(stream: Any, call: Callable[[], Any]) -> None:
    """Run ``call`` on the thread that sends the stream's messages (its hooks are that thread's), and wait."""
    done = threading.Event()

    def run() -> None:
        try:
            call()
        finally:
            done.set()

    stream.pub_thread.schedule(run)
    done.wait(getattr(stream, "flush_timeout", 10))


class _MessageHook:
    """An ipykernel stream hook: keeps each ``stream`` message the running cell sends, and sends it."""

    def __init__(self, stream: Any, sink: list[dict[str, Any]]) -> None:
        self.stream = stream
        self.sink = sink
        self.parent = (stream.parent_header or {}).get("msg_id")

    def __call__(self, message: dict[str, Any]) -> dict[str, Any]:
        # Another cell's thread may write while this one runs: its messages go to that cell.
        if (message.get("parent_header") or {}).get("msg_id") == self.parent:
            content = message["content"]
            self.sink.append({"type": "stream", "name": content["name"], "text": content["text"]})
        return message

    def start(self) -> None:
        """On the IO thread: send what the cell did not write, then keep what it sends."""
        self.stream.flush()  # what was written before the cell is not the cell's (direct on this thread)
        self.stream.register_hook(self)

    def stop(self) -> None:
        """On the IO thread: send what is buffered (kept, as at the end of a cell), then stop keeping."""
        self.stream.flush()
        self.stream.unregister_hook(self)


def _on_io_thread_each(hooks: list[_MessageHook], step: Callable[[_MessageHook], None]) -> None:
    # One trip to the IO thread for both streams (they share it): each trip is a thread switch
    # and a wait, paid twice per cell.
    if hooks:
        _on_io_thread(hooks[0].stream, lambda: [step(hook) for hook in hooks])


class StreamRecorder:
    """Records stdout and stderr of a cell into ``sink`` (stream records, in the order they were shown)."""

    def __init__(self, sink: list[dict[str, Any]]) -> None:
        self.sink = sink
        self._hooks: list[_MessageHook] = []
        self._replaced: dict[str, Any] = {}

    def start(self) -> None:
        """Start recording both streams."""
        for name in _NAMES:
            stream = getattr(sys, name)
            if _kernel_stream(stream):
                self._hooks.append(_MessageHook(stream, self.sink))
            else:
                self._replaced[name] = stream
                setattr(sys, name, _Tee(name, stream, self.sink))
        _on_io_thread_each(self._hooks, _MessageHook.start)

    def flush(self) -> None:
        """Send what the streams hold (before a display, as ipykernel does), so that it is recorded first."""
        for hook in self._hooks:
            hook.stream.flush()
        for name in self._replaced:
            getattr(sys, name).flush()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Write past the record for a while (kernel streams are recorded as messages, never paused)."""
        tapped = {name: getattr(sys, name) for name in self._replaced}
        for name, stream in self._replaced.items():
            setattr(sys, name, stream)
        try:
            yield
        finally:
            for name, stream in tapped.items():
                setattr(sys, name, stream)

    def stop(self) -> None:
        """Record what is still buffered and stop recording."""
        _on_io_thread_each(self._hooks, _MessageHook.stop)
        for name, stream in self._replaced.items():
            setattr(sys, name, stream)
        self._hooks.clear()
        self._replaced.clear()


def write_stream(name: str, text: str) -> None:
    """Write a recorded stream record again and flush it: in a kernel, the same message as recorded."""
    stream = sys.stderr if name == "stderr" else sys.stdout
    stream.write(text)
    stream.flush()
