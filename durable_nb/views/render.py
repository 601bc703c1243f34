"""Notebook rendering of the views: the same DataFrame, shown for people.

Only the HTML changes: durations read ``1.52 s`` or ``2 min 05 s``, times are local to the
second with the UTC instant on hover, long ids are shortened with the full id on hover, and
statuses are coloured badges; a gate's checkpoint (stored as ``interrupted``) reads as what it
is: waiting for a decision, decided, or not decided (its run was cancelled or failed there), and
the checkpoint of its decision (stored as ``approved``, a rejection too) as decision recorded.
``.frame`` and ``repr`` keep the DataFrame as it is. The approvals page shows times, durations
and statuses with the same helpers (``local_time``, ``human_duration``, ``checkpoint_labels``).
"""

from __future__ import annotations

import html
import re
from typing import Any

from ..model import STATUS_COLOURS, format_seconds

__all__ = [
    "DECISION",
    "GATE_DECIDED",
    "GATE_NOT_DECIDED",
    "GATE_WAITING",
    "OPEN_GATES",
    "Styled",
    "checkpoint_labels",
    "human_duration",
    "is_history",
    "local_text",
    "local_time",
    "status_badge",
    "styled",
]

COLOURS = STATUS_COLOURS  # the run inspector widget colours its statuses from here too

# What a gate's checkpoint (stored as "interrupted") is called where people read it, and the
# checkpoint recording its decision (stored as "approved" for a rejection too).
GATE_WAITING = "waiting for a decision"
GATE_DECIDED = "decided"
GATE_NOT_DECIDED = "not decided"
DECISION = "decision recorded"
LABEL_COLOURS = {
    GATE_WAITING: STATUS_COLOURS["paused"],
    GATE_DECIDED: STATUS_COLOURS["approved"],
    GATE_NOT_DECIDED: STATUS_COLOURS["cancelled"],
    DECISION: STATUS_COLOURS["approved"],
}
# A history view's DataFrame.attrs entry: the ids of the checkpoints whose gates still wait.
OPEN_GATES = "open_gates"

ROWS_SHOWN = 200
ID_HEAD = 8
ID_TAIL = 4
ID_COLUMNS = {"fork_point"}  # a column of checkpoint ids whose name does not end in _id
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
BADGE = (
    "display:inline-block;padding:0 0.5em;border-radius:0.75em;font-size:0.85em;"
    "line-height:1.5;white-space:nowrap;color:{text};background:{background}"
)


class Styled:
    """A DataFrame shown for people in notebooks and plainly elsewhere (``.frame``)."""

    def __init__(self, frame: Any, title: str | None = None) -> None:
        self.frame = frame
        self.title = title

    def __repr__(self) -> str:
        return repr(self.frame)

    def _repr_html_(self) -> str:
        source = self.frame.head(ROWS_SHOWN)
        shown = source.astype(object)
        for position, column in enumerate(source.columns):
            values = source.iloc[:, position]
            shown.isetitem(position, [_cell(str(column), v, values.dtype) for v in values])
        if is_history(source):
            labels = checkpoint_labels(self.frame)[:ROWS_SHOWN]
            shown.isetitem(list(source.columns).index("status"), [_badge(label) for label in labels])
        # Headers and the index are text from the store too (compare names its columns after state values).
        shown.columns = [html.escape(str(column)) for column in source.columns]
        index_name = str(source.index.name) if source.index.name is not None else ""
        shown.index = [_cell(index_name, v, source.index.dtype) for v in source.index]
        shown.index.name = html.escape(index_name) or None
        table = shown.to_html(escape=False, border=0, classes="durable-nb-view")
        return self._caption() + table

    def _caption(self) -> str:
        total = len(self.frame)
        more = f" (first {ROWS_SHOWN:,} of {total:,} rows)" if total > ROWS_SHOWN else ""
        if not self.title and not more:
            return ""
        return f"<div><b>{html.escape(self.title or '')}</b>{html.escape(more)}</div>"


def is_history(frame: Any) -> bool:
    """Whether ``frame`` is a history view (its rows are checkpoints)."""
    return {"checkpoint_id", "node_id", "step", "status"} <= set(frame.columns)


