"""A restored value holds the library objects the user's value held, and unpickles as a cell would.

A library's module-level singleton (``scipy.stats.t``, which a statsmodels prediction keeps as its
``dist``) comes back as the library's object, not a copy; an object the notebook owns stays pickled
by value. A library that reads its caller's frame while unpickling (statsmodels evaluating a
model's formula again) finds the notebook's namespace.
"""

from __future__ import annotations

import decimal
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
from shellkit import Shell

from durable_nb.engine import module_singletons
from durable_nb.engine.pickling import in_reach, pickle_values, restoring_into, unpickle

sm = pytest.importorskip("statsmodels.api")

pytestmark = pytest.mark.backends("sqlite")

FIT = (
    "%%durable fit\nimport numpy as np, scipy.stats, statsmodels.api as sm\n"
    "x = np.linspace(0, 10, 50)\nres = sm.OLS(2 * x + np.sin(x), sm.add_constant(x)).fit()"
)
PREDICT = "%%durable predict\npred = res.get_prediction()\nwide = res.get_prediction(sm.add_constant(x) * 2)"


def restored_shell(store_url: str, name: str, cells: list[str]) -> Shell:
    """Run ``cells`` in one shell, then again in a new one (every cell restored); return the new one."""
    first = Shell(store_url, name)
    first.run_all(*cells)
    first.close()
    second = Shell(store_url, name)
    for cell in cells:
        assert "restored" in _notes(second, cell), cell
    return second


def _notes(shell: Shell, cell: str) -> str:
    from IPython.utils.capture import capture_output

    with capture_output() as captured:
        shell.ok(cell)
    return captured.stdout + "".join(str(o.data) for o in captured.outputs)


def test_a_prediction_restores_holding_scipys_own_distribution(store_url: str) -> None:
    shell = restored_shell(store_url, "dist", [FIT, PREDICT])
    pred = shell.ns["pred"]
    assert pred.dist is scipy.stats.t and shell.ns["wide"].dist is scipy.stats.t
    # So it draws from numpy's global generator, as the distribution the user had did.
    np.random.seed(3)
    drawn = pred.dist.rvs(5, size=3)
    np.random.seed(3)
    assert (drawn == scipy.stats.t.rvs(5, size=3)).all()
    shell.close()


def test_two_values_holding_a_library_singleton_are_not_tied_by_it() -> None:
    x = np.linspace(0, 10, 50)
    pred = sm.OLS(2 * x, sm.add_constant(x)).fit().get_prediction()
    pickled = pickle_values([pred], {})
    assert not in_reach(pickled.reach, id(scipy.stats.t))
    assert not in_reach(pickled.reach, id(np.random.mtrand._rand))
    with restoring_into({}):
        assert unpickle(pickled.stream, [b.raw() for b in pickled.buffers]).dist is scipy.stats.t


def _module_beside(folder: Path, name: str, text: str) -> Iterator[object]:
    """Write module ``name`` next to the notebook (not a library), import it, and forget it after."""
    (folder / f"{name}.py").write_text(text)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(name, None)


@pytest.fixture
def own_module(tmp_path: Path) -> Iterator[object]:
    """A module next to the notebook that holds an object of its own class."""
    yield from _module_beside(
        tmp_path,
        "nb_helpers",
        "class Settings:\n    def __init__(self):\n        self.rate = 1\n\nsettings = Settings()\n",
    )


def test_an_object_of_a_module_beside_the_notebook_is_pickled_by_value(own_module: object) -> None:
    settings = own_module.settings  # type: ignore[attr-defined]
    settings.rate = 5  # the notebook's change: a restart of the module would not bring it back
    pickled = pickle_values([settings], {})
    copy = unpickle(pickled.stream, [b.raw() for b in pickled.buffers])
    assert copy is not settings and copy.rate == 5


def test_an_object_put_in_a_library_module_after_its_import_is_pickled_by_value() -> None:
    module_singletons.refresh()
    mine = decimal.Context(prec=7)
    decimal.durable_nb_test_context = mine  # type: ignore[attr-defined]
    try:
        pickled = pickle_values([mine], {})
        copy = unpickle(pickled.stream, [b.raw() for b in pickled.buffers])
        assert copy is not mine and copy.prec == 7
    finally:
        del decimal.durable_nb_test_context  # type: ignore[attr-defined]


