"""calibrate.fit_acceptance: exact on i.i.d. data, per-position on position-dependent data, the study's runs."""

import numpy as np
import pytest

from calibrate.fit_acceptance import evaluate, fit, from_study


def _data(cond, gammas=range(1, 9), n=1000):
    return {g: (np.cumprod(np.resize(cond, g) if len(cond) < g else cond[:g]), n) for g in gammas}


def test_iid_data_is_predicted_exactly_by_both():
    data = {g: (0.6 ** np.arange(1, g + 1), 500) for g in range(1, 9)}
    m = fit(data, [1, 2, 3])
    assert m["alpha"] == pytest.approx(0.6)
    for r in evaluate(data, m, range(4, 9)):
        assert r["per_position_err"] == pytest.approx(0, abs=1e-12) and r["iid_err"] == pytest.approx(0, abs=1e-12)


def test_falling_then_flat_conditionals_favour_the_per_position_model():
    cond = np.array([0.9, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    data = {g: (np.cumprod(cond[:g]), 500) for g in range(1, 9)}
    rows = evaluate(data, fit(data, [1, 2, 3]), range(4, 9))
    assert all(abs(r["per_position_err"]) < 1e-12 < abs(r["iid_err"]) for r in rows)


def test_study_result_loads_and_extrapolates():
    data = from_study("reports/specdecode-study/result.json", "ngram")
    rows = evaluate(data, fit(data, [1, 2, 3]), range(4, 9))
    assert len(rows) == 5 and all(abs(r["per_position_err"]) < 0.1 for r in rows)
