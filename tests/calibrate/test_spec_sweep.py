"""The B200 speculation sweep check (issue 25): laws of the predictions and the held-out shape."""

import numpy as np
import pytest

from calibrate.fit.gpu_profiles import spec_sweep as ss

pytestmark = pytest.mark.skipif(not ss.SWEEP.is_dir(), reason="../shared/data absent")


@pytest.fixture(scope="module")
def out():
    return ss.run()


def test_predictions_grow_with_load_and_speculation_helps_less_under_load(out):
    d = out["data"]
    assert (d["catalog_ms"] > 0).all() and (d["mtp_fitted_ms"] > 0).all()
    for _, g in d.groupby("arm"):
        g = g.sort_values("concurrency")
        it = (g["catalog_ms"] * g["al"]).to_numpy()  # one iteration (ITL x tokens per iteration: AL is measured)
        assert np.all(np.diff(it) > 0)  # more streams, longer iterations
    t = out["catalog"]
    for arm in ("mtp", "dspark"):
        s = t[(t["arm"] == arm) & t["what"].str.startswith("speedup")].set_index("what")["predicted"]
        assert s["speedup at 64"] < s["speedup at 16"]  # towards compute-bound the gain does not grow


def test_the_fitted_b200_eta_comp_is_physical_and_transfers_to_the_held_out_arms(out):
    eta, se = out["eta_comp_mtp"]
    assert 0 < eta <= 1 and np.isfinite(se)
    t = out["mtp_fitted"]
    held = t[t["arm"] != "mtp"]  # baseline and DSpark: not in the fit
    assert held["error"].abs().max() < 0.2
