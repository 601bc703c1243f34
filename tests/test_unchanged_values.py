"""Figures, fitted models and data frames that a cell leaves alone are not pickled again; changed ones are stored.

A cell that only uses a figure, a model or a frame (reads its size, scores it, sums a column)
must not pay for pickling it to find out that it did not change. Every way of changing one
still stores it again: through matplotlib, scikit-learn, pandas or statsmodels, drawn
afterwards, by hand, in place in its arrays, a cache filled in on first use.
"""

from __future__ import annotations

import array
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

import durable_nb as dnb
from durable_nb._loop import run_sync
from durable_nb.engine.cells import namespace, unchanged

pytestmark = pytest.mark.backends("sqlite")

SETUP = (
    "%%durable setup\nimport matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
    "import numpy as np\nfrom sklearn.ensemble import RandomForestClassifier\n"
    "from sklearn.linear_model import LogisticRegression\n"
    "X = np.random.RandomState(0).rand(200, 4)\ny = (X[:, 0] > 0.5).astype(int)"
)
# Drawn as the inline backend draws a figure at the end of its cell.
FIGURE = "%%durable figure\nfig, axs = plt.subplots(2, 2)\nfor a in axs.flat:\n    a.plot([1, 2, 3])\nfig.canvas.draw()"
MODELS = (
    "%%durable models\nmodel = LogisticRegression().fit(X, y)\n"
    "forest = RandomForestClassifier(n_estimators=5, random_state=0).fit(X, y)"
)


class Shell:
    """An IPython shell attached to a run, which records every value the tracker pickles."""

    def __init__(self, store_url: str, pickled: list[list[Any]]) -> None:
        self.shell = InteractiveShell()
        self.pickled = pickled
        self.shell.run_line_magic("load_ext", "durable_nb")
        self.ok(f"%durable run unchanged --store {store_url}")
        self.store_url = store_url

    def ok(self, source: str) -> None:
        result = self.shell.run_cell(source)
        assert result.success, result.error_in_exec or result.error_before_exec

    def cell(self, source: str) -> list[Any]:
        """Run a cell; return the values pickled after it."""
        self.pickled.clear()
        self.ok(source)
        return [value for values in self.pickled for value in values]

    def changed(self, node: str) -> list[str]:
        run_id = dnb.runs("unchanged", store=self.store_url)["run_id"].iloc[0]
        return sorted(dnb.history(run_id, store=self.store_url).set_index("step")["changed"][f"after:{node}"])

    def release(self) -> None:
        from durable_nb.notebook.session import session_for

        session = session_for(self.shell)
        if session.cell_run is not None:
            run_sync(session.cell_run.release())


@pytest.fixture
def shell(store_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Shell]:
    pickled: list[list[Any]] = []
    real = namespace.pickle_values

    def recording(values: list[Any], names: Any) -> Any:
        pickled.append(list(values))
        return real(values, names)

    monkeypatch.setattr(namespace, "pickle_values", recording)
    made = Shell(store_url, pickled)
    for cell in (SETUP, FIGURE, MODELS):
        made.ok(cell)
    yield made
    made.release()
    # pyplot keeps every figure of this process open: each test's shell adds its own.
    import matplotlib.pyplot as plt

    plt.close("all")


def held(pickled: list[Any], *values: Any) -> bool:
    return any(any(p is v for v in values) for p in pickled)


def test_a_figure_a_cell_only_reads_is_not_pickled_again(shell: Shell) -> None:
    """Reading a figure (its size, its axes' limits) pickles neither it nor its axes, and stores nothing."""
    ns = shell.shell.user_ns
    pickled = shell.cell("%%durable read\nsize = fig.get_size_inches()\nlimits = axs[0, 0].get_xlim()")
    assert not held(pickled, ns["fig"], ns["axs"])
    assert shell.changed("read") == ["limits", "size"]
    # pyplot keeps the figure open (a file backend): a cell that does not name it leaves it alone too.
    assert not held(shell.cell("%%durable other\nn = 1"), ns["fig"])


