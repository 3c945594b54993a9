"""vLLM's start-up memory plan (simulator/cost/memory_plan.py): its laws, a logged vLLM figure, and the memory check."""

from dataclasses import replace

import pytest
from hypothesis import given, settings, strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.cost.memory_plan import GIB, cudagraphs_counted, memory_plan
from specsim_cli.main import main
from tests.conftest import examples

SEQS = 256  # max_num_seqs: vLLM V0's default (the 0.6.5 case); the laws hold at any value

MODELS = ["llama-3.1-8b", "qwen3-32b", "qwen3-0.6b", "qwen3-30b-a3b", "gpt-oss-20b", "gemma-3-270m"]
GPUS = ["h100-sxm", "a100-80gb", "h200", "l40s", "rtx-a6000"]


def dep(model: str, hw: str, tp: int = 1, weights: str = "bf16", kv: str = "bf16", memory: float | None = None):
    h = get_hardware(hw)
    if memory is not None:
        h = h.model_copy(update={"memory_reported_bytes": memory})
    return Deployment(get_model(model).with_dtypes(weights, kv), h, tp, prior_profile(h).params(h))


plans = st.tuples(st.sampled_from(MODELS), st.sampled_from(GPUS), st.floats(0.05, 1.0), st.integers(256, 65536),
                  st.sampled_from([1, 16, 32]))


@settings(max_examples=examples(60), deadline=None)
@given(plans, st.floats(0.0, 0.5), st.floats(1.0, 2.0))
def test_capacity_grows_with_utilization_and_memory(p, du, scale):
    model, hw, u, tokens, block = p
    d = dep(model, hw)
    a = memory_plan([d], u, tokens, SEQS, block_size=block)
    assert a.kv_tokens >= 0 and a.num_blocks >= 0 and a.kv_tokens % block == 0
    assert memory_plan([d], min(u + du, 1.0), tokens, SEQS, block_size=block).kv_tokens >= a.kv_tokens
    bigger = dep(model, hw, memory=get_hardware(hw).reported_memory_bytes * scale)
    assert memory_plan([bigger], u, tokens, SEQS, block_size=block).kv_tokens >= a.kv_tokens


@settings(max_examples=examples(60), deadline=None)
@given(plans, st.integers(1, 8), st.floats(0.0, 20.0))
def test_capacity_falls_with_batched_tokens_and_weights(p, times, extra_gib):
    model, hw, u, tokens, block = p
    d = dep(model, hw)
    a = memory_plan([d], u, tokens, SEQS, block_size=block)
    more = memory_plan([d], u, tokens * times, SEQS, block_size=block)
    assert more.activation_bytes >= a.activation_bytes and more.kv_tokens <= a.kv_tokens
    assert replace(a, weights_bytes=a.weights_bytes + extra_gib * GIB).kv_tokens <= a.kv_tokens
    fp8 = memory_plan([dep(model, hw, weights="fp8")], u, tokens, SEQS, block_size=block)  # fewer weight bytes
    assert fp8.weights_bytes < a.weights_bytes and fp8.kv_tokens >= a.kv_tokens


@settings(max_examples=examples(60), deadline=None)
@given(plans)
def test_fp8_kv_doubles_the_tokens_up_to_one_block(p):
    model, hw, u, tokens, block = p
    a = memory_plan([dep(model, hw)], u, tokens, SEQS, block_size=block)
    b = memory_plan([dep(model, hw, kv="fp8")], u, tokens, SEQS, block_size=block)
    assert b.kv_bytes == pytest.approx(a.kv_bytes)  # the KV dtype changes what a token costs, not the budget
    assert b.kv_tokens - 2 * a.kv_tokens in (0, block)


def test_cuda_graphs_count_from_vllm_0_21():
    assert not cudagraphs_counted("0.10.1") and not cudagraphs_counted("0.20.2")
    assert cudagraphs_counted("0.21.0") and cudagraphs_counted("0.24") and cudagraphs_counted(None)
    d = dep("qwen3-8b", "h100-sxm")
    old, new = memory_plan([d], 0.9, 8192, SEQS, vllm_version="0.15.1"), memory_plan([d], 0.9, 8192, SEQS)
    assert old.kv_bytes - new.kv_bytes == pytest.approx(new.cudagraph_bytes) and new.cudagraph_bytes > 0


def test_llama3_8b_on_an_h100_as_vllm_logged_it():
    """vLLM 0.6.5 on an H100 (vllm-project/vllm PR 10511): total 79.22 GiB, weights 14.96 GiB, available KV cache
    53.29 GiB at utilization 0.9 (graphs outside the budget in that version)."""
    p = memory_plan([dep("llama-3-8b", "h100-sxm")], 0.9, 8192, SEQS, vllm_version="0.6.5")
    assert p.total_bytes / GIB == pytest.approx(79.22, abs=0.005)
    assert p.weights_bytes / GIB == pytest.approx(14.96, rel=0.005)
    assert p.kv_bytes / GIB == pytest.approx(53.29, rel=0.05)


