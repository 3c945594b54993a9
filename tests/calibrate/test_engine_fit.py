"""The engine-level step model's fit (calibrate.gpu_priors.engine_fit): recovery of known parameters from
synthetic layer passes, whole runs and speculative iterations made by its own predictors; properties of the fit
on the shared engine measurements (skipped where ../shared/data is absent)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate.gpu_priors import engine_data as ed, engine_fit as ef

SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "data"
TRUTH = {"roofline_p": 3.5, "multi_token_penalty": 0.06, "kv_mem_efficiency": 0.7,
         "h100-sxm.compute_efficiency": 0.62, "a100-40gb.compute_efficiency": 0.55,
         "lss-h100-sxm.step_overhead_s": 110e-6, "lss-h100-sxm.eager_mem_efficiency": 0.95,
         "lib.step_overhead_s": 2.5e-3, "lib.seq_overhead_s": 50e-6, "lib-h100-sxm.layer_overhead_s": 40e-6,
         "lib-a100-40gb.layer_overhead_s": 60e-6, "v1.step_overhead_s": 0.6e-3, "v1.layer_overhead_s": 20e-6,
         "v1-eagle1.draft_step_overhead_s": 0.3e-3}


def _synthetic(rng) -> dict[str, ed.Obs]:
    lss = pd.DataFrame([{"gpu": "h100-sxm", "model": m, "tp": tp, "tokens": n}
                        for m, tps in (("llama-3.1-8b", (1, 2)), ("llama-3.1-70b", (2, 4)))
                        for tp in tps for n in ed.LSS_TOKENS])
    lib = pd.DataFrame([{"gpu": g, "model": m, "tp": tp, "batch": b, "input_tokens": L, "output_tokens": L}
                        for g in ("h100-sxm", "a100-40gb") for m, tp in (("llama-2-7b", 1), ("mistral-7b", 2), ("llama-2-70b", 4))
                        for b in (1, 16, 64) for L in (128, 512, 1024) if not (g == "a100-40gb" and m == "llama-2-70b")])
    v1 = pd.DataFrame([{"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 1, "kind": "decode", "k": 0}]
                      + [{"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 1, "kind": "eagle1", "k": k} for k in range(2, 8)])
    obs = {"lss": ed.Obs("lss", lss, ed.predict_lss), "lib": ed.Obs("lib", lib, ed.predict_lib),
           "v1": ed.Obs("v1", v1, ed.predict_v1)}
    vals = {**ef.stream_frozen(obs), **TRUTH}
    for o in obs.values():
        o.frame["time_s"] = o.predict(o.frame, vals) * np.exp(rng.normal(0, 0.005, len(o.frame)))
    return obs


@pytest.mark.skipif(not (SHARED / "aiconfigurator-vllm-kernels").is_dir(), reason="kernel tables absent (eta_mem is frozen at them)")
def test_engine_fit_recovers_known_parameters():
    obs = _synthetic(np.random.default_rng(0))
    fr = ef.fit(obs)
    for n in ("roofline_p", "kv_mem_efficiency", "h100-sxm.compute_efficiency", "lib.step_overhead_s",
              "lib.seq_overhead_s", "v1-eagle1.draft_step_overhead_s"):
        assert fr.values[n] == pytest.approx(TRUTH[n], rel=0.15), n
    assert fr.values["multi_token_penalty"] == pytest.approx(TRUTH["multi_token_penalty"], abs=0.02)
    for s, o in obs.items():  # the whole steps come back within the noise
        assert np.median(ef.ape(ef.predict(o, fr.values), o.frame["time_s"])) < 0.02, s


@pytest.mark.skipif(not (SHARED / "engine-measurements").is_dir(), reason="../shared/data/engine-measurements absent")
def test_engine_fit_on_shared_measurements_is_physical_and_holds_out():
    obs = ed.load_all()
    assert {"lss", "lib", "v1"} <= set(obs)
    fr = ef.fit(obs)
    for n, v in fr.values.items():
        if n.endswith((".mem_efficiency", ".compute_efficiency")) or n == "kv_mem_efficiency":
            assert 0 < v <= 1.0, n
    assert 1.0 < fr.values["roofline_p"] < 64
    # held out: the batch-1 iterations at k >= 5 from a fit on k <= 4 (the slope in k is a draft pass + the verification)
    o = obs["v1"]
    small = o.frame["k"] <= 4
    fr2 = ef.fit({**obs, "v1": ed.Obs("v1", o.frame[small].reset_index(drop=True), o.predict)})
    big = o.frame[~small].reset_index(drop=True)
    assert np.median(ef.ape(o.predict(big, fr2.values), big["time_s"])) < 0.10


@pytest.mark.skipif(not (SHARED / "aiconfigurator-vllm-kernels").is_dir(), reason="kernel tables absent")
def test_a_gpu_without_engine_evidence_takes_its_own_gemm_fraction_times_the_engine_to_kernel_ratio():
    """The compute fraction transfer: a kernel-profiled GPU with no engine measurement above the ridge takes
    its own compute-bound GEMMs' fraction of F times the median engine/kernel ratio of the engine-fitted GPUs; the
    catalog holds what the rule gives (regenerated with fit-engine, not edited by hand)."""
    from simulator.catalog import hardware_catalog
    from simulator.cost.cost_profile import prior_profile

    gemm = ef.kernel_compute_efficiency()
    assert gemm, "no GEMM table read"
    for g, k in gemm.items():
        assert 0 < k["compute_efficiency"] <= 1.0 and k["rows"] > 0, g
    # synthetic: ratios over the GPUs with both; a GPU whose chip has no table gets none
    ratios = ef.engine_to_kernel_ratios({"h100-sxm": 0.6, "rtx-a6000": 0.5}, {"h100-sxm": {"compute_efficiency": 0.8}})
    assert ratios == {"h100-sxm": pytest.approx(0.75)}
    assert ef.kernel_chip("h200", {"h100-sxm": {}}) == "h100-sxm" and ef.kernel_chip("rtx-a6000", {"h100-sxm": {}}) is None
    for name, hw in hardware_catalog().items():
        p = prior_profile(hw).compute_efficiency
        if "own GEMM kernels" not in p.source:
            continue
        assert p.kind == "transferred" and 0 < p.value <= 1.0
        mine = gemm[ef.kernel_chip(name, gemm)]["compute_efficiency"]
        assert p.value == pytest.approx(mine * float(p.source.split("x ")[-1].split(",")[0]), rel=2e-3)
