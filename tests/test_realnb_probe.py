"""The real-notebook probe's fingerprints: equal values read alike, changed ones read apart."""

from __future__ import annotations

import pickle

import numpy as np
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
