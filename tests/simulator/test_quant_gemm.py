"""Quantised GEMM kinds (simulator/catalog/quant_gemm.py): which kind a dtype runs as per GPU, the laws of the rule in
the pass formula, the catalog's contract, and (data present) the A100 weight-only bursts the kinds were fitted on."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog.quant_gemm import gemm_kind, gemm_kind_name, quant_catalog, read_quant_catalog
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.errors import InputError
from tests.conftest import examples

MODELS = ["qwen3-8b", "qwen3-32b", "llama-3.1-8b", "qwq-32b", "llama-3.1-70b"]
GPUS = ["a100-80gb", "h100-sxm", "h200", "l40s", "b200"]


def dep(model, dtype, gpu, tp=1):
    hw = get_hardware(gpu)
    return Deployment(get_model(model).with_dtypes(dtype), hw, tp, prior_profile(hw).params(hw))


def test_kind_by_gpu():
    a100, h100, b200 = (get_hardware(g) for g in ("a100-80gb", "h100-sxm", "b200"))
    assert gemm_kind_name("fp8", a100) == "w8a16-fp8" and gemm_kind_name("fp8", h100) == "w8a8-fp8"
    assert gemm_kind_name("fp8_block", h100) == "w8a8-fp8-block" and gemm_kind_name("int4", h100) == "w4a16"
    assert gemm_kind_name("nvfp4", b200) == "w4a4-fp4" and gemm_kind_name("nvfp4", h100) == "w4a16"
    name, k = gemm_kind("bf16", h100)
    assert name == "bf16" and k.compute_ratio.value == 1 and k.mem_ratio.value == 1 and k.gemm_overhead_s.value == 0


def test_fitted_kinds_are_physical():
    cat = quant_catalog()
    assert {"w8a8-fp8", "w8a16-fp8", "w4a16"} <= set(cat.kinds)
    for kinds in [cat.kinds, *cat.gpu_kinds.values()]:
        for name, k in kinds.items():
            assert 0 < k.compute_ratio.value <= 1.5 and k.compute_ratio.source and k.compute_ratio.kind != "datasheet"
    for name in ("w8a16-fp8", "w4a16"):  # dequantising in the main loop can only cost compute
        assert cat.kinds[name].compute_ratio.value <= 1.0


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(GPUS), st.sampled_from([1, 2, 4]), st.integers(0, 20000))
def test_weight_only_batch1_at_least_as_fast_as_bf16(model, gpu, tp, ctx):
    assert dep(model, "int4", gpu, tp).decode_time(ctx) <= dep(model, "bf16", gpu, tp).decode_time(ctx) * (1 + 1e-12)


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(["a100-80gb", "h100-sxm", "l40s"]), st.sampled_from(["int4", "fp8"]),
       st.integers(8192, 65536))
def test_weight_only_above_the_ridge_not_faster_than_bf16(model, gpu, dtype, tokens):
    d = dep(model, dtype, gpu)
    if d.gemm[0] not in ("w4a16", "w8a16-fp8"):
        return  # W8A8 on FP8 cores (H100, L40S): its own peak
    assert d.prefill_time(tokens) >= dep(model, "bf16", gpu).prefill_time(tokens)


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(MODELS), st.sampled_from(GPUS), st.sampled_from(["bf16", "fp8", "fp8_block", "int4", "nvfp4"]))
def test_time_monotone_in_tokens(model, gpu, dtype):
    n = np.array([1, 2, 4, 16, 64, 256, 1024, 4096, 16384], dtype=float)
    t = dep(model, dtype, gpu).forward_time(n, 512.0)
    assert np.all(np.diff(t) >= 0)


def test_bad_catalog_names_file_and_field(tmp_path):
    f = tmp_path / "quant_gemm.yaml"
    f.write_text("kinds:\n  w4a16:\n    peak: bf16\n    compute_ratio: {value: 0, kind: calibrated, source: x}\n"
                 "    mem_ratio: {value: 1, kind: prior, source: x}\n    gemm_overhead_s: {value: 0, kind: prior, source: x}\n")
    with pytest.raises(InputError, match="quant_gemm.yaml"):
        read_quant_catalog(f)
    f.write_text("kinds:\n  w4a17: {}\n")
    with pytest.raises(InputError, match="w4a17"):
        read_quant_catalog(f)


def test_a100_weight_only_bursts_with_catalog_kinds():
    """The fitted kinds predict GPUStack's A100 FP8 / AWQ bursts (vLLM 0.11), replayed as the released validation
    replays them, within 5% where bf16 GEMMs reading fewer bytes were 25-40% too fast."""
    from calibrate.gpu_priors import quant_fit as qf

    if not qf.GPUSTACK.is_file():
        pytest.skip("GPUStack serving data absent")
    b = qf.load_bursts()
    runs = qf.burst_runs(b)
    q = b[b.weight_dtype != "bf16"]
    assert len(q) >= 2 and set(q.weight_dtype) == {"fp8", "int4"}
    for r in q.itertuples():
        t = qf.burst_duration(runs[r.row])
        assert abs(t / r.duration_s - 1) < 0.05, (r.model, r.weight_dtype, t, r.duration_s)
        bf16 = qf.burst_duration(runs[r.row], kind=qf.gemm_kind("bf16", qf.get_hardware("a100-80gb"))[1])
        assert bf16 < 0.9 * t  # the kind's rc < 1 is what slows it
