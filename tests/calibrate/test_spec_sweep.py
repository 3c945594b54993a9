"""The B200 speculation sweep check: laws of the predictions and the held-out shape."""

import numpy as np
import pytest

from calibrate.gpu_priors import spec_sweep as ss
from validate import spec_sweep as vss

pytestmark = pytest.mark.skipif(not ss.SWEEP.is_dir(), reason="../shared/data absent")


@pytest.fixture(scope="module")
def out():
    return vss.run()


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
    held = t[t["arm"] == "dspark"]  # not in the fit (the baseline arm gives the per-sequence slope, MTP eta_comp)
    # within 15% at the median; the worst (the speedup at 64 streams) within 25%
    assert held["error"].abs().median() < 0.15 and held["error"].abs().max() < 0.25


def test_sweep_host_terms_and_the_0_30_entry(tmp_path):
    """vLLM 0.30's t_call is the 1-stream TTFT less the predicted prefill (positive, below the TTFT); the entry written
    keeps the other versions, calls t_call calibrated and the terms the sweep cannot measure transferred."""
    import shutil

    import yaml

    from simulator.catalog.engine_hosts import HOSTS_PATH, ServingEngine, engine_version

    t = ss.sweep_host_terms()
    assert 0 < t["call_overhead_s"] < t["ttft_1_ms"] / 1e3 and 0 < t["prefill_1_ms"] < t["ttft_1_ms"]
    assert t["slope_effective_s"] > 0 and t["slope_itl_rms_log"] < 0.2
    path = tmp_path / "hosts.yaml"
    shutil.copy(HOSTS_PATH, path)
    before = [e["version"] for e in yaml.safe_load(HOSTS_PATH.read_text())["engines"]["vllm"]]
    ss.write_sweep_version(path, "test", "2026-11-28", t)
    raw = yaml.safe_load(path.read_text())
    versions = [e["version"] for e in raw["engines"]["vllm"]]
    assert set(before) | {"0.30"} == set(versions) and versions[-1] == "0.30"
    e = raw["engines"]["vllm"][-1]
    assert e["call_overhead_s"]["kind"] == "calibrated" and e["seq_overhead_s"]["kind"] == "transferred"
    assert e["front_end_serial_s"]["value"] <= e["call_overhead_s"]["value"]
    # the reference's serial front end travels with its first-stage share, the pair it was fitted as
    ref = engine_version(ServingEngine(version=t["reference"]))
    if ref.front_end_first_share is None:
        assert "front_end_first_share" not in e
    else:
        assert e["front_end_first_share"]["value"] == ref.front_end_first_share.value
        assert e["front_end_first_share"]["kind"] == "transferred"


def test_the_mtp_arms_k_is_the_one_its_drafters_published_curve_and_measured_al_give():
    """k is not in the sweep's data: the MTP arm's k is the nearest_k of its measured acceptance length on Qwen3.5's
    own MTP curve (thinking on and off alike)."""
    import yaml

    if not ss.MTP_CURVE.is_file():
        pytest.skip("acceptance-length-vs-k absent")
    curves = next(iter(yaml.safe_load(ss.MTP_CURVE.read_text()).values()))
    al = float(ss.load().query("arm == 'mtp'")["al"].median())
    assert {ss.nearest_k(al, {int(k): float(v) for k, v in c.items()}) for c in curves.values()} == {ss.ARMS["mtp"].k}
    assert ss.nearest_k(1.5, {1: 1.9, 2: 2.7}) == 1 and ss.nearest_k(2.5, {1: 2.4, 2: 2.7}) == 2  # AL <= k + 1
    with pytest.raises(ValueError):
        ss.nearest_k(9.5, {1: 1.9})
