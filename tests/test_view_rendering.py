"""Issue 18 item 6: the styled views (``%durable history`` etc.) read well in a notebook.

The HTML shows durations as people say them (``340 ms``, ``1.52 s``, ``2 min 05 s``), times in
the kernel's local zone to the second with the UTC instant on hover, UUIDs shortened with the
full id on hover, statuses as coloured badges with readable text; every value is escaped and
missing values are empty. The DataFrames themselves (``.frame``, the views called in code)
keep their full-precision dtypes. Views are built from real runs in a real store.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from zoneinfo import ZoneInfo

import pandas as pd
import pytest
from conftest import execute_sql
from flows import pricing

import durable_nb as dnb
from durable_nb._ids import new_id
from durable_nb._loop import run_sync
from durable_nb.model import (
    STATUS_COLOURS,
    CheckpointDraft,
    CheckpointStatus,
    Commit,
    NewRun,
    RunKind,
    RunStatus,
    format_seconds,
)
from durable_nb.views import Styled, styled

ZONE = "Asia/Kolkata"  # UTC+05:30 all year
WINTER = pd.Timestamp("2026-12-01T10:35:45.25Z")
SUMMER = pd.Timestamp("2026-07-01T10:35:45.75Z")
# The text colour each status colour gets: whichever of black and white contrasts more.
TEXT_ON = {
    "#16a34a": "#000",
    "#d97706": "#000",
    "#2563eb": "#fff",
    "#6b7280": "#fff",
    "#7c3aed": "#fff",
    "#dc2626": "#fff",
}


@contextmanager
def kernel_zone(monkeypatch: pytest.MonkeyPatch, name: str) -> Iterator[str]:
    """Put the process in the time zone ``name``, then back in its own zone, whatever happens."""
    try:
        with monkeypatch.context() as patch:
            patch.setenv("TZ", name)
            time.tzset()
            yield name
    finally:
        time.tzset()  # TZ is back as it was: the C library must read it again


@pytest.fixture
def local_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run the test with the kernel in Asia/Kolkata."""
    with kernel_zone(monkeypatch, ZONE) as name:
        yield name


def cells(html: str, column: int) -> list[str]:
    """The inner HTML of one column's body cells (0 = the first after the index)."""
    body = html.split("<tbody>", 1)[1]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.DOTALL)
    return [re.findall(r"<td>(.*?)</td>", row, re.DOTALL)[column] for row in rows]


def column_of(frame: pd.DataFrame, html: str, name: str) -> list[str]:
    return cells(html, list(frame.columns).index(name))


def run_with_durations(store_url: str, durations: list[float | None]) -> str:
    """A run committed at the store level whose checkpoints took the given seconds."""
    store = dnb.connect(store_url)
    run_id = new_id()
    run_sync(
        store.create_run(
            NewRun(run_id=run_id, name="timed", kind=RunKind.WORKFLOW, status=RunStatus.RUNNING, input_manifest={})
        )
    )
    drafts = [
        CheckpointDraft(
            checkpoint_id=new_id(),
            step=f"after:n{i}",
            node_id=f"n{i}",
            status=CheckpointStatus.OK,
            duration=seconds,
            attempts=1,
        )
        for i, seconds in enumerate(durations)
    ]
    run_sync(store.commit(Commit(run_id=run_id, checkpoints=drafts)))
    return run_id


def hostile(store_url: str) -> dnb.Run:
    flow = dnb.Workflow("hostile", store=store_url)

    @flow.node(retry_count=0)
    def boom(state):
        raise ValueError("<script>alert(1)</script>")

    return flow.run({})


def gated(store_url: str) -> dnb.Run:
    flow = dnb.Workflow("gated", store=store_url)

    @flow.node()
    def review(state):
        return {"approved": dnb.gate("ship?").approved}

    return flow.run({})


