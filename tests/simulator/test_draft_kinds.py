"""Draft kinds (separate model, head, n-gram; chain or tree) and weight/KV dtypes (issue 17): the laws.

- gamma = 0 is plain decoding (cost tables, analytic engine, serving simulator);
- alpha = 1 gives gamma + 1 tokens per iteration (sampler and the batched serving engine);
- a head draft is never slower to draft than a separate model of the same width with more layers;
- FP8 / INT4 never increase bytes (weights streamed, resident, KV) nor a decode pass;
- a tree of width w verifies w*gamma + 1 tokens: the tables and the serving engine agree with the cost model;
- analytic = DES for head, n-gram and tree drafts (Bonferroni-shared 1% as tests/simulator/test_engines_agree.py);
- bad draft configurations are one line naming the file and field, exit 2.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from simulator.engines.analytic import CostVectors, chain_for, predict_point
from simulator.catalog import get_hardware, get_model, model_catalog
from simulator.cost.cost_model import Deployment, Drafting
from simulator.cost.cost_profile import prior_profile
from simulator.cost.cost_tables import CostTables
from simulator.cost.spec_iteration import speculating_target
from simulator.engines.des import simulate, summarize
from simulator.errors import InputError
from simulator.engines.request_model import Call, RequestSampler
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving import PoissonArrivals, simulate_serving
from simulator.engines.serving.engine import Engine
from simulator.inputs.systems import SystemConfig
from tests.conftest import deployments, make_workload, examples
from tests.simulator.test_engines_agree import workloads

ROOT = Path(__file__).resolve().parents[2]
HEAD = Drafting("head")
NGRAM = Drafting("ngram")


def head_deployment(base: Deployment, layers: int = 1, width: int = 1) -> Deployment:
    return Deployment(base.model.draft_head(layers), base.hardware, base.tp, base.cost, Drafting("head", width))


def drafts_for(base: Deployment, small: Deployment, kind: str, width: int = 1) -> Deployment:
    if kind == "head":
        return head_deployment(base, 1, width)
    if kind == "ngram":
        return replace(base, drafting=Drafting("ngram", width))
    return replace(small, drafting=Drafting("model", width))


# ---- gamma = 0 ------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["model", "head", "ngram"])
def test_gamma_zero_tables_are_plain_decoding(workload, kind):
    b, s = deployments("h100-sxm", 1)
    tb = CostTables(b, s, drafts_for(b, s, kind), workload, 0)
    assert np.all(tb.draft_iter == 0.0)
    np.testing.assert_allclose(tb.verify_iter, tb.dec_base, rtol=1e-12)


@pytest.mark.parametrize("system", ["specdecode", "specreason-decode"])
def test_gamma_zero_is_plain_decoding_in_every_engine(workload, system):
    b, s = deployments("h100-sxm", 1)
    d = head_deployment(b)
    plain = SystemConfig(system="vanilla-base") if system == "specdecode" else SystemConfig(system="specreason", threshold=5)
    zero = SystemConfig(system=system, gamma=0, threshold=plain.threshold)
    assert not zero.drafts
    got = predict_point(zero, chain_for(zero, workload, {}), CostVectors(CostTables(b, s, d, workload, 0)))
    want = predict_point(plain, chain_for(plain, workload, {}), CostVectors(CostTables(b, s, d, workload, None)))
    assert got["latency_s"] == pytest.approx(want["latency_s"], rel=1e-12)
    deps = {"base": b, "small": s, "draft": d}
    r0 = simulate_serving(zero, deps, workload, PoissonArrivals(0.5), 30, 3)
    r1 = simulate_serving(plain, deps, workload, PoissonArrivals(0.5), 30, 3)
    np.testing.assert_allclose(r0.requests.latency_s, r1.requests.latency_s, rtol=1e-12)


# ---- alpha = 1 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [1, 3, 6])
def test_alpha_one_gives_gamma_plus_one_tokens_per_iteration(gamma):
    w = make_workload(token_acceptance=[1.0] * 8)
    cfg = SystemConfig(system="specdecode", gamma=gamma)
    for plan in RequestSampler(cfg, w).plans(5, 1):
        for c in plan.calls:
            if c.spec_cum is not None and len(c.spec_cum):
                inc = np.diff(np.r_[0, c.spec_cum])
                assert np.all(inc[:-1] == gamma + 1) and 1 <= inc[-1] <= gamma + 1


@pytest.mark.parametrize("kind,width", [("model", 1), ("head", 1), ("head", 3), ("ngram", 1)])
@pytest.mark.parametrize("batch", [1, 4, 16])
def test_alpha_one_batched_engine_advances_every_sequence_by_gamma_plus_one(kind, width, batch):
    gamma, out = 4, 1 + 5 * 10
    b, s = deployments("h100-sxm", 1)
    d = drafts_for(b, s, kind, width)
    eng = Engine("base", b, 10**7, 64, draft=d, gamma=gamma, max_spec_iters=out)
    cum = np.cumsum(np.full(10, gamma + 1))  # alpha = 1: every iteration gamma + 1 tokens
    for rid in range(batch):
        eng.submit(rid, Call(1, 100, 0, out, cum))
    eng.admit()
    eng.round_time()
    eng.advance(1)  # the prefill
    kv0 = sum(eng.kv[s_] for s_ in eng.act)
    t, grow = eng.round_time()
    assert grow == batch * (gamma + 1)
    ts, grows = eng.round_times(3)
    assert np.all(grows == batch * (gamma + 1)) and ts[0] == pytest.approx(t, rel=1e-12)
    # the iteration costs exactly the cost model's passes: gamma draft passes of w tokens + one verify pass
    c = np.full(batch, kv0 / batch)
    bt = speculating_target(b, d)  # the target as its speculating engine runs (a draft model: no async by default)
    want = bt.batch_forward_time(np.full(batch, width * gamma + 1.0), c, np.full(batch, width * gamma + 1.0))
    if kind != "ngram":
        want += sum(d.batch_forward_time(np.full(batch, float(width)), c + i, np.full(batch, float(width)))
                    for i in range(gamma))
    assert t == pytest.approx(want, rel=1e-9)


# ---- a head is never slower to draft than a separate model of more layers -----------------------------
# (hybrid linear-attention and sparse-attention targets left out: a few-layer cut of a 1-in-4 hybrid holds no
# attention layer at all, and the head is a plain full-attention layer, so "more layers" is not "more work" there)
TARGETS = [n for n, m in model_catalog().items() if m.params > 5e9 and not m.is_linear_hybrid and m.index_topk is None]


@settings(max_examples=examples(60), deadline=None)
@given(st.sampled_from(TARGETS), st.integers(1, 4), st.integers(1, 30), st.sampled_from(["h100-sxm", "h200", "rtx-a6000", "a100-80gb"]),
       st.sampled_from([1, 2]), st.integers(0, 20000), st.sampled_from(["bf16", "fp8"]))
def test_head_never_slower_to_draft_than_a_separate_model_with_more_layers(target, k, extra, hw_name, tp, ctx, dtype):
    hw = get_hardware(hw_name)
    p = prior_profile(hw).params(hw)
    base = get_model(target)
    head = Deployment(base.draft_head(k).with_dtypes(dtype), hw, tp, p, HEAD)
    separate = Deployment(base.model_copy(update={"layers": k + extra}).with_dtypes(dtype), hw, tp, p)
    assert head.draft_level_time(ctx) <= separate.decode_time(ctx)
    assert head.draft_prefill_time(64, ctx) <= separate.prefill_time(64, ctx)
    assert head.resident_bytes_per_gpu < separate.resident_bytes_per_gpu
    assert head.kv_bytes_per_token_per_gpu < separate.kv_bytes_per_token_per_gpu


def test_ngram_draft_costs_nothing_and_holds_no_memory():
    b, _ = deployments("h200", 1)
    d = replace(b, drafting=NGRAM)
    assert d.draft_level_time(1000) == 0.0 and np.all(d.draft_prefill_time(np.arange(5), 10) == 0.0)
    assert d.resident_bytes_per_gpu == 0.0 and d.kv_bytes_per_token_per_gpu == 0.0


# ---- dtypes -----------------------------------------------------------------------------------------
@settings(max_examples=examples(80), deadline=None)
@given(st.sampled_from(sorted(model_catalog())), st.sampled_from([1, 2, 4, 8]), st.integers(0, 30000),
       st.sampled_from(["h100-sxm", "h200", "a100-80gb", "l40s", "cpu"]))
def test_fp8_and_int4_never_increase_bytes_or_decode_time(name, tp, ctx, hw_name):
    m = get_model(name)
    hw = get_hardware(hw_name)
    p = prior_profile(hw).params(hw)
    chain = [m, m.with_dtypes("fp8"), m.with_dtypes("fp8", "fp8"), m.with_dtypes("int4", "fp8")]
    for hi, lo in zip(chain, chain[1:]):
        assert lo.weight_bytes_read <= hi.weight_bytes_read or lo.weight_dtype == "int4" and lo.weight_bytes_read <= m.weight_bytes_read
        assert lo.weight_bytes_resident <= m.weight_bytes_resident
        assert lo.kv_bytes_per_token(tp) <= hi.kv_bytes_per_token(tp)
    assert chain[3].weight_bytes_read <= chain[1].weight_bytes_read
    deps = [Deployment(x, hw, tp, p) for x in (m, chain[1], chain[2])]
    t = [d.decode_time(ctx) for d in deps]
    # FP8 weights: never slower than bf16 but for the quantised GEMMs' own fixed cost per pass (activation quantisation,
    # measured per GEMM: simulator/catalog/quant_gemm.yaml), which a tiny model's decode can exceed its byte savings by
    assert t[1] <= (t[0] + deps[1].gemm_overhead_time) * (1 + 1e-12) and t[2] <= t[1] * (1 + 1e-12)


def test_fp8_by_hand():
    m = get_model("qwq-32b")
    f = m.with_dtypes("fp8", "fp8")
    assert f.kv_bytes_per_token(2) == m.kv_bytes_per_token(2) / 2
    layers = m.layers * m.params_per_layer
    assert f.weight_bytes_read == pytest.approx(layers * 1.0 + m.embedding_params * 2.0)
    assert m.with_dtypes() is m  # bf16/bf16: unchanged (every existing number stays identical)
    hw = get_hardware("h100-sxm")
    d = Deployment(f, hw, 1, prior_profile(hw).params(hw))  # W8A8 on FP8 tensor cores, at its kind's compute ratio
    assert d.gemm[0] == "w8a8-fp8" and d.matmul_flops_per_s == hw.dense_fp8_flops_per_s * d.gemm[1].compute_ratio.value
    a100 = get_hardware("a100-80gb")  # no FP8 cores: weight-only FP8-Marlin at the bf16 peak
    d = Deployment(f, a100, 1, prior_profile(a100).params(a100))
    assert d.gemm[0] == "w8a16-fp8" and d.matmul_flops_per_s == a100.dense_bf16_flops_per_s * d.gemm[1].compute_ratio.value
    with pytest.raises(ValueError, match="unknown weight dtype"):
        m.with_dtypes("fp4")


# ---- tree verification -----------------------------------------------------------------------------------
@pytest.mark.parametrize("width", [1, 2, 4])
def test_tree_verifies_w_gamma_plus_one_tokens(workload, width):
    b, s = deployments("h100-sxm", 1)
    d = head_deployment(b, 1, width)
    tb = CostTables(b, s, d, workload, 3)
    x = np.arange(50, 60)
    np.testing.assert_allclose(tb.verify_iter[x], b.forward_time(3 * width + 1, x, logit_rows=3 * width + 1), rtol=1e-12)
    np.testing.assert_allclose(tb.draft_iter[x], sum(d.forward_time(width, x + i, logit_rows=width) for i in range(3)), rtol=1e-12)
    if width > 1:
        assert np.all(tb.verify_iter > CostTables(b, s, head_deployment(b), workload, 3).verify_iter)


# ---- analytic = DES for the new draft kinds --------------------------------------------------------------
KINDS = [("head", 1), ("ngram", 1), ("head", 3), ("model", 2)]
N_EX = 4


@pytest.mark.parametrize("kind,width", KINDS)
@pytest.mark.parametrize("system", ["specdecode", "specreason-decode"])
@settings(max_examples=examples(N_EX), deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow],
          phases=[Phase.explicit, Phase.generate])
@given(data=st.data())
def test_des_mean_within_its_ci_of_analytic_for_every_draft_kind(system, kind, width, data):
    w = data.draw(workloads())
    gamma = data.draw(st.integers(1, 6))
    cfg = SystemConfig(system=system, gamma=gamma, threshold=data.draw(st.integers(0, 9)) if system != "specdecode" else None)
    b, s = deployments(*data.draw(st.sampled_from([("h100-sxm", 1), ("h200", 2), ("rtx-a6000", 2)])))
    tables = CostTables(b, s, drafts_for(b, s, kind, width), w, gamma)
    a = predict_point(cfg, chain_for(cfg, w, {}), CostVectors(tables))
    req, _ = simulate(cfg, tables, 400, data.draw(st.integers(0, 2**31 - 1)))
    d = summarize(req, level=1 - 0.01 / (len(KINDS) * 2 * N_EX))
    assert d["ci_low_s"] <= a["latency_s"] <= d["ci_high_s"], (cfg.label, kind, width, a["latency_s"], d)
    if kind == "ngram":
        assert a["draft_s"] == 0.0 and req.draft_s.max() == 0.0


# ---- the shipped scenario and bad configurations ----------------------------------------------------------
def test_shipped_fp8_head_scenario_resolves():
    rs = load_scenario("fp8-qwq32b-head-h100-h200")
    assert rs.drafting.kind == "head" and rs.base_model.weight_dtype == "fp8" and rs.base_model.kv_dtype == "fp8"
    assert rs.workload.token_acceptance[0] == 0.8  # the head's own prior replaces the separate model's
    d = rs.deployments("h100-sxm", 1)
    assert d["draft"].drafting == HEAD and d["draft"].model.layers == 1


def _scenario(tmp_path, **draft_and_more) -> Path:
    base = yaml.safe_load((ROOT / "scenarios" / "fp8-qwq32b-head-h100-h200.yaml").read_text())
    for k, v in draft_and_more.items():
        if v is None:
            base.pop(k, None)
        elif isinstance(v, dict) and isinstance(base.get(k), dict):
            base[k] = {**base[k], **v}
        else:
            base[k] = v
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(base))
    return p


@pytest.mark.parametrize("change,field", [
    ({"draft": {"kind": "model", "model": "r1-distill-llama-70b", "acceptance": None}, "hardware": {"count": 4},
      "grid": {"gamma": [2], "threshold": [7], "tp": [2], "hardware": ["h200"]}}, "draft.model"),
    ({"base": {"weight_dtype": "fp4"}}, "base.weight_dtype"),
    ({"draft": {"kv_dtype": "int2"}}, "draft.kv_dtype"),
    ({"draft": {"tree_width": 8, "verify_budget": 32}}, "draft.tree_width"),
    ({"draft": {"kind": "ngram", "layers": 1, "acceptance": None}}, "draft.acceptance"),
    ({"draft": {"kind": "head", "model": "qwen2.5-7b"}}, "draft.model"),
    ({"draft": {"acceptance": {"a": [0.5, 0.7], "source": "x"}}}, "draft.acceptance.a"),
    ({"draft": {"kind": "ngram"}, "serving_engine": {"async_scheduling": True}}, "serving_engine.async_scheduling"),
])
def test_bad_draft_configs_name_file_and_field(tmp_path, change, field):
    p = _scenario(tmp_path, **change)
    with pytest.raises(InputError) as e:
        load_scenario(p)
    assert e.value.field is not None and e.value.field.startswith(field), (e.value.field, e.value.message)


def test_prompt_lookup_with_async_scheduling_is_refused_as_vllm_refuses_it_and_runs_without(tmp_path):
    with pytest.raises(InputError, match="vLLM refuses async scheduling with ngram"):
        load_scenario(_scenario(tmp_path, draft={"kind": "ngram"}, serving_engine={"async_scheduling": True}))
    for stated in (None, False):  # unset (the version's default) or off: accepted, the base engine without the overlap
        rs = load_scenario(_scenario(tmp_path, draft={"kind": "ngram"}, serving_engine={"async_scheduling": stated}))
        d = rs.deployments("h100-sxm", 1)
        assert speculating_target(d["base"], d["draft"]).cost.async_overlap == 0.0


def test_bad_draft_config_exits_2_with_one_line(tmp_path):
    p = _scenario(tmp_path, draft={"tree_width": 8, "verify_budget": 32})
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "simulate", "whatif", str(p)], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(p) in lines[0] and "draft.tree_width" in lines[0], lines


def test_a_deepseek_mtp_module_takes_the_one_step_shape():
    """An MTP draft of a DeepSeek-architecture target (one module trained for one step, reused for every drafted
    token) takes the one-step prior's shape at the same AL(1); other targets' MTP modules the multi-step one."""
    from simulator.inputs.drafter_priors import prior_kind

    assert prior_kind("mtp", arch="deepseek_v3") == "mtp-one-step" == prior_kind("mtp", arch="deepseek_v32")
    assert prior_kind("mtp", arch="glm4_moe") == "mtp" and prior_kind("mtp", arch="qwen3_next") == "mtp"
    assert prior_kind("eagle3", arch="deepseek_v3") == "eagle3"
    assert prior_kind("mtp", model_name="DeepSeek-V4-Pro") == "mtp-one-step"