def test_a_formula_model_restores_finding_the_notebooks_names(store_url: str) -> None:
    """statsmodels evaluates a model's formula again when it is unpickled, with patsy looking names up
    in the frame that unpickles it: the notebook's ``np``, and no ``__future__`` flags of durable_nb's."""
    cells = [
        "%%durable data\nimport numpy as np, statsmodels.api as sm, statsmodels.formula.api as smf\n"
        "data = sm.datasets.engel.load_pandas().data\nscale = 2.0",
        "%%durable model\nmod = smf.quantreg('foodexp ~ np.log(income) + I(income * scale)', data)\n"
        "res = mod.fit(q=0.5)\nplain = smf.quantreg('foodexp ~ income', data)",
    ]
    shell = restored_shell(store_url, "formula", cells)
    for name in ("mod", "plain"):
        factors = shell.ns[name].data.model_spec.factor_infos.values()
        assert {info.state["eval_env"].flags for info in factors} == {0}, name
    assert shell.ns["res"].predict(shell.ns["data"].head(3)).shape == (3,)
    shell.close()


def test_a_formula_model_restores_with_a_function_and_number_of_its_own_cell(store_url: str) -> None:
    """The formula names a function and a number the same cell made, not in the namespace yet while
    the cell's values are unpickled; the function's body needs a module the cell imported too."""
    cells = [
        "%%durable fit\nimport numpy as np, pandas as pd, statsmodels.formula.api as smf\n"
        "def shift(v):\n    return np.log(v + power)\n\npower = 1.5\n"
        "df = pd.DataFrame({'y': np.arange(20.0), 'x': np.arange(20.0) ** 1.5})\n"
        "res = smf.ols('y ~ shift(x) + I(x ** power)', df).fit()\nparams = res.params.copy()",
    ]
    shell = restored_shell(store_url, "own", cells)
    res = shell.ns["res"]
    assert (res.params == shell.ns["params"]).all()
    assert res.model.data.model_spec.column_names == ["Intercept", "shift(x)", "I(x ** power)"]
    assert shell.ns["res"].predict(shell.ns["df"].head(2)).shape == (2,)
    shell.close()


@pytest.fixture
def fragile_module(tmp_path: Path) -> Iterator[object]:
    """A module next to the notebook whose objects cannot be unpickled."""
    yield from _module_beside(
        tmp_path,
        "nb_fragile",
        "class Fragile:\n    def __setstate__(self, state):\n"
        "        raise RuntimeError('Fragile objects do not come back')\n",
    )


def test_a_value_that_never_unpickles_raises_its_own_error_and_places_nothing(
    store_url: str, fragile_module: object
) -> None:
    cell = "%%durable make\nimport nb_fragile\nmarker = 7\nthing = nb_fragile.Fragile()\nthing.size = 3"
    first = Shell(store_url, "fragile")
    first.run_all(cell)
    first.close()
    second = Shell(store_url, "fragile")
    result = second.shell.run_cell(cell)
    assert isinstance(result.error_in_exec, RuntimeError)
    assert "do not come back" in str(result.error_in_exec)
    # The cell's other values were made visible only while the value was tried again.
    assert "marker" not in second.ns and "thing" not in second.ns
    second.close()


def test_a_librarys_own_dict_subclass_held_as_a_global_restores_as_its_object() -> None:
    """statsmodels' stored results are ``Bunch`` objects (a dict whose ``__dict__`` is itself, which
    a pickle by value brings back as a dict with a separate ``__dict__``)."""
    results = pytest.importorskip("statsmodels.treatment.tests.results.results_teffects")
    module_singletons.refresh()
    held = [("ra", results.results_ra), ("ipw", results.results_ipw)]
    pickled = pickle_values([held], {})
    with restoring_into({}):
        copy = unpickle(pickled.stream, [b.raw() for b in pickled.buffers])
    assert copy[0][1] is results.results_ra and copy[1][1] is results.results_ipw


@pytest.fixture
def fresh_index(monkeypatch: pytest.MonkeyPatch) -> None:
    """The singleton index as in a kernel that has pickled nothing yet."""
    for name, value in (("_indexes", {}), ("_unread", {}), ("_seen", {}), ("_count", -1)):
        monkeypatch.setattr(module_singletons, name, value)


@pytest.mark.usefixtures("fresh_index")
def test_a_cell_of_imports_reads_no_librarys_globals() -> None:
    """Modules, classes and functions are pickled by name: no library's thousands of globals are read for them."""
    pickle_values([np, scipy.stats, scipy.stats.norm.__class__, np.linspace, sm.OLS], {})
    assert module_singletons._indexes == {} and module_singletons._unread == {}