def checkpoint_labels(frame: Any) -> list[str]:
    """Return the status people read for each checkpoint of a history view (its rows in order).

    A gate's checkpoint is stored as ``interrupted``: it reads ``waiting for a decision`` while its
    gate is open, ``decided`` once a decision at its node follows it, ``not decided`` otherwise (the
    run was cancelled or failed at the gate). The checkpoint of the decision is stored as
    ``approved`` whether the gate was approved or rejected: it reads ``decision recorded``. The open
    gates come from the view's ``frame.attrs["open_gates"]``; without them, an undecided gate is
    taken to wait.
    """
    open_gates = frame.attrs.get(OPEN_GATES)
    decided_later: set[Any] = set()  # nodes with a decision below, not yet matched to its gate
    labels: list[str] = []
    for status, step, node, checkpoint in reversed(
        list(zip(frame["status"], frame["step"], frame["node_id"], frame["checkpoint_id"], strict=True))
    ):
        label = str(status)
        if str(step).startswith("approved:"):
            decided_later.add(node)
            label = DECISION
        elif label == "interrupted":
            if open_gates is not None and checkpoint in open_gates:
                label = GATE_WAITING
            elif node in decided_later:
                decided_later.discard(node)  # that decision answered this gate
                label = GATE_DECIDED
            else:
                label = GATE_WAITING if open_gates is None else GATE_NOT_DECIDED
        labels.append(label)
    return labels[::-1]


def human_duration(value: Any) -> str:
    """Return a duration (a Timedelta) as people read it: ``340 ms``, ``1.52 s``, ``2 min 05 s``; '' when missing."""
    return "" if _missing(value) else format_seconds(value.total_seconds(), compound=True)


def local_time(value: Any) -> str:
    """Return a time (a Timestamp) as HTML: local to the second, the UTC instant on hover; '' when missing."""
    return "" if _missing(value) else _time(value)


def _cell(column: str, value: Any, dtype: Any) -> str:
    # Every value is escaped (errors and state values can hold any text); markup is ours only.
    if _missing(value):
        return ""
    kind = getattr(dtype, "kind", "O")
    if kind == "m":
        return html.escape(human_duration(value))
    if kind == "M":
        return _time(value)
    text = str(value)
    if column == "status":
        return _badge(text)
    if (column.endswith("_id") or column in ID_COLUMNS) and UUID.fullmatch(text):
        # Ids are UUIDv7: their first characters are the creation time, alike for every id made
        # within a minute, so the random tail is kept too to tell rows apart.
        short = f"{text[:ID_HEAD]}…{text[-ID_TAIL:]}"
        return f'<span title="{html.escape(text)}">{html.escape(short)}</span>'
    return html.escape(text)


def _missing(value: Any) -> bool:
    # None, NaN and NaT differ from themselves; pd.NA refuses bool(); lists and dicts are values.
    if value is None:
        return True
    try:
        return bool(value != value)
    except (TypeError, ValueError):
        return str(value) == "<NA>"


def local_text(value: Any) -> str:
    """Return a time (a Timestamp) as plain text, local to the second; '' when missing."""
    if _missing(value):
        return ""
    utc = value if value.tzinfo is not None else value.tz_localize("UTC")
    # astimezone() looks the local offset up for each instant, so times across a daylight-saving
    # change are right; a zone taken from now() would be an hour off for half the year.
    return f"{utc.floor('s').to_pydatetime().astimezone():%Y-%m-%d %H:%M:%S}"


def _time(value: Any) -> str:
    utc = value if value.tzinfo is not None else value.tz_localize("UTC")
    iso = utc.tz_convert("UTC").isoformat()
    return f'<span title="{html.escape(iso)}">{local_text(value)}</span>'


def _badge(status: str) -> str:
    background = STATUS_COLOURS.get(status) or LABEL_COLOURS.get(status, STATUS_COLOURS["pending"])
    style = BADGE.format(background=background, text=_readable_on(background))
    return f'<span class="durable-nb-status" style="{style}">{html.escape(status)}</span>'


def status_badge(status: str) -> str:
    """Return a status as the views show it in HTML: a coloured badge, its text escaped."""
    return _badge(status)


def _readable_on(background: str) -> str:
    """Return black or white, whichever contrasts more with ``background`` (``#rrggbb``)."""
    channels = [int(background[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    # WCAG relative luminance; black wins above about 0.18, where its contrast ratio is higher.
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    luminance = 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]
    return "#000" if (luminance + 0.05) / 0.05 > 1.05 / (luminance + 0.05) else "#fff"


def styled(frame: Any, title: str | None = None) -> Styled:
    """Wrap a view for display in a notebook."""
    return Styled(frame, title)