# -- durations --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (0, "0 s"),
        (0.000_000_4, "0 s"),
        (0.000_5, "0.5 ms"),
        (0.012_345, "12.3 ms"),
        (0.34, "340 ms"),
        (0.999_7, "1 s"),
        (1.52, "1.52 s"),
        (12.345, "12.3 s"),
        (59.96, "1 min 00 s"),
        (125, "2 min 05 s"),
        (3599.4, "59 min 59 s"),
        (3599.7, "1 h 00 min"),
        (3720, "1 h 02 min"),
        (3 * 86400 + 4 * 3600, "3 d 4 h"),
        (-1.5, "-1.5 s"),
    ],
)
def test_compound_durations_have_sensible_precision(seconds: float, shown: str) -> None:
    """Issue 18 item 6: three significant digits below a minute, two units above, no rounding into 60."""
    assert format_seconds(seconds, compound=True) == shown


def test_message_durations_are_unchanged() -> None:
    """The form for messages (timeouts) stays what users set: ``0.1 s``, ``90 s``, ``21 days``."""
    assert [format_seconds(s) for s in (0.05, 0.1, 90, 21 * 86400)] == ["50 ms", "0.1 s", "90 s", "21 days"]


def test_durations_read_as_human_durations(store_url: str) -> None:
    """Issue 18 item 6: history durations and runs' elapsed read ``1.52 s``, never ``0 days 00:00:01.52``."""
    taken = [0.34, 1.52, 125, 3720, 3 * 86400 + 4 * 3600, None]
    run_id = run_with_durations(store_url, taken)
    frame = dnb.history(run_id, store=store_url)
    html = styled(frame)._repr_html_()
    assert column_of(frame, html, "duration") == ["340 ms", "1.52 s", "2 min 05 s", "1 h 02 min", "3 d 4 h", ""]
    assert "days" not in html

    pricing(store_url).run({"rate": 0.1})
    listed = dnb.runs(store=store_url)
    shown = column_of(listed, styled(listed)._repr_html_(), "elapsed")
    assert all(re.fullmatch(r"[\d.]+ (ms|s)", text) for text in shown), shown


# -- times --------------------------------------------------------------------------------------------------


def test_times_are_local_to_the_second_with_utc_on_hover(store_url: str, local_zone: str) -> None:
    """Issue 18 item 6: a UTC time shows in the kernel's zone to the second; the ISO UTC value is its title."""
    run = pricing(store_url).run({"rate": 0.1})
    execute_sql(
        store_url,
        "UPDATE runs SET created_at = ?, updated_at = ? WHERE run_id = ?",
        (SUMMER.timestamp(), WINTER.timestamp(), run.id),
    )
    listed = dnb.runs(store=store_url)
    html = styled(listed)._repr_html_()
    [created] = column_of(listed, html, "created_at")
    [updated] = column_of(listed, html, "updated_at")
    assert created == '<span title="2026-07-01T10:35:45.750000+00:00">2026-07-01 16:05:45</span>'
    assert updated == '<span title="2026-12-01T10:35:45.250000+00:00">2026-12-01 16:05:45</span>'

    # Every time of a real history is its UTC instant seen from the local zone, cut to the second.
    history = dnb.history(run.id, store=store_url)
    shown = column_of(history, styled(history)._repr_html_(), "created_at")
    for text, at in zip(shown, history["created_at"], strict=True):
        local = at.tz_convert(ZoneInfo(local_zone)).strftime("%Y-%m-%d %H:%M:%S")
        assert text == f'<span title="{at.isoformat()}">{local}</span>'


