"""A restored notebook is the session that was saved: same objects, same settings, same outputs.

Every test runs notebooks in real kernels: the first runs the cells (and is killed with
SIGKILL where the test says so), a new kernel runs them again (Run All) against the same
store, and what the restored session holds is compared with what the first one held.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kernelkit import CellResult, Kernel

import durable_nb as dnb

# Real kernels on SQLite: the kernel's PostgreSQL case is in test_kernels.py, the store's in the conformance tests.
pytestmark = [pytest.mark.slow, pytest.mark.backends("sqlite")]

SETUP = "%load_ext durable_nb\n%durable run faithful"


@pytest.fixture
def start(kernels: Callable[[], Kernel]) -> Callable[[], Kernel]:
    return kernels


def run_all(kernel: Kernel, cells: list[str]) -> list[CellResult]:
    results = kernel.run_all([SETUP, *cells])
    assert all(r.status == "ok" for r in results), [(r.status, r.text) for r in results]
    return results[1:]


def probe(kernel: Kernel, expression: str) -> Any:
    """Evaluate an expression in the kernel and return it through JSON."""
    result = kernel.run(f"import json as _json\nprint('PROBE' + _json.dumps({expression}))")
    assert result.status == "ok", result.text
    line = next(line for line in result.text.splitlines() if line.startswith("PROBE"))
    return json.loads(line[len("PROBE") :])


def restored(results: list[CellResult]) -> list[bool]:
    return ["restored '" in r.text for r in results]


def images(result: CellResult) -> list[str]:
    return [o["data"]["image/png"] for o in result.outputs if "image/png" in o.get("data", {})]


def test_models_fitted_in_a_loop_come_back_fitted(start: Callable[[], Kernel]) -> None:
    """Identity: objects shared between variables are restored shared, and a change made in
    place through a loop variable is committed (the issue's reproduction)."""
    cells = [
        "%%durable a\nfrom sklearn.datasets import load_iris\nfrom sklearn.linear_model import LogisticRegression\n"
        "X, y = load_iris(return_X_y=True)\nlr = LogisticRegression(max_iter=500); models = [(lr, 'lr')]",
        "%%durable b\nfor m, name in models:\n    m.fit(X, y)",
    ]
    first = start()
    run_all(first, cells)
    expected = probe(first, "round(lr.score(X, y), 6)")
    first.kill()
    second = start()
    assert restored(run_all(second, cells)) == [True, True]
    assert probe(second, "round(lr.score(X, y), 6)") == expected
    assert probe(second, "[models[0][0] is lr, m is lr]") == [True, True]


SHAPES = [
    "%%durable make\nimport numpy as np, pandas as pd\n"
    "inner = [1]\nouter = {'k': [inner]}\n"
    "class Box:\n    def __init__(self, v=0):\n        self.v = v\n"
    "child = Box(); holder = Box(); holder.child = child\n"
    "points = [Box(1), Box(2)]; first = points[0]\n"
    "d = {'x': Box()}\n"
    "base = np.arange(10.0); view = base[2:5]\n"
    "frame = pd.DataFrame({'a': [1, 2, 3]})\n"
    "s = {1}; owner = [s]\n"
    "a = [0]\n"
    "def make():\n    c = []\n    def add(x):\n        c.append(x)\n"
    "    def get():\n        return c\n    return add, get\n"
    "add, get = make()\n"
    "registry = []\ndef register(x):\n    registry.append(x)\n"
    "def twice():\n    return late * 2",
    "%%durable alias\nb = a",
    "%%durable change\n"
    "outer['k'][0].append(2)\n"
    "holder.child.v = 9\n"
    "for p in points:\n    p.v += 10\n"
    "d['x'].v = 5\n"
    "base[3] = 99.0\n"
    "frame['c'] = frame['a'] * 2\n"
    "owner[0].add(2)\n"
    "b.append(1)\n"
    "add(1)\n"
    "register(5)\n"
    "late = 21",
]
SHAPE_CHECKS = (
    "{'inner': inner, 'inner_shared': outer['k'][0] is inner, 'child': child.v, 'child_shared': holder.child is child,"
    " 'points': [p.v for p in points], 'first_shared': first is points[0], 'd': d['x'].v,"
    " 'view': view.tolist(), 'view_shares': bool(np.shares_memory(view, base)),"
    " 'frame': frame['c'].tolist(), 's': sorted(s), 's_shared': owner[0] is s,"
    " 'alias': b is a, 'a': a, 'closure': get(), 'registry': registry, 'twice': twice()}"
)


def test_identity_and_in_place_changes_over_many_shapes(start: Callable[[], Kernel]) -> None:
    """Identity holds across cells, and changes made through any path are committed: nested
    containers, dict values, objects in lists, attributes, numpy views, DataFrame columns,
    sets, aliases, closures and a function that changes a global."""
    first = start()
    run_all(first, SHAPES)
    expected = probe(first, SHAPE_CHECKS)
    assert expected["view"] == [2.0, 99.0, 4.0] and expected["closure"] == [1] and expected["twice"] == 42
    first.kill()
    second = start()
    assert restored(run_all(second, SHAPES)) == [True, True, True]
    assert probe(second, SHAPE_CHECKS) == expected
    # The restored objects behave as the saved ones did: a view still views, a closure still
    # shares its cell, a function reads the namespace it lives in.
    assert probe(second, "[base.__setitem__(2, -1.0), view[0]][1]") == -1.0
    assert probe(second, "[add(7), get()][1]") == [1, 7]
    assert probe(second, "[globals().__setitem__('late', 5), twice()][1]") == 10


GENERATORS = [
    "%%durable make\nimport numpy as np\nrng = np.random.RandomState(0)\ngen = np.random.default_rng(1)\n"
    "models = {'a': {'random_state': rng}, 'b': [gen]}",
    "%%durable draw\nfirst = rng.rand(3).tolist() + gen.random(2).tolist()",
]
GENERATOR_CHECKS = (
    "{'one': models['a']['random_state'] is rng and models['b'][0] is gen,"
    " 'next': rng.rand(2).tolist() + gen.random(2).tolist()}"
)


def test_random_generators_held_by_other_values_come_back_as_one_object(start: Callable[[], Kernel]) -> None:
    """numpy generators passed to other values (scikit-learn's ``random_state=rng``) and advanced by a
    later cell come back as the one object they were, in the state the later cell left."""
    first = start()
    run_all(first, GENERATORS)
    expected = probe(first, GENERATOR_CHECKS)
    assert expected["one"] is True
    first.kill()
    second = start()
    assert restored(run_all(second, GENERATORS)) == [True, True]
    assert probe(second, GENERATOR_CHECKS) == expected


SETTINGS = [
    "%%durable imports\nimport os, sys, warnings\nimport numpy as np, pandas as pd, sklearn\n"
    "import matplotlib, matplotlib.pyplot as plt",
    "%%durable configure\nsklearn.set_config(enable_metadata_routing=True)\nnp.random.seed(7)\n"
    "pd.set_option('display.max_rows', 7)\nplt.rcParams['lines.linewidth'] = 4.5\n"
    "os.environ['DNB_TEST_SETTING'] = 'on'\nos.makedirs('work', exist_ok=True)\nos.chdir('work')\n"
    "sys.path.append('/opt/dnb-test-path')\nwarnings.filterwarnings('ignore', message='dnb test warning')\n"
    "matplotlib.style.library['dnb-style'] = {'axes.titlesize': 31.0}",
    "%%durable draw\nfirst_draw = float(np.random.rand())",
    "%%durable use_style\nplt.style.use('dnb-style')",
]
SETTINGS_CHECKS = (
    "{'routing': sklearn.get_config()['enable_metadata_routing'], 'rand': float(np.random.rand()),"
    " 'rows': pd.get_option('display.max_rows'), 'width': plt.rcParams['lines.linewidth'],"
    " 'title': plt.rcParams['axes.titlesize'], 'env': os.environ.get('DNB_TEST_SETTING'),"
    " 'cwd': os.path.basename(os.getcwd()), 'path': '/opt/dnb-test-path' in sys.path,"
    " 'style': 'dnb-style' in plt.style.available,"
    " 'filtered': any(getattr(f[1], 'pattern', None) == 'dnb test warning' for f in warnings.filters)}"
)


def test_settings_a_restored_cell_made_are_applied_again(start: Callable[[], Kernel]) -> None:
    """Process-wide settings made by committed cells hold in a new kernel after Run All: the
    cells that execute after a restore see the same scikit-learn config, random state,
    options, rcParams, environment, working directory, path, filters and styles."""
    first = start()
    run_all(first, SETTINGS)
    expected = probe(first, SETTINGS_CHECKS)
    assert expected["routing"] is True and expected["cwd"] == "work" and expected["title"] == 31.0
    first.kill()
    second = start()
    assert restored(run_all(second, SETTINGS)) == [True] * len(SETTINGS)
    assert probe(second, SETTINGS_CHECKS) == expected
    # A cell that executes now needs the setting: metadata routing must be on.
    code = (
        "from sklearn.linear_model import LogisticRegression\n"
        "LogisticRegression().set_fit_request(sample_weight=True)\nprint('routing works')"
    )
    assert "routing works" in second.run(code).text


FIGURES = [
    "%%durable implicit\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])",
    "%%durable subplots\nfig, ax = plt.subplots()\nax.plot([3, 1, 2])\nax.set_title('kept')",
    "%%durable loop\nfor i in range(3):\n    plt.figure()\n    plt.plot([i, i + 1])",
    "%%durable shown\nfig2, ax2 = plt.subplots()\nax2.bar([1, 2], [3, 4])\ndisplay(fig2)",
    "%%durable explicit\nplt.plot([5, 6])\nplt.show()\nprint('after show')",
    "%%durable none\nsummary = 'no figure here'",
]


def test_figures_restore_as_they_were_drawn(start: Callable[[], Kernel]) -> None:
    """Outputs: each cell shows the same images executed durably as run plainly, and the same
    again when restored (from the stored images: none drawn twice, none lost)."""
    plain = start()
    plain_results = plain.run_all([c.split("\n", 1)[1] for c in FIGURES])
    executed = start()
    durable_results = run_all(executed, FIGURES)
    executed.kill()
    restorer = start()
    restored_results = run_all(restorer, FIGURES)
    counts = [len(images(r)) for r in plain_results]
    assert counts == [1, 1, 3, 2, 1, 0]
    assert [len(images(r)) for r in durable_results] == counts
    assert [images(r) for r in restored_results] == [images(r) for r in durable_results]
    assert probe(restorer, "[ax.figure is fig, ax.get_title(), ax2.figure is fig2]") == [True, "kept", True]


def test_a_value_of_many_objects_restores_with_no_collection_meanwhile(start: Callable[[], Kernel]) -> None:
    """Loading a value made of many objects (a figure's artists) runs no garbage collection meanwhile: every
    one of them is kept, and the collector would walk them, and the notebook's heap, again and again. The
    value comes back whole, and collecting works again after it."""
    cells = ["%%durable many\nrows = {i: {'i': i, 'tags': [i]} for i in range(60_000)}\nrows['all'] = rows"]
    first = start()
    run_all(first, cells)
    first.kill()
    second = start()
    counting = (
        "import gc as _gc, sys as _sys\n_sys._collections = []\n"
        "_gc.callbacks.append(lambda phase, info: phase == 'start' and _sys._collections.append(info['generation']))"
    )
    assert second.run(SETUP).status == "ok"
    assert second.run(counting).status == "ok"
    result = second.run(cells[0])
    assert result.status == "ok" and restored([result]) == [True], result.text
    # 120,000 containers made with the collector on would run it about 170 times.
    assert len(probe(second, "__import__('sys')._collections")) < 10
    assert probe(second, "[len(rows), rows['all'] is rows, rows[59_999]['tags']]") == [60_001, True, [59_999]]
    assert probe(second, "__import__('gc').isenabled()") is True


def test_the_cell_value_is_out_n_and_underscore(start: Callable[[], Kernel]) -> None:
    """Outputs: a cell's value is shown as execute_result, with Out[n] and _ set, after a restore too."""
    cells = ["%%durable value\nnumbers = [3, 1, 2]\nsorted(numbers)", "%%durable name\nnumbers"]
    first = start()
    results = run_all(first, cells)
    assert [o["type"] for o in results[0].outputs] == ["execute_result"]
    first.kill()
    second = start()
    results = run_all(second, cells)
    assert [o["type"] for o in results[0].outputs] == ["execute_result", "display_data"]
    assert results[0].outputs[1]["data"]["text/plain"].startswith("durable_nb: restored 'value'")  # the note
    assert results[0].outputs[0]["data"]["text/plain"] == "[1, 2, 3]"
    assert probe(second, "[_ is numbers, Out[max(Out)] is numbers, Out[min(Out)]]") == [True, True, [1, 2, 3]]


def test_going_back_to_old_code_returns_to_its_run(start: Callable[[], Kernel], store_url: str) -> None:
    """Going back: after an edit forks the run, running the original code again returns to the
    original run (which ran that code from the same state) instead of forking once more."""
    cells = ["%%durable base\nx = 1", "%%durable step\ny = x + 1"]
    kernel = start()
    run_all(kernel, cells)
    original = dnb.runs("faithful", store=store_url)["run_id"].iloc[0]
    edited = kernel.run("%%durable step\ny = x + 100")
    assert "continuing in fork" in edited.text
    back = kernel.run(cells[1])
    assert f"matches run {original}" in back.text and "restored 'step'" in back.text
    assert probe(kernel, "y") == 2
    assert len(dnb.runs("faithful", store=store_url)) == 2  # no third run


def test_replay_cells_run_again_and_unknown_effects_are_named(start: Callable[[], Kernel], tmp_path: Path) -> None:
    """Settings durable_nb cannot read: a --replay cell runs again on restore; a set-up call into
    a library it does not watch is named in a warning when its cell is restored."""
    (tmp_path / "fakelib.py").write_text("STATE = {'seed': None}\ndef set_seed(n):\n    STATE['seed'] = n\n")
    cells = [
        "%%durable replayed --replay\nimport fakelib\nfakelib.set_seed(11)",
        "%%durable warned\nfakelib.set_seed(12)",
    ]
    first = start()
    run_all(first, cells)
    first.kill()
    second = start()
    results = run_all(second, cells)
    assert "replaying 'replayed'" in results[0].text
    assert "fakelib.set_seed(12)" in results[1].text and "--replay" in results[1].text
    assert probe(second, "fakelib.STATE['seed']") == 11


def shown(result: CellResult) -> list[dict[str, Any]]:
    """A cell's outputs as a front end keeps them, without durable_nb's notes."""
    return [o for o in result.outputs if "durable_nb" not in (o.get("metadata") or {})]


QUIET = [
    "%%durable quiet\nvalue = 41\nvalue + 1;",
    "%%durable commented\n(value\n + 2);  # a comment after the semicolon",
    "%%durable in_string\n'a;'",
    "%%durable lines\nimport matplotlib.pyplot as plt\nfig, ax = plt.subplots()\nax.plot([1, 2, 3]);",
    "%%durable label\nfig2, ax2 = plt.subplots()\nax2.plot([3, 1])\nax2.set_xlabel('x');",
    "%%durable returned\nfig3 = plt.figure()\nplt.plot([2, 2])\nfig3;",
    "%%durable shown\nvalue * 2",
]


def test_a_trailing_semicolon_hides_the_value_as_in_a_plain_cell(start: Callable[[], Kernel]) -> None:
    """A cell ending in ';' (after a comment, over several lines; not inside a string) shows no
    Out[n], live or restored: a figure once, no Text(...) for set_xlabel; the outputs equal
    the same cells run plainly, and a cell that is not quiet keeps its Out[n]."""
    plain = start()
    expected = [shown(r) for r in plain.run_all([c.split("\n", 1)[1] for c in QUIET])]
    kinds = [[o["type"] for o in outputs] for outputs in expected]
    figure, value = ["display_data"], ["execute_result"]
    assert kinds == [[], [], value, figure, figure, figure, value]
    first = start()
    live = [shown(r) for r in run_all(first, QUIET)]
    assert live == expected
    first.kill()
    second = start()
    again = run_all(second, QUIET)
    assert restored(again) == [True] * len(QUIET)
    assert [shown(r) for r in again] == expected
    assert probe(second, "[_, Out.get(max(Out, default=0))]") == [82, 82]  # the quiet values are no Out[n]


def joined(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Outputs as JupyterLab's output model keeps them: consecutive pieces of one stream joined."""
    found: list[dict[str, Any]] = []
    for output in outputs:
        last = found[-1] if found else None
        if last and output["type"] == "stream" and last["type"] == "stream" and last["name"] == output["name"]:
            found[-1] = {**last, "text": last["text"] + output["text"]}
        else:
            found.append(output)
    return found


STREAMS = [
    "%%durable print_warn_print\nimport warnings\nprint('first')\n"
    "warnings.warn_explicit('careful', UserWarning, 'check.py', 7)\nprint('second')",
    "%%durable flushed\nimport sys\nsys.stdout.write('one\\n')\nsys.stdout.flush()\n"
    "written = sys.stdout.write('two\\n')",
    "%%durable interleaved\nfrom IPython.display import HTML, display\nprint('before')\ndisplay(HTML('<b>shown</b>'))\n"
    "print('to stderr', file=sys.stderr)\ndisplay(42)\nprint('after')",
    "%%durable lots\nfor i in range(20_000):\n    print('line', i)",
    "%%durable progress\nfor i in range(0, 101, 5):\n    sys.stderr.write(f'\\r{i:3d}%|' + '#' * (i // 5))\n"
    "    sys.stderr.flush()\nsys.stderr.write('\\n')\nsys.stderr.flush()\nwritten = sys.stdout.write('done\\n')",
    "%%durable silent\nquiet = 1",
    "%%durable threaded\nimport threading\nthread = threading.Thread(target=print, args=('from a thread',))\n"
    "thread.start()\nthread.join()",
]


def test_streams_restore_as_the_kernel_sent_them(start: Callable[[], Kernel]) -> None:
    """Restored streams are the messages the live cell sent: print, warn, print is all stdout
    then stderr, as ipykernel sent it (not three outputs); flushed pieces and progress lines keep
    their pieces, displays keep their place among the prints, and a lot of output comes back whole."""
    first = start()
    live = [shown(r) for r in run_all(first, STREAMS)]
    assert [(o["name"], o["text"]) for o in joined(live[0])] == [
        ("stdout", "first\nsecond\n"),
        ("stderr", "check.py:7: UserWarning: careful\n"),
    ]
    assert [o["text"] for o in live[1]] == ["one\n", "two\n"]
    assert [o["type"] for o in joined(live[2])] == ["stream", "display_data", "stream", "display_data", "stream"]
    assert "".join(o["text"] for o in live[3]).count("\n") == 20_000
    assert [o["name"] for o in live[4]] == ["stderr"] * 22 + ["stdout"]
    assert live[5] == []  # a cell that wrote nothing: no trip to the IO thread, nothing recorded
    assert [o["text"] for o in live[6]] == ["from a thread\n"]  # written on another thread of the cell
    first.kill()
    second = start()
    again = run_all(second, STREAMS)
    assert restored(again) == [True] * len(STREAMS)
    assert [shown(r) for r in again] == live


EPOCH = [
    "%%durable imports\nimport datetime\nimport matplotlib.pyplot as plt\nimport numpy as np\n"
    "import matplotlib.dates as mdates",
    "%%durable old_epoch\nold_epoch = '0000-12-31T00:00:00'\nnew_epoch = '1970-01-01T00:00:00'\n"
    "mdates.set_epoch(old_epoch)\n"
    "date1 = datetime.datetime(2000, 1, 1, 0, 10, 0, 12, tzinfo=datetime.timezone.utc)\n"
    "mdate1 = mdates.date2num(date1)\nprint('Before Roundtrip: ', date1, 'Matplotlib date:', mdate1)",
    "%%durable near_epoch\ndate1 = datetime.datetime(10, 1, 1, 0, 10, 0, 12, tzinfo=datetime.timezone.utc)\n"
    "mdate1 = mdates.date2num(date1)\nprint('Before Roundtrip: ', date1, 'Matplotlib date:', mdate1)\n"
    "print('After Roundtrip:  ', mdates.num2date(mdate1))",
    "%%durable too_late\ntry:\n    mdates.set_epoch(new_epoch)\nexcept RuntimeError as e:\n"
    "    print('RuntimeError:', str(e))",
    "%%durable plot\nfig, ax = plt.subplots()\n"
    "ax.plot(np.arange('2000-01-01', '2000-01-03', dtype='datetime64[D]'), [1, 2])\n"
    "print('limits', [round(x, 3) for x in ax.get_xlim()], 'epoch', mdates.get_epoch())",
]


def stream_text(result: CellResult) -> str:
    return "".join(o["text"] for o in result.outputs if o["type"] == "stream")


def test_a_date_epoch_set_in_a_cell_holds_after_a_kill(start: Callable[[], Kernel]) -> None:
    """Library state outside rcParams: matplotlib's date epoch, set in a cell (as the gallery's
    "Date precision and epochs" does), is set again when the cell is restored after a SIGKILL,
    so the cells that execute next print the plain run's dates, and its too-late set_epoch
    fails as it did there."""
    plain = start()
    expected = [stream_text(r) for r in plain.run_all([c.split("\n", 1)[1] for c in EPOCH])]
    assert "RuntimeError: set_epoch must be called before dates plotted." in expected[3]
    first = start()
    run_all(first, EPOCH[:2])
    first.kill()
    second = start()
    results = run_all(second, EPOCH)
    assert restored(results) == [True, True, False, False, False]
    assert [stream_text(r) for r in results] == expected
    assert "could not" not in "".join(r.text for r in results) and "cannot restore" not in results[1].text


REGISTRIES = [
    "%%durable imports\nimport datetime, fractions\nimport matplotlib\nimport matplotlib.dates as mdates\n"
    "import matplotlib.units as munits\nimport pandas as pd\nfrom matplotlib.colors import ListedColormap",
    "%%durable register\nmatplotlib.colormaps.register(ListedColormap(['red', 'blue'], name='dnb-red-blue'))\n"
    "pd.plotting.register_matplotlib_converters()\nmunits.registry[fractions.Fraction] = mdates.DateConverter()",
    "%%durable replace\nmatplotlib.colormaps.register(ListedColormap(['green', 'white'], name='dnb-red-blue'), "
    "force=True)\nmatplotlib.rcParams['lines.linewidth'] = 3.25",
]
REGISTRY_CHECKS = (
    "{'colors': matplotlib.colormaps['dnb-red-blue'].colors if 'dnb-red-blue' in matplotlib.colormaps else None,"
    " 'width': matplotlib.rcParams['lines.linewidth'],"
    " 'converters': {k.__name__: type(munits.registry[k]).__module__ for k in"
    " (pd.Timestamp, datetime.datetime, fractions.Fraction) if k in munits.registry}}"
)


def test_registered_colormaps_and_unit_converters_come_back(start: Callable[[], Kernel]) -> None:
    """Library state outside rcParams: a colormap registered with matplotlib.colormaps.register (and
    replaced by another of its name), pandas' converters registered with register_matplotlib_converters
    and a converter put in matplotlib.units.registry are registered again when their cell is restored
    after a SIGKILL; so is an rcParam set beside them."""
    first = start()
    run_all(first, REGISTRIES)
    expected = probe(first, REGISTRY_CHECKS)
    assert expected["colors"] == ["green", "white"] and expected["converters"]["Timestamp"].startswith("pandas")
    assert expected["width"] == 3.25
    first.kill()
    second = start()
    results = run_all(second, REGISTRIES)
    assert restored(results) == [True, True, True] and "cannot restore" not in results[1].text
    assert probe(second, REGISTRY_CHECKS) == expected


def test_a_variable_a_cell_removed_from_the_environment_stays_removed(start: Callable[[], Kernel]) -> None:
    """Settings: a key a cell removed (an environment variable) is removed again when the cell is
    restored, after the cell that set it is restored."""
    cells = [
        "%%durable set_env\nimport os\nos.environ['DNB_TEST_REMOVED'] = 'here'",
        "%%durable drop_env\ndel os.environ['DNB_TEST_REMOVED']",
    ]
    first = start()
    run_all(first, cells)
    assert probe(first, "os.environ.get('DNB_TEST_REMOVED')") is None
    first.kill()
    second = start()
    results = run_all(second, cells)
    assert restored(results) == [True, True] and "os.environ" not in results[1].text
    assert probe(second, "os.environ.get('DNB_TEST_REMOVED')") is None


def test_a_seeding_cell_warns_only_about_the_call_durable_nb_does_not_read(
    start: Callable[[], Kernel], tmp_path: Path
) -> None:
    """A set-up call is judged on its own: in the usual seeding cell, numpy's seed is recorded and
    made again, while the seed of a library durable_nb does not read is named in a warning (it
    used to be skipped because numpy's state changed in the same cell); so is a call into
    matplotlib whose effect durable_nb does not read, though it reads matplotlib's rcParams."""
    (tmp_path / "fakelib.py").write_text("STATE = {'seed': None}\ndef set_seed(n):\n    STATE['seed'] = n\n")
    cells = [
        "%%durable seeds\nimport numpy as np, fakelib, matplotlib\nnp.random.seed(0); fakelib.set_seed(0)\n"
        "matplotlib.color_sequences.register('dnb-pair', ['red', 'blue'])",
    ]
    first = start()
    committed = run_all(first, cells)
    assert "cannot restore" not in committed[0].text  # said when a restore would be wrong, not before
    expected = probe(first, "float(np.random.rand())")
    first.kill()
    second = start()
    [result] = run_all(second, cells)
    warning = next(line for line in result.text.splitlines() if "cannot restore" in line)
    assert "fakelib.set_seed(0)" in warning and "matplotlib.color_sequences.register(" in warning
    assert "np.random.seed" not in warning and "--replay" in warning
    assert probe(second, "float(np.random.rand())") == expected


DEFINITIONS = [
    "%%durable defs\nimport threading\nimport matplotlib\nstyle = {'lines.linewidth': 3.5}\n\n"
    "@matplotlib.rc_context(style)\ndef width(scale=2):\n    return matplotlib.rcParams['lines.linewidth'] * scale\n\n"
    "class Counter:\n    lock = threading.Lock()\n\n    def __init__(self, start):\n        self.value = start\n\n"
    "    def bump(self):\n        with self.lock:\n            self.value += 1\n        return self.value",
    "%%durable narrow\n@matplotlib.rc_context({'lines.linewidth': 0.5})\ndef thin():\n"
    "    return matplotlib.rcParams['lines.linewidth']",
    "%%durable redefine\n@matplotlib.rc_context({'lines.linewidth': 1.25})\ndef width(scale=4):\n"
    "    return matplotlib.rcParams['lines.linewidth'] * scale",
    "%%durable nested\nif style:\n    @matplotlib.rc_context(style)\n    def hidden():\n        return 1",
]
USE_DEFINITIONS = "print('RESULT', width(), width(1), thin(), Counter(41).bump(), isinstance(Counter(0), Counter))"


def test_functions_and_classes_that_cannot_be_pickled_come_back(start: Callable[[], Kernel]) -> None:
    """A function under @matplotlib.rc_context (its decorator holds a generator) and a class with a
    lock and methods cannot be pickled: after a SIGKILL, Run All makes them again by running their
    definitions, the later definition of a function redefined in a later cell wins, and a cell
    that executes next calls them with the first kernel's results. A function whose definition
    sits in a block is named with the real cause and what to do."""
    first = start()
    committed = run_all(first, DEFINITIONS)
    assert "restore makes them again" in committed[0].text
    expected = first.run(USE_DEFINITIONS).text
    assert "RESULT 5.0 1.25 0.5 42 True" in expected
    first.kill()
    second = start()
    results = run_all(second, DEFINITIONS)
    assert restored(results) == [True, True, True, True]
    assert "made width, Counter again by running their definitions" in results[0].text
    assert "not restored" not in "".join(r.text for r in results[:3])
    assert "not as cell" not in "".join(r.text for r in results)  # made again as the first kernel had them
    assert second.run(USE_DEFINITIONS).text == expected
    warning = next(line for line in results[3].text.splitlines() if "not restored" in line)
    assert "hidden (builtins.function: cannot pickle 'generator' object)" in warning
    assert "--replay" in warning and "top level" in warning