class CountingReach(array.array):  # type: ignore[type-arg]
    """A reach that counts the walks over its ids."""

    walks = 0

    def __iter__(self) -> Iterator[int]:
        type(self).walks += 1
        return super().__iter__()

    def tolist(self) -> list[int]:
        type(self).walks += 1
        return super().tolist()


def test_a_figure_a_cell_only_reads_costs_no_walk_over_its_objects(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept unchanged, a figure's reach (thousands of object ids) is neither walked nor copied, and its
    arrays are hashed in one digest, not one hasher each."""
    from durable_nb.notebook.session import session_for

    tracker = session_for(shell.shell).require().tracker
    known = tracker.known["fig"]
    assert known.witness is not None and len(known.witness.buffers) > 1
    counting = CountingReach("q", known.reach)
    for name in known.members:
        tracker._set(name, tracker.known[name]._replace(reach=counting))
    digests: list[int] = []
    real = unchanged._buffers_digest

    def counted(views: list[memoryview], layout: bytes) -> str:
        digests.append(len(views))
        return real(views, layout)

    monkeypatch.setattr(unchanged, "_buffers_digest", counted)
    CountingReach.walks = 0
    ns = shell.shell.user_ns
    assert not held(shell.cell("%%durable read\nsize = fig.get_size_inches()"), ns["fig"], ns["axs"])
    assert CountingReach.walks == 0
    assert digests == [len(known.witness.buffers)]
    # Changed, it is pickled and stored again, whatever reach it had.
    assert held(shell.cell("%%durable title\naxs[0, 0].set_title('set')"), ns["fig"])
    assert shell.changed("title") == ["a", "axs", "fig"]


def test_a_figure_pyplot_holds_open_is_checked_without_a_call_per_artist(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After every cell, a figure pyplot holds open is checked: its artists' animated flags are read
    without calling get_animated on each (hundreds of calls a cell); an artist made animated is still seen."""
    import matplotlib.artist

    calls: list[object] = []
    real = matplotlib.artist.Artist.get_animated

    def counted(artist: matplotlib.artist.Artist) -> bool:
        calls.append(artist)
        return real(artist)

    monkeypatch.setattr(matplotlib.artist.Artist, "get_animated", counted)
    ns = shell.shell.user_ns
    assert not held(shell.cell("%%durable nothing\nz = 1"), ns["fig"], ns["axs"])
    assert calls == []
    shell.cell("%%durable animate\naxs[1, 1].lines[0].set_animated(True)")
    assert shell.changed("animate") == ["a", "axs", "fig"]


def test_a_figure_that_reported_no_change_is_not_asked_for_its_artists_again(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The artists whose animated flags are read after each cell are those its witness read: while the
    figure reports no change (adding or removing an artist marks it stale), none is asked for its children."""
    import matplotlib.axes
    import matplotlib.figure

    asked: list[object] = []
    for kind in (matplotlib.axes.Axes, matplotlib.figure.Figure):
        real = kind.get_children
        monkeypatch.setattr(kind, "get_children", lambda self, real=real: asked.append(self) or real(self))
    ns = shell.shell.user_ns
    assert not held(shell.cell("%%durable nothing\nz = 1"), ns["fig"], ns["axs"])
    assert asked == []
    shell.cell("%%durable added\nline = axs[0, 0].plot([1, 2])[0]")
    assert {"axs", "fig"} <= set(shell.changed("added"))
    shell.cell("%%durable animate\nline.set_animated(True)")
    assert {"axs", "fig"} <= set(shell.changed("animate"))


def test_a_figure_changed_through_matplotlib_is_stored_again(shell: Shell) -> None:
    """A title set through the axes, or through pyplot's current figure, stores the figure again."""
    ns = shell.shell.user_ns
    assert held(shell.cell("%%durable title\naxs[0, 0].set_title('set')"), ns["fig"])
    assert shell.changed("title") == ["a", "axs", "fig"]
    shell.cell("%%durable pyplot\nplt.xlabel('through pyplot')")
    assert shell.changed("pyplot") == ["a", "axs", "fig"]


def test_a_figure_changed_then_drawn_is_stored_again(shell: Shell) -> None:
    """Drawing clears matplotlib's stale flag: the change it hid is still seen."""
    shell.cell("%%durable drawn\naxs[0, 1].set_ylabel('y')\nfig.canvas.draw()")
    assert {"a", "axs", "fig"} <= set(shell.changed("drawn"))


def test_a_figure_changed_by_hand_is_stored_again(shell: Shell) -> None:
    """Changes matplotlib does not report: an attribute set on the figure, plotted data edited in place."""
    shell.cell("%%durable attribute\nfig.note = 'by hand'")
    assert shell.changed("attribute") == ["a", "axs", "fig"]
    shell.cell("%%durable data\naxs[1, 0].lines[0].get_xdata()[0] = 99")
    assert shell.changed("data") == ["a", "axs", "fig"]


def test_a_fitted_model_a_cell_only_uses_is_not_pickled_again(shell: Shell) -> None:
    """Scoring models pickles neither of them, and stores only the score."""
    ns = shell.shell.user_ns
    pickled = shell.cell("%%durable score\nscore = model.score(X, y) + forest.score(X, y)")
    assert not held(pickled, ns["model"], ns["forest"])
    assert shell.changed("score") == ["score"]


@pytest.mark.parametrize(
    "change",
    [
        "model.fit(X[:100], y[:100])",
        "model.set_params(C=0.5)",
        "model.coef_[0, 0] = 5.0",
        "model.note = 'by hand'",
    ],
)
def test_a_model_changed_in_place_is_stored_again(shell: Shell, change: str) -> None:
    """Refitted, reparametrised, its fitted arrays edited in place, or given an attribute: stored again."""
    shell.cell(f"%%durable change\n{change}")
    assert shell.changed("change") == ["model"]


def test_a_forest_refitted_in_place_is_stored_again(shell: Shell) -> None:
    """A forest's trees live in compiled objects: refitting it on other data stores it again."""
    shell.cell("%%durable refit\nforest.fit(X[:120], y[:120])")
    assert shell.changed("refit") == ["forest"]


def test_restored_figures_and_models_are_not_pickled_again_by_cells_that_use_them(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a restart, a model and a figure restored from the store are pickled once (to know them), not by
    every later cell that uses them; the restored model scores as the original did."""
    pickled: list[list[Any]] = []
    real = namespace.pickle_values
    monkeypatch.setattr(
        namespace, "pickle_values", lambda values, names: pickled.append(list(values)) or real(values, names)
    )
    first = Shell(store_url, pickled)
    for cell in (SETUP, FIGURE, MODELS):
        first.ok(cell)
    first.ok("%%durable score\nscore = model.score(X, y)")
    expected = first.shell.user_ns["score"]
    first.release()
    second = Shell(store_url, pickled)
    for cell in (SETUP, FIGURE, MODELS):
        second.ok(cell)
    ns = second.shell.user_ns
    second.cell("%%durable again\nagain = model.score(X, y)\nsize = fig.get_size_inches()")
    assert ns["again"] == expected
    assert not held(second.cell("%%durable twice\ntwice = model.score(X, y) + fig.get_dpi()"), ns["model"], ns["fig"])


def test_artists_kept_in_variables_are_not_pickled_again_until_changed(shell: Shell) -> None:
    """Lines and a histogram's bars kept in variables: read, they are not pickled; recoloured, stored again."""
    ns = shell.shell.user_ns
    shell.cell(
        "%%durable artists\nlines = axs[0, 0].plot([3, 2, 1])\nbars = axs[0, 1].hist([1, 2, 2, 3])\nfig.canvas.draw()"
    )
    pickled = shell.cell("%%durable read\ncolor = lines[0].get_color()\nheights = [b.get_height() for b in bars[2]]")
    assert not held(pickled, ns["lines"], ns["bars"], ns["fig"])
    shell.cell("%%durable recolour\nlines[0].set_color('red')")
    assert {"fig", "lines"} <= set(shell.changed("recolour"))


def test_witnesses_are_taken_and_checked_with_the_collector_paused(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A witness's walk digests thousands of objects, as a pickle meets them: no cycle collection runs
    meanwhile, and the collector runs again once the commit's plan is made."""
    import gc

    collecting: list[bool] = []
    for name in ("witness", "holds"):
        real = getattr(namespace, name)

        def recording(*args: Any, real: Any = real) -> Any:
            collecting.append(gc.isenabled())
            return real(*args)

        monkeypatch.setattr(namespace, name, recording)
    shell.cell("%%durable read\nsize = fig.get_size_inches()\nscore = model.score(X, y)")
    assert collecting and not any(collecting)
    assert gc.isenabled()


LINES = (
    "%%durable lines\nplt.figure()\np1 = plt.plot([1, 2])\np2 = plt.plot([2, 1])\np3 = plt.plot([1, 1])\n"
    "p4 = plt.plot([2, 2], linestyle='dotted')"
)


def test_lines_drawn_on_one_axes_are_pickled_together_not_one_by_one(shell: Shell) -> None:
    """Lines that pyplot draws on one new figure, each kept in a variable of its own, are found reaching the
    figure the first was pickled with: the figure is pickled twice in that commit, not once per line; a
    restore gives them back on one axes."""
    ns = shell.shell.user_ns
    shell.cell(LINES)
    lines = [ns[f"p{i}"] for i in range(1, 5)]
    assert len([values for values in shell.pickled if held(values, *lines)]) <= 2
    assert shell.changed("lines") == ["p1", "p2", "p3", "p4"]
    shell.release()
    again = Shell(shell.store_url, shell.pickled)
    for cell in (SETUP, FIGURE, MODELS, LINES):
        again.ok(cell)
    restored = again.shell.user_ns
    assert len({id(restored[f"p{i}"][0].axes) for i in range(1, 5)}) == 1
    assert restored["p4"][0].get_linestyle() == ":"
    again.release()


def test_a_value_joined_to_a_figures_unit_that_cannot_be_pickled_is_left_out_not_the_cell(shell: Shell) -> None:
    """A value holding a line of a figure pickled in the same commit joins the figure's unit; when it
    cannot be pickled, the cell still commits: the figure and the line without it, the value named unstored."""
    ns = shell.shell.user_ns
    shell.ok(SETUP)
    shell.ok(
        "%%durable held\nimport threading, types\nfig, ax = plt.subplots()\nline, = ax.plot([1, 2])\n"
        "holder = types.SimpleNamespace(line=line, lock=threading.Lock())"
    )
    changed = shell.changed("held")
    assert {"ax", "fig", "line"} <= set(changed) and "holder" not in changed
    assert "holder" in ns
    shell.release()
    again = Shell(shell.store_url, shell.pickled)
    again.ok(SETUP)
    again.ok(
        "%%durable held\nimport threading, types\nfig, ax = plt.subplots()\nline, = ax.plot([1, 2])\n"
        "holder = types.SimpleNamespace(line=line, lock=threading.Lock())"
    )
    restored = again.shell.user_ns
    assert restored["line"].axes is restored["ax"] and "holder" not in restored
    again.release()


SECOND = (
    "%%durable second\nfig2, ax2 = plt.subplots()\nax2.plot([1, 2, 3], 'o-')\nax2.scatter([1, 2], [2, 1], marker='h')\n"
    "fig2.colorbar(ax2.imshow(np.eye(3)))\nfig2.canvas.draw()"
)


def test_a_new_figure_does_not_pickle_earlier_figures_again(shell: Shell) -> None:
    """Unrelated figures share only what matplotlib holds for every figure (rcParams' lists, its marker paths,
    a colormap's colours): a new figure, then a change to it, pickles none of the earlier ones."""
    ns = shell.shell.user_ns
    assert not held(shell.cell(SECOND), ns["fig"], ns["axs"])
    assert shell.changed("second") == ["ax2", "fig2"]
    third = "%%durable third\nfig3, ax3 = plt.subplots()\nax3.plot([3, 2, 1], 'o')\nfig3.canvas.draw()"
    assert not held(shell.cell(third), ns["fig"], ns["fig2"])
    assert shell.changed("third") == ["ax3", "fig3"]
    pickled = shell.cell("%%durable title\nax2.set_title('changed')")
    assert held(pickled, ns["fig2"]) and not held(pickled, ns["fig"], ns["fig3"])
    assert shell.changed("title") == ["ax2", "fig2"]


def test_figures_sharing_an_object_of_their_own_stay_one_unit(shell: Shell) -> None:
    """Two figures holding one list of the notebook's are pickled together, and restored still sharing it."""
    shell.cell(SECOND)
    shell.cell("%%durable tie\nnote = ['shared']\nfig.note = note\nfig2.note = note")
    assert shell.changed("tie") == ["a", "ax2", "axs", "fig", "fig2", "note"]
    shell.release()
    again = Shell(shell.store_url, shell.pickled)
    for cell in (SETUP, FIGURE, MODELS, SECOND, "%%durable tie\nnote = ['shared']\nfig.note = note\nfig2.note = note"):
        again.ok(cell)
    ns = again.shell.user_ns
    assert ns["fig"].note is ns["fig2"].note is ns["note"]
    again.release()


def test_a_figure_changed_beside_another_is_stored_again_and_restored(shell: Shell) -> None:
    """A figure changed in place after a second one was made is stored again, and restores with the change
    (its markers and colour bar intact) while the other restores as it was."""
    shell.cell(SECOND)
    shell.cell("%%durable change\nax2.set_title('changed')\nax2.lines[0].set_marker('s')\nfig2.canvas.draw()")
    assert shell.changed("change") == ["ax2", "fig2"]
    shell.release()
    again = Shell(shell.store_url, shell.pickled)
    change = "%%durable change\nax2.set_title('changed')\nax2.lines[0].set_marker('s')\nfig2.canvas.draw()"
    for cell in (SETUP, FIGURE, MODELS, SECOND, change):
        again.ok(cell)
    ns = again.shell.user_ns
    assert ns["ax2"].get_title() == "changed" and ns["ax2"].lines[0].get_marker() == "s"
    assert ns["ax2"].figure is ns["fig2"] and len(ns["fig2"].axes) == 2
    assert ns["axs"][0, 0].figure is ns["fig"] and ns["axs"][0, 0].get_title() == ""
    ns["fig2"].canvas.draw()
    again.release()


FRAME = (
    "%%durable frame\nimport pandas as pd\n"
    "df = pd.DataFrame({'a': [1.0, 2.0, 3.0], 'b': ['x', 'y', 'z']}, index=pd.Index([10, 20, 30], name='k'))\n"
    "s = pd.Series([1, 2, 3], name='s')\n"
    "dates = pd.Series([1.0, 2.0], index=pd.date_range('2020-01-01', periods=2, freq='D'))"
)


def test_a_frame_a_cell_only_reads_is_not_pickled_again(shell: Shell) -> None:
    """Reading a DataFrame and Series (one indexed by dates) pickles none, and stores only what the cell made."""
    ns = shell.shell.user_ns
    shell.cell(FRAME)
    pickled = shell.cell("%%durable read\ntotal = df['a'].sum() + s.sum() + dates.sum()\nfirst = df.loc[10, 'b']")
    assert not held(pickled, ns["df"], ns["s"], ns["dates"])
    assert shell.changed("read") == ["first", "total"]


@pytest.mark.parametrize(
    "change",
    [
        "df.loc[10, 'a'] = 5.0",
        "df.loc[20, 'b'] = 'changed'",
        "df['c'] = 1",
        "df.index.name = 'other'",
        "df.attrs['source'] = 'by hand'",
        "df.columns = ['A', 'B']",
    ],
)
def test_a_frame_mutated_in_place_is_stored_again(shell: Shell, change: str) -> None:
    """A value set in place (numbers or text), a column added, the index renamed, attrs, new columns: stored again."""
    shell.cell(FRAME)
    shell.cell(f"%%durable change\n{change}")
    assert shell.changed("change") == ["df"]


def test_a_frame_holding_a_notebook_object_is_pickled_each_time(shell: Shell) -> None:
    """A frame holding an object of a notebook class cannot be vouched for: pickled again, and an edit
    inside that object is stored."""
    ns = shell.shell.user_ns
    shell.cell(
        "%%durable things\nimport pandas as pd\nclass Thing:\n    x = 0\nobjects = pd.DataFrame({'o': [Thing()]})"
    )
    assert held(shell.cell("%%durable read\nn = len(objects)"), ns["objects"])
    shell.cell("%%durable edit\nobjects.loc[0, 'o'].x = 5")
    assert shell.changed("edit") == ["objects"]


def test_a_series_renamed_in_place_is_stored_again(shell: Shell) -> None:
    """A Series' name is part of it: renamed in place, it is stored again."""
    shell.cell(FRAME)
    shell.cell("%%durable rename\ns.name = 'renamed'")
    assert "s" in shell.changed("rename")


def test_frames_and_series_are_not_one_unit_through_their_class(shell: Shell) -> None:
    """Every frame's pickle carries its class's one ``_metadata`` list: that does not tie two frames (or two
    series) together. Changing one pickles none of the others."""
    ns = shell.shell.user_ns
    shell.cell(FRAME)
    shell.cell("%%durable other\nother = pd.DataFrame({'c': [1.0, 2.0]})\nt = pd.Series([5, 6])")
    pickled = shell.cell("%%durable change\nother.loc[0, 'c'] = 9.0\nt[0] = 7")
    assert not held(pickled, ns["df"], ns["s"], ns["dates"])
    assert shell.changed("change") == ["other", "t"]


def test_what_a_library_no_longer_holds_ties_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A class's list or a module's path the library has replaced since ties what still holds it, as any
    object does; the one it holds now ties nothing."""
    import matplotlib.markers
    import pandas as pd

    from durable_nb.engine.pickling import pickle_values

    frame = pd.DataFrame({"a": [1.0]})
    figure, axes = plt_subplots()
    axes.plot([1, 2], marker="o")
    owner = pd.core.generic.NDFrame  # the class that holds frames' one _metadata list
    old_list, old_path = owner._metadata, matplotlib.markers._empty_path
    reach = pickle_values([frame, old_list, figure, old_path], {}).reach
    assert id(old_list) not in reach and id(old_path) not in reach
    monkeypatch.setattr(owner, "_metadata", list(old_list))
    monkeypatch.setattr(matplotlib.markers, "_empty_path", old_path.deepcopy())
    reach = pickle_values([frame, old_list, figure, old_path], {}).reach
    assert id(old_list) in reach and id(old_path) in reach
    assert id(owner._metadata) not in reach and id(matplotlib.markers._empty_path) not in reach


def plt_subplots() -> Any:
    import matplotlib

    matplotlib.use("agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots()
    plt.close(figure)
    return figure, axes


RESULTS = (
    "%%durable fit\nimport numpy as np\nimport pandas as pd\nimport statsmodels.api as sm\n"
    "data = pd.DataFrame({'x': np.arange(20.0), 'y': np.arange(20.0) * 2 + np.sin(np.arange(20.0))})\n"
    "results = sm.OLS(data['y'], sm.add_constant(data['x'])).fit()\nprint(results.params)"
)


def test_statsmodels_results_a_cell_only_uses_are_not_pickled_again(shell: Shell) -> None:
    """Reading a fitted statsmodels result (its parameters, a prediction) does not pickle it again."""
    pytest.importorskip("statsmodels")
    ns = shell.shell.user_ns
    shell.cell(RESULTS)
    pickled = shell.cell("%%durable use\nslope = results.params['x']\nfitted = results.predict()[:3]")
    assert not held(pickled, ns["results"], ns["data"])
    assert shell.changed("use") == ["fitted", "slope"]


@pytest.mark.parametrize(
    "change",
    [
        "bse = results.bse",  # computed on first use and cached inside the result: its pickle changes
        "results.model.exog[0, 1] = -1.0",
        "results.model.data.orig_exog.iloc[0, 1] = -1.0",
        "rsquared = results.rsquared",
        "results.note = 'by hand'",
    ],
)
def test_statsmodels_results_whose_state_changed_are_stored_again(shell: Shell, change: str) -> None:
    """A cached statistic filled in, the model's arrays or its data frame edited in place, an attribute set:
    stored again."""
    pytest.importorskip("statsmodels")
    shell.cell(RESULTS)
    shell.cell(f"%%durable change\n{change}")
    assert "results" in shell.changed("change")


def test_a_result_sharing_its_data_is_pickled_once_with_its_unit_when_it_changes(shell: Shell) -> None:
    """Two results fitted on one frame are one unit with it: a cell that changes one of them (a statistic
    cached on first use) pickles the three once, together, not that result alone first."""
    pytest.importorskip("statsmodels")
    ns = shell.shell.user_ns
    shell.cell(f"{RESULTS}\nother = sm.OLS(data['y'], data['x']).fit()")
    shell.cell("%%durable change\nbse = results.bse")
    with_results = [values for values in shell.pickled if held(values, ns["results"])]
    assert len(with_results) == 1
    assert held(with_results[0], ns["other"]) and held(with_results[0], ns["data"])
    assert {"data", "other", "results"} <= set(shell.changed("change"))


def test_a_frame_that_changed_is_vouched_for_again_once_found_unchanged(shell: Shell) -> None:
    """After a change, the next cell that uses the frame pickles it (no witness is kept for what keeps
    changing); found unchanged there, it is not pickled by the cells after."""
    ns = shell.shell.user_ns
    shell.cell(FRAME)
    assert held(shell.cell("%%durable change\ndf.loc[10, 'a'] = 5.0"), ns["df"])
    assert held(shell.cell("%%durable first\nn = len(df)"), ns["df"])
    assert not held(shell.cell("%%durable second\nm = len(df)"), ns["df"])
    assert shell.changed("second") == ["m"]


def test_a_changed_unit_reached_through_each_of_its_names_is_checked_once(
    shell: Shell, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell that changes one name of a unit reaches the others through it: the unit's witness is
    checked once in that commit, not once per name, and every name is stored again."""
    checks: list[Any] = []
    real = namespace.holds

    def counting(held: Any, values: list[Any]) -> bool:
        checks.append(held)
        return real(held, values)

    monkeypatch.setattr(namespace, "holds", counting)
    shell.cell(f"{FRAME}\nframes = [df, s]\nmore = [df]")
    checks.clear()
    shell.cell("%%durable change\ndf.loc[10, 'a'] = 5.0")
    assert {"df", "frames", "more"} <= set(shell.changed("change"))
    # The figure the shell keeps open has a witness of its own, checked once too.
    assert checks and len(checks) == len({id(c) for c in checks})


STATE_SPACE = (
    "%%durable arima\nimport numpy as np\nfrom statsmodels.tsa.arima.model import ARIMA\n"
    "y = np.sin(np.arange(60.0) / 3) + np.random.RandomState(0).normal(size=60) * 0.1\n"
    "arima = ARIMA(y, order=(1, 0, 0)).fit()"
)


def test_a_state_space_result_a_cell_only_uses_is_not_pickled_again(shell: Shell) -> None:
    """An ARIMA result holds compiled objects that copy their matrices out at each pickle: reading its
    parameters pickles it neither to know it unchanged nor to store it."""
    pytest.importorskip("statsmodels")
    ns = shell.shell.user_ns
    shell.cell(STATE_SPACE)
    pickled = shell.cell("%%durable use\nphi = arima.params[1]")
    assert not held(pickled, ns["arima"])
    assert not held(shell.cell("%%durable again\nphi2 = arima.params[1] * 2"), ns["arima"])
    assert shell.changed("again") == ["phi2"]


def test_the_array_a_result_was_fitted_on_changed_in_place_stores_both(shell: Shell) -> None:
    """The result and the array it holds are one unit with one witness: the array edited in place
    stores both again."""
    pytest.importorskip("statsmodels")
    shell.cell(STATE_SPACE)
    shell.cell("%%durable use\nphi = arima.params[1]")
    shell.cell("%%durable change\ny[0] = 100.0")
    assert {"arima", "y"} <= set(shell.changed("change"))
    assert shell.shell.user_ns["arima"].model.data.orig_endog[0] == 100.0


def test_a_state_space_result_whose_compiled_state_changed_is_stored_again_and_restored(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory a compiled object of the result holds, changed in place (here through its own
    ``__setstate__``), shows only in the copies it makes at each pickle: it is stored again, and a
    new kernel restores it as it was left."""
    pytest.importorskip("statsmodels")
    pickled: list[list[Any]] = []
    first = Shell(store_url, pickled)
    change = (
        "%%durable change\ncompiled = arima.model.ssm.initialization._initializations['d']\n"
        "compiled.__setstate__({'_tmp_transition': np.full((1, 1), 0.25, order='F'),\n"
        "                       '_tmp_selected_state_cov': np.full((1, 1), 2.0, order='F')})"
    )
    cells = (STATE_SPACE, "%%durable use\nphi = arima.params[1]", change)
    for cell in cells:
        first.ok(cell)
    assert "arima" in first.changed("change")
    expected = _compiled_state(first.shell.user_ns["arima"])
    assert expected == {"_tmp_transition": [[0.25]], "_tmp_selected_state_cov": [[2.0]]}
    first.release()
    second = Shell(store_url, pickled)
    for cell in cells:
        second.ok(cell)
    assert _compiled_state(second.shell.user_ns["arima"]) == expected
    second.release()


def _compiled_state(result: Any) -> dict[str, Any]:
    """The matrices a state space result's compiled initialization holds (copied out by its reduce)."""
    state = result.model.ssm.initialization._initializations["d"].__reduce__()[2]
    return {name: array.tolist() for name, array in state.items()}


def test_the_collector_pause_nests_and_leaves_a_collector_turned_off_off() -> None:
    """Paused inside the block or call (nested calls too, and through an error), running again
    after it; a collector the caller turned off stays off."""
    import gc

    from durable_nb._collector import collector_paused

    seen: list[bool] = []

    @collector_paused()
    def walk(depth: int) -> int:
        seen.append(gc.isenabled())
        if depth == 0:
            raise ValueError("deepest")
        return walk(depth - 1)

    assert gc.isenabled()
    with pytest.raises(ValueError, match="deepest"):
        walk(2)
    with collector_paused():
        seen.append(gc.isenabled())
    assert seen == [False, False, False, False] and gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert walk.__name__ == "walk" and not gc.isenabled()
    finally:
        gc.enable()
