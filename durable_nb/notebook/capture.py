"""Record what a cell prints and displays while still showing it live, and replay it later."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any, TextIO

__all__ = ["Capture", "replay"]


class _Tee:
    """A text stream that writes through to the real one and keeps a copy."""

    def __init__(self, name: str, real: TextIO, sink: list[dict[str, Any]]) -> None:
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
        return self._real.write(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class Capture:
    """Context manager that records stdout, stderr and rich displays of one cell.

    Output goes on to the notebook as usual; the records are JSON-ready dicts
    (``stream``, ``display``, ``result``) for the checkpoint.
    """

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.outputs: list[dict[str, Any]] = []
        self._saved: tuple[Any, ...] | None = None

    def __enter__(self) -> Capture:
        publisher = self.shell.display_pub
        original_publish = publisher.publish
        outputs = self.outputs

        def publish(data: dict[str, Any], metadata: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
            outputs.append({"type": "display", "data": _jsonable(data), "metadata": _jsonable(metadata or {})})
            return original_publish(data, metadata, *args, **kwargs)

        self._saved = (sys.stdout, sys.stderr, publisher, "publish" in vars(publisher), original_publish)
        sys.stdout = _Tee("stdout", sys.stdout, outputs)  # type: ignore[assignment]
        sys.stderr = _Tee("stderr", sys.stderr, outputs)  # type: ignore[assignment]
        publisher.publish = publish
        return self

    def flush_figures(self) -> None:
        """Show (and so record) matplotlib figures the inline backend would draw after the cell."""
        backend = sys.modules.get("matplotlib_inline.backend_inline")
        if backend is not None and getattr(backend, "_draw_called", False):
            backend.flush_figures()

    def result(self, value: Any) -> None:
        """Record the value the cell ends with, formatted as the notebook shows it."""
        if value is None:
            return
        data, metadata = self.shell.display_formatter.format(value)
        self.outputs.append({"type": "result", "data": _jsonable(data), "metadata": _jsonable(metadata)})

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        assert self._saved is not None
        stdout, stderr, publisher, own_attribute, original = self._saved
        sys.stdout, sys.stderr = stdout, stderr
        if own_attribute:
            publisher.publish = original
        else:
            del publisher.publish


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        import base64

        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def replay(outputs: list[dict[str, Any]]) -> None:
    """Show recorded outputs again, in order, as they were shown the first time."""
    from IPython.display import publish_display_data

    for output in outputs:
        if output["type"] == "stream":
            stream = sys.stderr if output["name"] == "stderr" else sys.stdout
            stream.write(output["text"])
            stream.flush()
        else:
            publish_display_data(output["data"], output.get("metadata") or {})
