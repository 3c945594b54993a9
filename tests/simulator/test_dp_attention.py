"""Data-parallel attention with expert parallelism (``Deployment.dp``; DeepSeek's deployment): dp ranks of tp GPUs,
attention and dense weights on every rank, routed experts over all tp * dp GPUs."""

import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog.moe_layout import stored_expert_factor
from simulator.cost.cost_model import Deployment, expert_parallel_error
from simulator.cost.cost_profile import prior_profile
from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving.kv_cache import engine_plan, kv_layout
from specsim_cli.main import main
from tests.conftest import examples

MOE = ["deepseek-r1", "qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b"]


def dep(model: str, tp: int, dp: int = 1, ep: int | None = None, hw: str = "h200") -> Deployment:
    h = get_hardware(hw)
    return Deployment(get_model(model), h, tp, prior_profile(h).params(h), ep=tp * dp if ep is None else ep, dp=dp)


def pass_ms(d: Deployment, B: int, C: int = 2048) -> float:
    n, c = np.ones(B), np.full(B, float(C))
    return d.batch_forward_time(n, c) * 1e3


@settings(max_examples=examples(40), deadline=None)
@given(st.sampled_from(MOE), st.sampled_from([1, 2]), st.sampled_from([2, 4, 8]), st.integers(1, 256), st.integers(1, 64))
def test_a_dp_pass_grows_with_the_batch(model, tp, dp, B, more):
    d = dep(model, tp, dp)
    assert d.gpus == tp * dp and d.expert_shards == tp * dp
    assert pass_ms(d, B + more) >= pass_ms(d, B) * (1 - 1e-12)


@settings(max_examples=examples(30), deadline=None)
@given(st.sampled_from(MOE), st.sampled_from([1, 2]), st.sampled_from([2, 4, 8]))
def test_dp_replicates_attention_and_spreads_experts(model, tp, dp):
    """Per GPU: the non-expert weights of a tp group (every rank holds them), the experts over tp * dp GPUs; the
    replica's KV cache is dp ranks' caches (a sequence lives on one rank)."""
    m = get_model(model)
    d, one = dep(model, tp, dp), dep(model, tp, 1)
    experts = m.routed_expert_bytes
    stored = experts * stored_expert_factor(m, d.hardware, 1)  # whole experts per GPU, as the engine lays them out
    assert d.resident_bytes_per_gpu == pytest.approx((m.weight_bytes_resident - experts) / tp + stored / (tp * dp))
    assert d.resident_bytes_per_gpu < one.resident_bytes_per_gpu
    assert d.kv_bytes_per_token_per_gpu == one.kv_bytes_per_token_per_gpu
    plan = engine_plan(0.9, [d])  # one rank's plan at vLLM's default limits on the GPU
    if plan.kv_tokens > 0:
        assert kv_layout(0.9, [d])[0] == dp * plan.usable_tokens  # every rank's blocks but its null block


def test_the_experts_see_every_ranks_tokens():
    """At dp ranks of one sequence each, a rank's attention is a batch-1 pass but its experts serve dp tokens: the
    pass costs more than one sequence on one rank and less than dp sequences on one rank's attention."""
    d = dep("deepseek-r1", 1, 8)
    one, eight = d.pass_breakdown(1.0, 2049.0, 2049.0, 1.0, 1.0), d.pass_breakdown(8.0, 8 * 2049.0, 8 * 2049.0, 8.0, 8.0)
    assert eight["kv"] + eight["weights"] > one["kv"] + one["weights"]  # more experts hit
    assert float(eight["sequences"]) == pytest.approx(float(one["sequences"]))  # one sequence per rank


@pytest.mark.parametrize("model, tp, ep, dp, words", [
    ("deepseek-r1", 1, 4, 8, "tp x dp = 8"),
    ("qwen3-32b", 2, 8, 4, "needs a mixture-of-experts"),
])
def test_dp_needs_experts_over_every_gpu(model, tp, ep, dp, words):
    assert words in expert_parallel_error(get_model(model), tp, ep, dp)
    assert expert_parallel_error(get_model("deepseek-r1"), 8, 8) is None  # dp = 1: ep = tp as before


def test_a_dp_scenario_runs_and_counts_its_gpus(tmp_path, capsys):
    p = tmp_path / "ds.yaml"
    p.write_text("name: ds-dp\nhardware: {gpu: h200, count: 8}\n"
                 "base: {model: deepseek-r1, tp: 1, dp: 8, ep: 8, weight_dtype: fp8}\nworkload: aime_qwq32b_r1-1.5b\n")
    rs = load_scenario(str(p))
    assert rs.deployments("h200", 1)["base"].gpus == 8
    assert main(["simulate", "whatif", str(p), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["latency_s"] > 0
    short = "vllm bench serve --dataset-name random --random-input-len 256 --random-output-len 32 --num-prompts 20"
    code = main(["simulate", "capacity", str(p), "--slo", "p99_ttft<=2s", "--requests", "20", "--workers", "1",
                 "--max-replications", "3", "--bench-serve", short, "--format", "json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    (row,) = json.loads(out.out)["results"]
    assert row["dp"] == 8 and row["gpus_per_replica"] == 8 and "TP=1 x DP=8" in out.err + out.out
    for bad, field in (("ep: 4", "base.ep"), ("ep: 8, pp: 2", "base.tp")):
        p.write_text(p.read_text().replace("ep: 8", bad, 1))
        with pytest.raises(InputError) as e:
            load_scenario(str(p))
        assert e.value.field == field
        p.write_text(p.read_text().replace(bad, "ep: 8", 1))


def test_pass_time_checks_each_data_parallel_ranks_share_of_the_kv(capsys):
    """DP 8 holds 64 sequences as 8 per rank: the KV check counts a rank's share (TP 1 alone refuses 64)."""
    from specsim_cli.main import main

    args = ["simulate", "pass-time", "--model", "deepseek-r1", "--hardware", "h200", "--dtype", "fp8", "--batch", "64",
            "--context", "8704", "--format", "json"]
    assert main([*args, "--tp", "1", "--dp", "8", "--ep", "8"]) == 0
    capsys.readouterr()
    args[args.index("64")] = "512"
    assert main([*args, "--tp", "1", "--dp", "8", "--ep", "8"]) == 2  # 64 per rank do not fit one H200
    assert "(64 per data-parallel rank)" in capsys.readouterr().err