def test_times_follow_daylight_saving_for_each_instant(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 18 item 6: in a zone with summer time, a July and a December time each get their own offset."""
    run = pricing(store_url).run({"rate": 0.1})
    execute_sql(
        store_url,
        "UPDATE runs SET created_at = ?, updated_at = ? WHERE run_id = ?",
        (SUMMER.timestamp(), WINTER.timestamp(), run.id),
    )
    with kernel_zone(monkeypatch, "America/New_York"):
        html = styled(dnb.runs(store=store_url))._repr_html_()
    assert ">2026-07-01 06:35:45</span>" in html  # EDT, UTC-4
    assert ">2026-12-01 05:35:45</span>" in html  # EST, UTC-5


# -- ids ------------------------------------------------------------------------------------------------------


def short(full: str) -> str:
    return f'<span title="{full}">{full[:8]}…{full[-4:]}</span>'


def test_ids_are_short_with_the_full_id_on_hover(store_url: str) -> None:
    """Issue 18 item 6: UUIDs show their first 8 characters (and last 4), the full id in title; names stay whole."""
    flow = pricing(store_url)
    root = flow.run({"rate": 0.1})
    history = dnb.history(root.id, store=store_url)
    after_load = str(history.loc[history["step"] == "after:load", "checkpoint_id"].item())
    child = flow.fork(root.id, after_load, state={"rate": 0.5})

    html = styled(history)._repr_html_()
    assert column_of(history, html, "checkpoint_id") == [short(c) for c in history["checkpoint_id"]]
    assert column_of(history, html, "parent_checkpoint_id")[1:] == [short(c) for c in history["checkpoint_id"][:-1]]
    assert column_of(history, html, "node_id")[:3] == ["load", "discount", "total"]  # names, not ids
    # UUIDv7 ids made in the same minute share their first 8 characters: the tail tells the rows apart.
    assert len({c[:8] for c in history["checkpoint_id"]}) == 1
    assert len(set(column_of(history, html, "checkpoint_id"))) == len(history)

    listed = dnb.runs(store=store_url)
    html = styled(listed)._repr_html_()
    assert column_of(listed, html, "run_id") == [short(child.id), short(root.id)]
    assert column_of(listed, html, "parent_run_id") == [short(root.id), ""]
    assert column_of(listed, html, "parent_checkpoint_id") == [short(after_load), ""]
    assert f">{root.id}<" not in html  # the full id is on hover only

    compared = dnb.compare([root.id, child.id], ["rate"], store=store_url)
    html = styled(compared)._repr_html_()
    assert f"<th>{short(root.id)}</th>" in html and f"<th>{short(child.id)}</th>" in html  # the index
    assert column_of(compared, html, "fork_point") == ["", short(after_load)]


# -- statuses ---------------------------------------------------------------------------------------------


# A gate's checkpoint is stored as interrupted; it reads as what it is, in the colour of what it is.
LABEL_COLOURS = {
    "waiting for a decision": "paused",
    "decided": "approved",
    "not decided": "cancelled",
    "decision recorded": "approved",
}


def badge(status: str) -> str:
    colour = STATUS_COLOURS[LABEL_COLOURS.get(status, status)]
    return f'color:{TEXT_ON[colour]};background:{colour}">{status}</span>'


def test_statuses_are_coloured_badges_with_readable_text(store_url: str) -> None:
    """Issue 18 item 6: each status is a rounded badge in its colour, its text black or white for contrast."""
    done = pricing(store_url).run({"rate": 0.1})
    broken = hostile(store_url)
    paused = gated(store_url)
    dnb.fork(done.id, state={"rate": 0.2}, store=store_url)

    listed = dnb.runs(store=store_url)
    assert set(listed["status"]) == {"completed", "failed", "paused", "pending"}
    histories = [dnb.history(r.id, store=store_url) for r in (done, broken, paused)]
    for frame in [listed, *histories]:
        html = styled(frame)._repr_html_()
        assert "<b " not in html
        shown = [str(s) for s in frame["status"]]
        if frame is not listed:
            shown = [s.replace("interrupted", "waiting for a decision") for s in shown]
        for status, text in zip(shown, column_of(frame, html, "status"), strict=True):
            assert text.startswith('<span class="durable-nb-status" style="display:inline-block;')
            assert "border-radius:" in text and text.endswith(badge(status))
    assert {s for h in histories for s in h["status"]} >= {"ok", "completed", "failed", "interrupted"}


def _two_gate_flow(store_url: str) -> dnb.Workflow:
    flow = dnb.Workflow("two-gates", store=store_url)

    @flow.node()
    def review(state):
        first = dnb.gate("draft ok?").approved
        return {"first": first, "second": dnb.gate("send it?").approved}

    return flow


def test_a_gate_checkpoint_reads_as_waiting_decided_or_not_decided(store_url: str) -> None:
    """Issue 27: a gate's checkpoint is stored as interrupted (the DataFrame keeps that status and its
    dtype) but reads as what it is: waiting for a decision while its gate is open, decided once a
    decision follows, not decided when the run was cancelled at it; the decision's checkpoint,
    stored as approved for a rejection too, reads decision recorded."""
    flow = _two_gate_flow(store_url)
    run = flow.run({})

    def shown(run_id: str) -> list[tuple[str, str]]:
        frame = dnb.history(run_id, store=store_url)
        assert str(frame["status"].dtype) == "category" and "interrupted" in set(frame["status"])
        html = styled(frame)._repr_html_()
        labels = [re.sub(r"<[^>]+>", "", cell) for cell in column_of(frame, html, "status")]
        return list(zip(frame["step"], labels, strict=True))

    assert shown(run.id) == [("gate:review", "waiting for a decision")]
    flow.reject(run.id)
    assert shown(run.id) == [
        ("gate:review", "decided"),
        ("approved:review", "decision recorded"),
        ("gate:review", "waiting for a decision"),
    ]
    assert list(dnb.history(run.id, store=store_url)["status"]) == ["interrupted", "approved", "interrupted"]
    dnb.cancel(run.id, store=store_url)
    assert shown(run.id)[-1] == ("gate:review", "not decided")
    assert "interrupted" not in styled(dnb.history(run.id, store=store_url))._repr_html_()


# -- escaping and missing values --------------------------------------------------------------------------


def test_hostile_text_is_escaped_and_missing_values_are_empty(store_url: str) -> None:
    """Issue 18 item 6: values, column names and ids are escaped; None, NaN, NaT and <NA> show as empty cells."""
    broken = hostile(store_url)
    flow = dnb.Workflow("names", store=store_url)

    @flow.node()
    def odd(state):
        return {"<img src=x onerror=alert(2)>": "<b>bold</b>"}

    named = flow.run({})
    listed = dnb.runs(store=store_url)
    html = styled(listed)._repr_html_()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert column_of(listed, html, "error")[0] == ""  # the completed run has no error (<NA>)

    compared = dnb.compare([broken.id, named.id], store=store_url)
    html = styled(compared)._repr_html_()
    assert "<th>&lt;img src=x onerror=alert(2)&gt;</th>" in html and "<img" not in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html and "<b>bold" not in html

    history = dnb.history(broken.id, store=store_url)
    html = styled(history)._repr_html_()
    assert column_of(history, html, "duration")[-1] == ""  # NaT: run_end ran nothing
    assert column_of(history, html, "iteration") == ["", ""]  # <NA> in an Int64 column
    for missing in ("NaT", "&lt;NA&gt;", "<NA>", ">nan<", ">None<"):
        assert missing not in html


# -- the frames themselves ----------------------------------------------------------------------------------


def test_frames_keep_their_full_precision_dtypes(store_url: str) -> None:
    """Issue 18 item 6: only the HTML changes; the frame keeps UTC ns datetimes, ns timedeltas, categories."""
    run = pricing(store_url).run({"rate": 0.1})
    frame = dnb.history(run.id, store=store_url)
    before = frame.copy(deep=True)
    shown = styled(frame, "History")
    assert isinstance(shown, Styled) and shown.frame is frame
    shown._repr_html_()
    pd.testing.assert_frame_equal(frame, before)
    assert str(frame["created_at"].dtype) == "datetime64[ns, UTC]"
    assert str(frame["duration"].dtype) == "timedelta64[ns]"
    assert isinstance(frame["status"].dtype, pd.CategoricalDtype)
    assert (
        frame["duration"].iloc[0] == before["duration"].iloc[0]
    )  # nanoseconds kept, not rounded to the shown 3 digits
    assert repr(shown) == repr(frame)

    listed = dnb.runs(store=store_url)
    assert (
        str(listed["elapsed"].dtype) == "timedelta64[ns]" and str(listed["updated_at"].dtype) == "datetime64[ns, UTC]"
    )


def test_a_long_view_says_how_many_rows_it_leaves_out(store_url: str) -> None:
    """Issue 18 item 6: the HTML shows the first 200 rows and says so; the frame keeps them all."""
    run_id = run_with_durations(store_url, [0.01] * 250)
    frame = dnb.history(run_id, store=store_url)
    html = styled(frame, "History")._repr_html_()
    assert "<b>History</b> (first 200 of 250 rows)" in html
    assert html.count("<tr>") == 200 and len(frame) == 250
