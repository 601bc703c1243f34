"""The real-notebook probe's fingerprints: equal values read alike, changed ones read apart."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from benchmarks.realnb_probe import _Hasher

sm = pytest.importorskip("statsmodels.api")


def _fitted_ols(scale: float = 1.0) -> object:
    rng = np.random.default_rng(0)
    exog = sm.add_constant(rng.normal(size=(40, 2)))
    endog = exog @ [1.0, 2.0, 3.0] * scale + rng.normal(size=40)
    return sm.OLS(endog, exog).fit()


def test_a_statsmodels_result_and_its_pickled_copy_read_alike() -> None:
    result = _fitted_ols()
    copy = pickle.loads(pickle.dumps(result))
    # Plain pickle gives the copy other bytes (its memo differs); that is not a difference.
    assert _Hasher().describe(result)["hash"] == _Hasher().describe(copy)["hash"]


def test_a_result_fitted_on_other_data_reads_apart() -> None:
    assert _Hasher().describe(_fitted_ols())["hash"] != _Hasher().describe(_fitted_ols(scale=2.0))["hash"]


def _frames(shared: bool) -> SimpleNamespace:
    """A namespace of two equal frames, as statsmodels' state space results keep: their labels the
    same string objects, or equal copies (as a restore that unpickles them apart gives)."""
    labels = ["state.0", "state.1"]
    other = labels if shared else ["".join(label) for label in labels]  # equal, not the same objects
    index = pd.MultiIndex.from_product([other, pd.date_range("2000", periods=3, freq="YE")])
    return SimpleNamespace(
        filtered=pd.DataFrame(np.ones((6, 2)), index=index, columns=labels),
        predicted=pd.DataFrame(np.zeros((6, 2)), index=index, columns=labels),
    )


def test_a_namespace_of_frames_reads_alike_whichever_equal_strings_its_frames_share() -> None:
    shared, apart = _frames(shared=True), _frames(shared=False)
    # Plain pickle tells them apart: a string met twice is written once.
    assert pickle.dumps(shared) != pickle.dumps(apart)
    assert _Hasher().describe(shared)["hash"] == _Hasher().describe(apart)["hash"]


def test_a_namespace_whose_frame_changed_reads_apart() -> None:
    changed = _frames(shared=True)
    changed.predicted.iloc[0, 0] = 5.0
    assert _Hasher().describe(_frames(shared=True))["hash"] != _Hasher().describe(changed)["hash"]


def test_a_library_singleton_reads_as_its_name_and_a_copy_of_it_apart() -> None:
    """A prediction's ``dist`` is ``scipy.stats.t``: read by name, not by its state, which holds numpy's
    global random state (a library setting, whose seed sequence a restore does not bring back)."""
    stats = pytest.importorskip("scipy.stats")
    before = _Hasher().describe(stats.t)["hash"]
    np.random.standard_normal(3)  # moves the global state scipy.stats.t holds
    assert _Hasher().describe(stats.t)["hash"] == before
    assert _Hasher().describe(pickle.loads(pickle.dumps(stats.t)))["hash"] != before


class _Notebooks:
    """Stands for a class a notebook defines (its module is ``__main__``)."""

    def __init__(self, first: str, second: str) -> None:
        self.first = first
        self.second = second


_Notebooks.__module__ = "__main__"


def test_an_object_of_a_notebook_class_reads_by_its_attributes() -> None:
    label = "".join(["coef", "_"])
    shared, apart = _Notebooks(label, label), _Notebooks(label, "".join(["coef", "_"]))
    assert shared.second is not apart.second
    assert _Hasher().describe(shared)["hash"] == _Hasher().describe(apart)["hash"]
    assert _Hasher().describe(shared)["hash"] != _Hasher().describe(_Notebooks(label, "other"))["hash"]


def test_a_colormap_reads_by_its_colours_whether_or_not_it_was_used() -> None:
    colors = pytest.importorskip("matplotlib.colors")
    used = colors.ListedColormap(["red", "green", "blue"])
    used(0.5)  # fills its lookup table
    fresh = pickle.loads(pickle.dumps(colors.ListedColormap(["red", "green", "blue"])))
    assert _Hasher().describe(used)["hash"] == _Hasher().describe(fresh)["hash"]
    assert _Hasher().describe(used)["hash"] != _Hasher().describe(colors.ListedColormap(["red", "blue"]))["hash"]


def test_a_scipy_interpolator_reads_alike_whichever_equal_dtypes_its_arrays_share() -> None:
    """scikit-learn rebuilds an isotonic fit's interpolator on unpickling: the same arrays, with
    dtypes equal to but other objects than the ones they had, which a plain pickle writes apart."""
    from scipy.interpolate import interp1d

    x, y = np.arange(5.0), np.arange(5.0) ** 2
    other = np.dtype("float64").newbyteorder("=")
    assert other == x.dtype and other is not x.dtype
    first, second = interp1d(x, y), interp1d(x.astype(other), y.astype(other))
    assert pickle.dumps(first) != pickle.dumps(second)
    assert _Hasher().digest(first) == _Hasher().digest(second)
    assert _Hasher().digest(first) != _Hasher().digest(interp1d(x, y * 2))


def test_a_frozen_distribution_reads_alike_whatever_numpy_global_random_state() -> None:
    stats = pytest.importorskip("scipy.stats")
    frozen = stats.gamma(2)
    before = _Hasher().digest(frozen)
    np.random.random()  # the global state its vectorized methods' instance holds as a library global
    assert _Hasher().digest(frozen) == before


def test_a_seaborn_grid_and_its_pickled_copy_read_alike() -> None:
    pytest.importorskip("matplotlib").use("agg")
    sns = pytest.importorskip("seaborn")
    rng = np.random.default_rng(0)
    grid = sns.jointplot(x=rng.normal(size=50), y=rng.normal(size=50), kind="scatter")
    assert _Hasher().digest(pickle.loads(pickle.dumps(grid))) == _Hasher().digest(grid)


def test_a_kd_tree_and_its_pickled_copy_read_alike() -> None:
    neighbors = pytest.importorskip("sklearn.neighbors")
    tree = neighbors.KernelDensity().fit(np.random.default_rng(0).normal(size=(20, 1))).tree_
    assert _Hasher().digest(pickle.loads(pickle.dumps(tree))) == _Hasher().digest(tree)


def test_a_kd_tree_on_other_data_reads_apart() -> None:
    neighbors = pytest.importorskip("sklearn.neighbors")
    rng = np.random.default_rng(0)
    first = neighbors.KernelDensity().fit(rng.normal(size=(20, 1))).tree_
    second = neighbors.KernelDensity().fit(rng.normal(size=(20, 1))).tree_
    assert _Hasher().digest(first) != _Hasher().digest(second)