# ---- the memory check -------------------------------------------------------------------------------------------
SC = """name: fit
hardware: {{gpu: {gpu}, count: 1}}
base: {{model: {model}, tp: 1}}
small: {{model: qwen3-0.6b, tp: 1}}
workload: aime_qwq32b_r1-1.5b
{memory}
systems: [{systems}]
"""


def _scenario(tmp_path, gpu="a100-80gb", model="qwen3-32b", memory="", systems="vanilla-base"):
    p = tmp_path / "s.yaml"
    p.write_text(SC.format(gpu=gpu, model=model, memory=memory, systems=systems))
    return p


def test_qwen3_32b_at_tp1_on_an_a100_80gb_is_served(tmp_path):
    from simulator.inputs.scenario import load_scenario

    rs = load_scenario(_scenario(tmp_path, systems="vanilla-base, specdecode"))
    [(plan, what, n, fld, u)] = [x for x in rs.engine_plans("a100-80gb", 1) if x[1] == "qwen3-32b"]
    assert u == pytest.approx(0.9) and fld == "memory_fraction"  # the lone base engine gets base + small
    assert plan.max_concurrency(n) >= 1 and plan.kv_tokens > 20_000


@pytest.mark.parametrize("memory, words", [
    ("gpu_memory_utilization: 0.8", "To serve at least one request with max_model_len"),
    ("gpu_memory_utilization: 0.75", "No available memory for the cache blocks"),
])
def test_what_vllm_refuses_is_refused_in_its_words(tmp_path, capsys, memory, words):
    p = _scenario(tmp_path, memory=memory)
    assert main(["simulate", "whatif", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{p}: gpu_memory_utilization:" in err and words in err and "\n" not in err


def test_colocated_engines_split_and_both_names_are_rejected(tmp_path, capsys):
    from simulator.inputs.scenario import load_scenario

    rs = load_scenario(_scenario(tmp_path, gpu="h100-sxm", model="qwen3-8b", memory="gpu_memory_utilization: 0.9",
                                 systems="vanilla-base, specreason"))
    utils = {(what, fld): u for _, what, _, fld, u in rs.engine_plans("h100-sxm", 1)}
    assert utils[("qwen3-8b", "gpu_memory_utilization")] == pytest.approx(0.9)
    assert utils[("qwen3-8b", "gpu_memory_utilization.base")] == pytest.approx(0.8)
    assert utils[("qwen3-0.6b", "gpu_memory_utilization.small")] == pytest.approx(0.1)
    p = _scenario(tmp_path, memory="gpu_memory_utilization: 0.9\nmemory_fraction: {base: 0.8, small: 0.1}")
    assert main(["simulate", "whatif", str(p)]) == 2
    assert "not both" in capsys.readouterr().err


@settings(max_examples=examples(40), deadline=None)
@given(plans, st.integers(1, 5000))
def test_blocks_override_and_the_partial_last_block(p, blocks):
    """vLLM's --num-gpu-blocks-override sets the cache to exactly that many blocks; a running sequence holds on
    average (block - 1) / 2 tokens of its last block beyond its own, on top of its windows / linear state."""
    model, hw, u, tokens, block = p
    d = dep(model, hw)
    a = memory_plan([d], u, tokens, SEQS, block_size=block, blocks_override=blocks)
    assert a.num_blocks == blocks and a.kv_tokens == blocks * block
    free = memory_plan([d], u, tokens, SEQS, block_size=block)
    assert free.num_blocks == max(int(free.kv_bytes // (block * free.token_bytes)), 0)
    assert a.partial_block_tokens == (block - 1) // 2
    assert a.running_seq_reserve_tokens == a.seq_reserve_tokens + (block - 1) // 2
    # the expectation over every length mod block of the unfilled tokens of whole blocks
    waste = [-(-n // block) * block - n for n in range(1, 1 + block)]
    assert abs(a.partial_block_tokens - sum(waste) / block) <= 0.5


def test_speculative_slots_follow_vllms_allocation():
    """vLLM allocates, per running speculating sequence and step, its gamma drafts to verify besides the committed
    token and gamma lookahead slots for a drafter that writes ahead (draft model, EAGLE / MTP heads, block drafters);
    prompt lookup writes none ahead; a tree verifies w * gamma drafts."""
    from simulator.cost.cost_model import Drafting
    from simulator.engines.serving.kv_cache import speculative_slots

    assert speculative_slots(Drafting("model"), 0) == 0 and speculative_slots(Drafting("model"), None) == 0
    for g in (1, 3, 7):
        for kind in ("model", "head", "eagle3", "mtp", "block"):
            assert speculative_slots(Drafting(kind), g) == 2 * g
        assert speculative_slots(Drafting("ngram"), g) == g
        assert speculative_slots(Drafting("head", tree_width=2), g) == 3 * g
