"""The side-by-side view of ``compare_cells``: one column per run, each cell's outputs in each.

Outputs are what a cell's code printed and displayed, so they are data from anyone: text is
escaped; images are shown only as ``data:`` URIs of PNG, JPEG, GIF or SVG (an SVG loaded as an
image runs no script); HTML (tables, widgets' fallbacks) is shown inside a sandboxed iframe
that may run nothing; any other kind (JavaScript, widget views) is named, never shown.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import re
from collections.abc import Mapping
from typing import Any

import pandas as pd

from .render import human_duration, status_badge

__all__ = ["CellComparison", "render_cells"]

_TEXT_LIMIT = 20_000
_HTML_LIMIT = 500_000
_IMAGES = ("image/png", "image/jpeg", "image/gif")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
# In the order a notebook prefers them: the richest kind shown, the others left out.
_PREFERRED = (*_IMAGES, "image/svg+xml", "text/html", "text/markdown", "text/latex", "application/json", "text/plain")
_STYLE = """<style>
.durable-nb-cells{border-collapse:collapse;table-layout:fixed;width:100%}
.durable-nb-cells th,.durable-nb-cells td{border:1px solid #d1d5db;padding:4px 6px;vertical-align:top;text-align:left}
.durable-nb-cells td.durable-nb-differs{background:#fef3c7}
.durable-nb-cells tr.durable-nb-differs>th{background:#fde68a}
.durable-nb-cells .durable-nb-marker{color:#b45309;font-weight:bold}
.durable-nb-cells .durable-nb-outputs{max-height:40em;overflow:auto}
.durable-nb-cells pre{white-space:pre-wrap;word-break:break-word;margin:2px 0;font-size:0.85em}
.durable-nb-cells pre.durable-nb-stderr{background:#fee2e2}
.durable-nb-cells img{max-width:100%;height:auto}
.durable-nb-cells iframe{width:100%;border:1px solid #e5e7eb;resize:vertical}
.durable-nb-cells .durable-nb-meta{color:#4b5563;font-size:0.85em}
</style>"""


class CellComparison(pd.DataFrame):
    """A ``compare_cells`` DataFrame: shown in a notebook as the runs' cells side by side."""

    @property
    def _constructor(self) -> Any:
        # Anything derived from it (a selection, a copy) is a plain DataFrame, shown as one.
        return pd.DataFrame

    def _repr_html_(self) -> str | None:
        try:
            return render_cells(self)
        except (KeyError, AttributeError):  # columns taken away: show it as the DataFrame it is
            return pd.DataFrame(self)._repr_html_()


def render_cells(frame: Any) -> str:
    """Return the HTML of a ``compare_cells`` frame: a table with one column per run, one row per cell."""
    runs = list(frame.attrs.get("runs") or [{"run_id": r} for r in dict.fromkeys(frame["run_id"])])
    by_cell: dict[str, dict[str, Any]] = {}
    for row in frame.itertuples(index=False):
        by_cell.setdefault(str(row.cell), {})[str(row.run_id)] = row
    head = "".join(_run_header(i, run) for i, run in enumerate(runs))
    body = []
    for cell, row_of in by_cell.items():
        rows = [row_of.get(str(run["run_id"])) for run in runs]
        outputs_differ = any(_true(r.outputs_differ) for r in rows if r is not None)
        values_differ = sorted({n for r in rows if r is not None for n in (r.differing or [])})
        marks = []
        if outputs_differ:
            marks.append("≠ outputs differ")
        if values_differ:
            marks.append("≠ values differ: " + ", ".join(values_differ))
        differs = bool(marks)
        title = f"<code>{html.escape(cell)}</code>" + "".join(
            f'<br><span class="durable-nb-marker">{html.escape(m)}</span>' for m in marks
        )
        cells = "".join(_run_cell(r) for r in rows)
        row_class = "durable-nb-cell durable-nb-differs" if differs else "durable-nb-cell"
        body.append(f'<tr class="{row_class}" data-cell="{html.escape(cell)}"><th>{title}</th>{cells}</tr>')
    return (
        _STYLE
        + '<table class="durable-nb-cells"><thead><tr><th style="width:9em">cell</th>'
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
    )


def _true(value: Any) -> bool:
    return value is True or (not pd.isna(value) and bool(value))


def _short(run_id: str) -> str:
    return f"{run_id[:8]}…{run_id[-4:]}" if len(run_id) > 16 else run_id


def _run_header(index: int, run: Mapping[str, Any]) -> str:
    run_id = str(run["run_id"])
    parts = [f'<span title="{html.escape(run_id)}"><code>{html.escape(_short(run_id))}</code></span>']
    if run.get("status"):
        parts.append(status_badge(str(run["status"])))
    if index == 0:
        parts.append('<span class="durable-nb-meta">compared with</span>')
    if run.get("parent_run_id"):
        parent = str(run["parent_run_id"])
        parts.append(
            f'<span class="durable-nb-meta" title="{html.escape(parent)}">fork of {html.escape(_short(parent))}</span>'
        )
    return f'<th data-run="{html.escape(run_id)}">{"<br>".join(parts)}</th>'


def _run_cell(row: Any) -> str:
    if row is None:
        return "<td></td>"
    differs = _true(row.outputs_differ) or _true(row.values_differ)
    meta = [status_badge(str(row.status))]
    if not pd.isna(row.duration):
        meta.append(html.escape(human_duration(row.duration)))
    if isinstance(row.inherited_from, str):
        meta.append(
            f'<span title="{html.escape(row.inherited_from)}">from {html.escape(_short(row.inherited_from))}</span>'
        )
    changed = list(row.changed or [])
    if changed:
        differing = set(row.differing or [])
        overridden = set(row.overridden or [])
        names = [
            html.escape(n)
            + (' <span class="durable-nb-marker">≠</span>' if n in differing else "")
            + (" (set by the fork)" if n in overridden else "")
            for n in changed
        ]
        meta.append("set " + ", ".join(names))
    shown = _outputs(row.outputs)
    cls = ' class="durable-nb-differs"' if differs else ""
    meta_html = f'<div class="durable-nb-meta">{" · ".join(meta)}</div>'
    return f'<td{cls}>{meta_html}<div class="durable-nb-outputs">{shown}</div></td>'


def _outputs(outputs: Any) -> str:
    if not isinstance(outputs, list):
        return ""
    return "".join(_output(o) for o in outputs)


def _output(output: Any) -> str:
    if not isinstance(output, Mapping):
        return _pre(str(output))
    if output.get("type") == "stream":
        stderr = output.get("name") == "stderr"
        return _pre(_joined(output.get("text", "")), "durable-nb-stderr" if stderr else None)
    data = output.get("data")
    if not isinstance(data, Mapping):
        return ""
    metadata = output.get("metadata") if isinstance(output.get("metadata"), Mapping) else {}
    for mime in _PREFERRED:
        if mime in data:
            shown = _bundle_part(mime, data[mime], data, metadata.get(mime))
            if shown is not None:
                return shown
    others = ", ".join(sorted(str(m) for m in data))
    return f'<div class="durable-nb-meta">[{html.escape(others)} output, not shown here]</div>'


def _bundle_part(mime: str, value: Any, data: Mapping[str, Any], metadata: Any) -> str | None:
    size = _size(metadata)
    if mime in _IMAGES:
        encoded = re.sub(r"\s+", "", _joined(value))
        if not encoded or not _BASE64.fullmatch(encoded):
            return None
        try:
            base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return None
        return f'<img src="data:{mime};base64,{encoded}" alt="{html.escape(mime)} output"{size}>'
    if mime == "image/svg+xml":
        # Loaded as an image, an SVG runs no script and reaches nothing outside itself.
        encoded = base64.b64encode(_joined(value).encode("utf-8", "replace")).decode("ascii")
        return f'<img src="data:image/svg+xml;base64,{encoded}" alt="SVG output"{size}>'
    if mime == "text/html":
        source = _joined(value)
        if len(source) > _HTML_LIMIT:
            return None  # too large to embed: the bundle's text is shown instead
        rows = source.count("<tr")
        height = min(30, 3 + 1.6 * rows) if rows else 8
        # sandbox="" forbids scripts, forms, plugins and the page's origin; srcdoc is an escaped attribute.
        plain = data.get("text/plain")
        fallback = f"<details><summary>as text</summary>{_pre(_joined(plain))}</details>" if plain is not None else ""
        return (
            f'<iframe sandbox="" referrerpolicy="no-referrer" style="height:{height:.1f}em" '
            f'title="HTML output" srcdoc="{html.escape(source, quote=True)}"></iframe>{fallback}'
        )
    if mime == "application/json":
        return _pre(json.dumps(value, indent=1, ensure_ascii=False, default=str))
    return _pre(_joined(value))


def _size(metadata: Any) -> str:
    """The width and height an image's metadata asks for, as attributes (whole numbers only)."""
    if not isinstance(metadata, Mapping):
        return ""
    found = [(k, metadata.get(k)) for k in ("width", "height")]
    return "".join(f' {k}="{int(v)}"' for k, v in found if isinstance(v, int | float) and 0 < v < 10_000)


def _joined(value: Any) -> str:
    return "".join(map(str, value)) if isinstance(value, list) else str(value)


def _pre(text: str, cls: str | None = None) -> str:
    if len(text) > _TEXT_LIMIT:
        text = text[:_TEXT_LIMIT] + f"\n… ({len(text) - _TEXT_LIMIT:,} more characters)"
    attribute = f' class="{cls}"' if cls else ""
    return f"<pre{attribute}>{html.escape(text)}</pre>"
