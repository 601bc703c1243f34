"""Record what a cell prints and displays while still showing it live, and replay it later.

The records are JSON-ready dicts, in the order the notebook showed them: ``stream`` (stdout,
stderr: in a kernel, one record for each message the kernel sent, see ``streams``), ``display``
(display data: ``display()``, figures drawn by the inline backend) and ``result`` (the cell's
value, shown as ``Out[n]``; none when its code ends with ``;``).
"""

from __future__ import annotations

import base64
import sys
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any

from .streams import StreamRecorder, write_stream

__all__ = ["Capture", "RestoredResult", "close_restored_figures", "is_quiet", "open_figure_ids", "replay"]

_INLINE = ("inline", "module://matplotlib_inline.backend_inline")
# Backends that draw nothing by themselves: a figure left open there is only a leftover.
_NON_INTERACTIVE = {"agg", "cairo", "pdf", "pgf", "ps", "svg", "template"}


class RestoredResult:
    """Stands for a cell's value that could not be stored: it shows as the value did."""

    def __init__(self, data: dict[str, Any], metadata: dict[str, Any]) -> None:
        self._data = data
        self._metadata = metadata

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
        return self._data, self._metadata

    def __repr__(self) -> str:
        return str(self._data.get("text/plain", "<restored output>"))


def is_quiet(shell: Any, source: str) -> bool:
    """True if the cell's code ends with ``;``: as for any cell, its value is then not shown (no ``Out[n]``).

    IPython asks this of the line it ran, which for a cell magic is the ``run_cell_magic(…)``
    call; here the same test is asked of the cell's own code.
    """
    # IPython tokenizes the code to find it (comments may follow): not needed with no ';' at all.
    return ";" in source and bool(shell.displayhook.semicolon_at_end_of_expression(source))


def _show_result(shell: Any, value: Any, data: dict[str, Any] | None, metadata: dict[str, Any]) -> Any:
    """Show ``value`` as the cell's ``Out[n]`` (setting ``_`` and ``Out``); return its format data.

    With ``data``, that stored representation is shown instead of formatting the value again.
    These are the steps of IPython's display hook, which a cell magic cannot reach otherwise:
    its own return value is shown after the figures the cell drew, not before.
    """
    hook = shell.displayhook
    if value is None:
        return None
    hook.start_displayhook()
    hook.write_output_prompt()
    if data is None:
        data, metadata = hook.compute_format_data(value)
    hook.update_user_ns(value)
    hook.fill_exec_result(value)
    if data:
        hook.write_format_data(data, metadata)
        hook.log_output(data)
    hook.finish_displayhook()
    return data, metadata


class Capture:
    """Context manager that records stdout, stderr, rich displays and the value of one cell.

    Output goes on to the notebook as usual. A cell whose code ends with ``;`` (``quiet``)
    shows no value, as IPython does for any cell.
    """

    def __init__(self, shell: Any, quiet: bool = False) -> None:
        self.shell = shell
        self.quiet = quiet
        self.outputs: list[dict[str, Any]] = []
        self._streams = StreamRecorder(self.outputs)
        self._saved: tuple[Any, ...] | None = None

    def __enter__(self) -> Capture:
        publisher = self.shell.display_pub
        original_publish = publisher.publish
        outputs = self.outputs
        streams = self._streams

        def publish(data: dict[str, Any], metadata: dict[str, Any] | None = None, *args: Any, **kwargs: Any) -> Any:
            streams.flush()  # what was printed before the display is shown before it
            outputs.append({"type": "display", "data": _jsonable(data), "metadata": _jsonable(metadata or {})})
            with self._untapped():
                return original_publish(data, metadata, *args, **kwargs)

        self._saved = (publisher, "publish" in vars(publisher), original_publish)
        streams.start()
        publisher.publish = publish
        return self

    def finish(self, value: Any) -> None:
        """Show the cell's value as ``Out[n]``, then the figures the inline backend would draw after it."""
        shown = None
        if value is not None and not self.quiet:  # most cells show nothing: nothing to untap for
            with self._untapped():
                shown = _show_result(self.shell, value, None, {})
        if shown is not None:
            data, metadata = shown
            self.outputs.append({"type": "result", "data": _jsonable(data), "metadata": _jsonable(metadata)})
        backend = sys.modules.get("matplotlib_inline.backend_inline")
        if backend is not None:
            backend.flush_figures()

    def _untapped(self) -> AbstractContextManager[None]:
        # A terminal shell prints displays and Out[n] on stdout: already recorded as themselves,
        # a copy in the stream record would show them a second time on restore.
        return self._streams.paused()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        assert self._saved is not None
        publisher, own_attribute, original = self._saved
        self._streams.stop()
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
        return base64.b64encode(value).decode("ascii")
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def replay(shell: Any, outputs: list[dict[str, Any]], result: Any, *, quiet: bool = False) -> None:
    """Show recorded outputs again, in order, as they were shown the first time.

    The cell's value is shown as ``Out[n]`` again: ``result`` is the value itself when it
    could be stored (so ``_`` is that object), else a stand-in showing the stored form. A
    ``quiet`` cell (its code ends with ``;``) shows no value, even one recorded before.
    """
    from IPython.display import publish_display_data

    for output in outputs:
        if output["type"] == "stream":
            write_stream(output["name"], output["text"])
        elif output["type"] == "result":
            if quiet:
                continue
            metadata = output.get("metadata") or {}
            value = result if result is not None else RestoredResult(output["data"], metadata)
            _show_result(shell, value, output["data"], metadata)
        else:
            publish_display_data(output["data"], output.get("metadata") or {})


def open_figure_ids() -> frozenset[int]:
    """Return the ids of the matplotlib figures pyplot keeps open (none if pyplot is not in use)."""
    helpers = sys.modules.get("matplotlib._pylab_helpers")
    if helpers is None:
        return frozenset()
    return frozenset(id(manager.canvas.figure) for manager in helpers.Gcf.get_all_fig_managers())


def close_restored_figures(before: frozenset[int]) -> None:
    """Close figures a restore re-registered with pyplot: their images are replayed from the store.

    Left open, the inline backend would draw them again at the end of the cell. Only done
    where the backend closes or never shows figures by itself (inline, or a file backend).
    """
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:
        return
    backend = str(pyplot.get_backend())
    if backend not in _INLINE and backend.lower() not in _NON_INTERACTIVE:
        return
    helpers = sys.modules["matplotlib._pylab_helpers"]
    for manager in list(helpers.Gcf.get_all_fig_managers()):
        if id(manager.canvas.figure) not in before:
            pyplot.close(manager.canvas.figure)
