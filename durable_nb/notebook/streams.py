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
import weakref
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
    """An ipykernel stream hook, registered once per stream: keeps each ``stream`` message the
    recorded cell sends, and sends it.

    Registered for good (hooks are the IO thread's: registering is a trip there), so that a cell
    costs no trip to start recording. Which cell a message is for is told by its parent header.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        # (parent msg_id, sink) of the cells being recorded: replaced whole, read on the IO thread.
        self.recording: tuple[tuple[str | None, list[dict[str, Any]]], ...] = ()

    def __call__(self, message: dict[str, Any]) -> dict[str, Any]:
        # Another cell's thread may write while this one runs: its messages go to that cell.
        parent = (message.get("parent_header") or {}).get("msg_id")
        for msg_id, sink in self.recording:
            if msg_id == parent:
                content = message["content"]
                sink.append({"type": "stream", "name": content["name"], "text": content["text"]})
        return message

    def register(self) -> None:
        """On the IO thread: send what was written before (it is no cell's), then keep what is sent."""
        self.stream.flush()  # direct on this thread
        self.stream.register_hook(self)

    def flush(self) -> None:
        """On the IO thread: send what is buffered (kept, as at the end of a cell)."""
        self.stream.flush()


# Each kernel stream's hook, registered on the first cell recorded in this process.
_hooks: weakref.WeakKeyDictionary[Any, _MessageHook] = weakref.WeakKeyDictionary()
_registering = threading.Lock()


def _hooks_for(streams: list[Any]) -> list[_MessageHook]:
    """The streams' hooks, registered (in one trip to the IO thread they share) if not yet."""
    with _registering:
        new = [_MessageHook(stream) for stream in streams if stream not in _hooks]
        if new:
            _on_io_thread(new[0].stream, lambda: [hook.register() for hook in new])
            for hook in new:
                _hooks[hook.stream] = hook
        return [_hooks[stream] for stream in streams]


class _Written:
    """Tells whether a kernel stream was written to while a cell is recorded: the stream's own
    ``write``, seen first (an attribute of this stream object only, removed when the cell ends)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.own = vars(stream).get("write")  # a write another tool set on this object, kept
        self.write = stream.write
        self.count = 0

    def __call__(self, text: str) -> Any:
        self.count += 1
        return self.write(text)

    def start(self) -> None:
        self.stream.write = self

    def stop(self) -> None:
        if vars(self.stream).get("write") is self:
            if self.own is None:
                del self.stream.write
            else:
                self.stream.write = self.own


class StreamRecorder:
    """Records stdout and stderr of a cell into ``sink`` (stream records, in the order they were shown).

    In a kernel a cell that wrote nothing costs no trip to the IO thread: only what was written
    (this stream's ``write`` counts it, C-level output read from the pipe included) must be sent,
    and so recorded, before the cell's commit. What the same execute request wrote before the cell
    began (a ``pre_run_cell`` callback's print) is sent with it, so it is recorded too.
    """

    def __init__(self, sink: list[dict[str, Any]]) -> None:
        self.sink = sink
        self._hooks: list[_MessageHook] = []
        self._written: list[_Written] = []
        self._flushed = 0  # writes counted when the streams were last flushed
        self._replaced: dict[str, Any] = {}

    def start(self) -> None:
        """Start recording both streams."""
        kernel = []
        for name in _NAMES:
            stream = getattr(sys, name)
            if _kernel_stream(stream):
                kernel.append(stream)
            else:
                self._replaced[name] = stream
                setattr(sys, name, _Tee(name, stream, self.sink))
        if kernel:
            self._hooks = _hooks_for(kernel)
            self._written = [_Written(stream) for stream in kernel]
            for hook, written in zip(self._hooks, self._written, strict=True):
                written.start()
                parent = (hook.stream.parent_header or {}).get("msg_id")
                hook.recording = (*hook.recording, (parent, self.sink))

    def _writes(self) -> int:
        return sum(written.count for written in self._written)

    def flush(self) -> None:
        """Send what the streams hold (before a display, as ipykernel does), so that it is recorded first."""
        if self._writes() != self._flushed:
            self._flushed = self._writes()
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
        for written in self._written:
            written.stop()
        hooks = self._hooks
        if hooks and self._writes() != self._flushed:
            # One trip to the IO thread for both streams (they share it): a thread switch and a wait.
            _on_io_thread(hooks[0].stream, lambda: [hook.flush() for hook in hooks])
        for hook in hooks:
            hook.recording = tuple(entry for entry in hook.recording if entry[1] is not self.sink)
        for name, stream in self._replaced.items():
            setattr(sys, name, stream)
        self._hooks = []
        self._written = []
        self._replaced.clear()


def write_stream(name: str, text: str) -> None:
    """Write a recorded stream record again and flush it: in a kernel, the same message as recorded."""
    stream = sys.stderr if name == "stderr" else sys.stdout
    stream.write(text)
    stream.flush()