@pytest.mark.usefixtures("fresh_index")
def test_a_value_reads_the_globals_of_its_own_libraries_only() -> None:
    """An array reads numpy's globals when first pickled; a prediction also scipy's (its distribution)."""
    pickle_values([np.arange(3)], {})
    assert "numpy" in module_singletons._indexes and "numpy" not in module_singletons._unread
    assert "scipy" in module_singletons._unread
    x = np.linspace(0, 10, 50)
    pred = sm.OLS(2 * x, sm.add_constant(x)).fit().get_prediction()
    pickled = pickle_values([pred], {})
    assert "scipy" in module_singletons._indexes
    with restoring_into({}):
        assert unpickle(pickled.stream, [b.raw() for b in pickled.buffers]).dist is scipy.stats.t


def test_the_modules_a_cell_imports_are_taken_as_it_is_committed(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cell of imports takes its modules' globals when it is committed (a copy, paid where the import
    is paid), not the first later cell that pickles one of their objects."""
    (tmp_path / "nb_taken.py").write_text("limit = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    shell = Shell(store_url, "taken")
    try:
        shell.ok("%%durable imports\nimport nb_taken")
        assert module_singletons._seen.get("nb_taken") is sys.modules["nb_taken"]
    finally:
        shell.close()
        sys.modules.pop("nb_taken", None)


def test_formula_models_restore_with_the_functions_they_were_fitted_with(store_url: str) -> None:
    """A later cell defines the formula's function again and fits a second model on the same data:
    each model, restored in one group, predicts with the function it was fitted with."""
    cells = [
        "%%durable first\nimport numpy as np, pandas as pd, statsmodels.formula.api as smf\n"
        "def shift(v):\n    return v\n\n"
        "df = pd.DataFrame({'y': np.arange(1, 21.0), 'x': np.arange(1, 21.0) ** 1.5})\n"
        "before = smf.ols('y ~ shift(x)', df).fit()",
        "%%durable again\ndef shift(v):\n    return np.log(v)\n\nafter = smf.ols('y ~ shift(x)', df).fit()",
    ]
    first = Shell(store_url, "shift")
    first.run_all(*cells)
    fitted = {name: first.ns[name].predict(first.ns["df"].head(3)).tolist() for name in ("before", "after")}
    first.close()
    assert fitted["before"] != fitted["after"]
    second = Shell(store_url, "shift")
    for cell in cells:
        assert "restored" in _notes(second, cell), cell
    for name, predicted in fitted.items():
        assert second.ns[name].predict(second.ns["df"].head(3)).tolist() == predicted, name
    second.close()


def test_a_formula_model_stored_as_a_value_loads_with_its_formulas_names() -> None:
    """A node's output or a saver's state is pickled without a notebook namespace: the model loads
    from the names its formula read when fitted, though the function is gone from the process."""
    import pandas as pd
    import statsmodels.formula.api as smf

    from durable_nb.store import codec

    namespace: dict[str, object] = {"__name__": "__main__", "np": np, "pd": pd, "smf": smf}
    exec(
        "def shift(v):\n    return np.log(v)\n\n"
        "df = pd.DataFrame({'y': np.arange(1, 21.0), 'x': np.arange(1, 21.0) ** 1.5})\n"
        "res = smf.ols('y ~ shift(x) + np.sqrt(x)', df).fit()",
        namespace,
    )
    res, df = namespace["res"], namespace["df"]
    blob = codec.encode(res, b"k" * 32, "res")
    del namespace["shift"]
    loaded = codec.decode(blob, b"k" * 32)
    assert loaded.predict(df.head(3)).tolist() == res.predict(df.head(3)).tolist()  # type: ignore[attr-defined]


def test_an_array_over_memory_no_array_owns_is_stored_and_restored(store_url: str) -> None:
    """An array whose memory is a buffer's, not an array's (``np.frombuffer``; scikit-learn's arrays
    made from Cython memoryviews, as a pruning path's ``ccp_alphas``), is stored as an array."""
    cells = [
        "%%durable buffer\nimport numpy as np\nraw = bytearray(np.arange(4.0).tobytes())\n"
        "over = np.frombuffer(raw)\nalphas, same = over[1:], over"
    ]
    shell = restored_shell(store_url, "buffer", cells)
    assert shell.ns["over"].tolist() == [0.0, 1.0, 2.0, 3.0] and shell.ns["alphas"].tolist() == [1.0, 2.0, 3.0]
    assert shell.ns["same"] is shell.ns["over"]
    shell.close()
