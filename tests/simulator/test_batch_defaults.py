"""vLLM's scheduler limits where a scenario leaves them unset: `vllm serve`'s batch defaults by device and version
(``engine_hosts.batch_defaults``), filled in by ``Execution.for_device`` and used by every serving engine, memory
plan and importer (one rule)."""

from __future__ import annotations

from pathlib import Path

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, hardware_catalog
from simulator.catalog.engine_hosts import ServingEngine, batch_defaults
from simulator.cost.execution import Execution
from simulator.engines.serving.kv_cache import engine_plan
from simulator.engines.serving.replica import Replica
from simulator.inputs.scenario import load_scenario
from simulator.inputs.systems import SystemConfig
from tests.conftest import examples

GIB = 2**30


@pytest.mark.parametrize("name", sorted(hardware_catalog()))
def test_every_catalog_device_gets_what_vllm_serve_picks(name):
    """A GPU whose driver reports >= 70 GiB and that is not an A100: 8192 tokens, 1024 sequences; every other GPU
    2048 and 256; the CPU 2048 and 128 per worker."""
    hw = get_hardware(name)
    got = batch_defaults(None, hw)
    if name == "cpu":
        assert got == (2048, 128) and batch_defaults(None, hw, world_size=2) == (4096, 256)
    elif hw.reported_memory_bytes >= 70 * GIB and "a100" not in name:
        assert got == (8192, 1024)
    else:
        assert got == (2048, 256)


def test_the_a100_carve_out_and_v0_follow_the_version():
    """vLLM 0.8 gave an 80 GB A100 the large pair (the carve-out came in 0.9); V0 (0.5) prefilled whole prompts
    and ran 256 sequences; the newest fitted version is the default."""
    a100, h100 = get_hardware("a100-80gb"), get_hardware("h100-sxm")
    assert batch_defaults(ServingEngine(version="0.8"), a100) == (8192, 1024)
    assert batch_defaults(ServingEngine(version="0.9"), a100) == (2048, 256)
    assert batch_defaults(ServingEngine(version="0.5"), h100) == (None, 256)
    assert batch_defaults(ServingEngine(), h100) == batch_defaults(ServingEngine(version="0.30"), h100)


@settings(max_examples=examples(60), deadline=None)
@given(tokens=st.one_of(st.none(), st.just("auto"), st.integers(1, 100_000)),
       seqs=st.one_of(st.none(), st.integers(1, 4096)), gpu=st.sampled_from(sorted(hardware_catalog())))
def test_for_device_keeps_what_is_set_and_is_idempotent(tokens, seqs, gpu):
    """Set limits are kept; an unset max_num_seqs is vLLM's default clamped to the token budget; the result is
    concrete and resolving it again changes nothing."""
    hw = get_hardware(gpu)
    if isinstance(tokens, int) and seqs is not None and tokens < seqs:  # vLLM refuses it, and so does Execution
        with pytest.raises(ValueError, match="must be greater than or equal to max_num_seqs"):
            Execution(max_num_batched_tokens=tokens, max_num_seqs=seqs)
        return
    want_t, want_s = batch_defaults(None, hw)
    if tokens == "auto" and seqs is not None and want_t is not None and seqs > want_t:  # above the GPU's budget
        with pytest.raises(ValueError, match="must be greater than or equal to max_num_seqs"):
            Execution(max_num_batched_tokens=tokens, max_num_seqs=seqs).for_device(hw)
        return
    ex = Execution(max_num_batched_tokens=tokens, max_num_seqs=seqs).for_device(hw)
    t = want_t if tokens == "auto" else tokens
    assert ex.max_num_batched_tokens == t
    assert ex.max_num_seqs == (seqs if seqs is not None else min(want_s, t or want_s))
    assert ex.for_device(hw) == ex and ex.for_device(get_hardware("cpu")) == ex


@pytest.mark.parametrize("gpu, seqs, tokens", [("h200", 1024, 8192), ("a100-80gb", 256, 2048)])
def test_the_serving_engine_and_memory_plan_run_the_device_defaults(gpu, seqs, tokens):
    """A replica of a scenario that sets no limits runs vLLM's on its GPU: the base engine's sequence cap and token
    budget, and its memory plan's profile pass and sampler warm-up; a scenario that sets them keeps its own."""
    rs = load_scenario("h200x2-qwen3-32b-serving", grid_overrides={"hardware": [gpu]})
    deps = rs.deployments(gpu, 2)
    for ex, want in ((rs.execution_for(gpu, 2), (seqs, tokens)), (Execution(max_num_seqs=64, max_num_batched_tokens=512),
                                                                   (64, 512))):
        rep = Replica(simpy.Environment(), SystemConfig(system="vanilla-base"), deps, rs.workload, (0.0, 0.9), ex)
        base = rep.engines[1]
        assert (base.max_batch, base.token_budget) == want
        plan = engine_plan(0.9, [deps["base"]], ex)
        assert (plan.profile_tokens, plan.sampler_rows) == (want[1], min(want))


def test_show_prints_the_resolved_limits_per_gpu():
    """`specsim show S --section resolved` (``ResolvedScenario.to_dict``) fills the limits in for each GPU of the
    grid, as vLLM would."""
    ex = load_scenario("r1-70b-a100x4", grid_overrides={"hardware": ["a100-80gb", "h200"]}).to_dict()["resolved"]["execution"]
    assert {h: (v["max_num_batched_tokens"], v["max_num_seqs"]) for h, v in ex.items()} == {
        "a100-80gb": (2048, 256), "h200": (8192, 1024)}


@pytest.mark.parametrize("value, words", [("lots", "a valid integer or 'auto' (got 'lots')"),
                                          ("0", "greater than or equal to 1 or 'auto' (got 0)")])
def test_a_bad_limit_names_the_field_and_every_accepted_form(tmp_path, value, words):
    """A value no member of the field's union takes: one line, the field without pydantic's member tags."""
    from simulator.errors import InputError

    text = Path("scenarios/cpu-smollm2.yaml").read_text() + f"execution: {{max_num_batched_tokens: {value}}}\n"
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(InputError) as e:
        load_scenario(tmp_path / "s.yaml")
    assert e.value.field == "execution.max_num_batched_tokens" and e.value.message.endswith(words), e.value.one_line()


def test_the_report_states_each_gpus_limits_and_who_set_them():
    """The capacity report's provenance line (and `specsim simulate capacity`'s, under its table): per GPU the limits
    the engines ran, vLLM's defaults or the scenario's."""
    line = load_scenario("r1-70b-a100x4", grid_overrides={"hardware": ["a100-80gb", "h200"]}).limits_line()
    assert line.endswith("(max_num_batched_tokens / max_num_seqs; vLLM's defaults on each device): a100-80gb 2048 / 256; "
                         "h200 8192 / 1024"), line
    line = load_scenario("moe-gpt-oss-120b-h100").limits_line()
    assert "set by the scenario: max_num_seqs" in line and line.endswith("h100-sxm 8192 / 256"), line


def test_a_sampler_bound_refusal_names_max_num_seqs(tmp_path):
    """gpt-oss-120b at TP 1 on an H100 with 0.85 of it: at vLLM's 1024 sequences the sampler warm-up on its 201k-token
    vocabulary leaves no KV cache, as vLLM would refuse; the error says lowering max_num_seqs helps, and 256 fits."""
    from simulator.errors import InputError

    text = Path("scenarios/moe-gpt-oss-120b-h100.yaml").read_text()
    assert "execution: {max_num_seqs: 256}" in text
    (tmp_path / "s.yaml").write_text(text.replace("execution: {max_num_seqs: 256}", ""))
    with pytest.raises(InputError) as e:
        load_scenario(tmp_path / "s.yaml")  # loading places every (GPU, TP) of the grid
    assert e.value.field == "memory_fraction.base" and "lower execution.max_num_seqs" in e.value.message, e.value.one_line()
    load_scenario("moe-gpt-oss-120b-h100")


def test_a_max_num_seqs_above_the_gpus_default_budget_is_refused(tmp_path):
    """max_num_seqs 4096 with the budget left to vLLM: 2048 on an RTX A6000, below it, which vLLM refuses at start-up;
    the error names the field, the GPU and the fix."""
    from simulator.errors import InputError

    text = Path("scenarios/reference-a6000-qwq32b.yaml").read_text() + "execution: {max_num_seqs: 4096}\n"
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(InputError) as e:
        load_scenario(tmp_path / "s.yaml")
    assert e.value.field == "execution.max_num_seqs" and "on rtx-a6000: max_num_batched_tokens (2048) must be" in \
        e.value.message and e.value.message.endswith("set execution.max_num_batched_tokens too"), e.value.one_line()


@pytest.mark.parametrize("tokens, seqs", [(None, None), ("", " "), ("8192", "256"), (4096, 128)])
def test_limits_from_a_command_line_or_a_record(tokens, seqs):
    """Unset (None, an empty string) means vLLM's default; anything else is the number it says."""
    ex = Execution.from_limits(tokens, seqs)
    assert ex.max_num_batched_tokens == ("auto" if not str(tokens or "").strip() else int(tokens))
    assert ex.max_num_seqs == (None if not str(seqs or "").strip() else int(seqs))


@pytest.mark.parametrize("tokens, seqs", [(0, None), ("0", None), (None, 0), ("1k", None), (64, 128)])
def test_limits_vllm_refuses_are_refused(tokens, seqs):
    """Zero is not "unset" (vLLM refuses it at start-up), nor is a budget below max_num_seqs."""
    with pytest.raises(ValueError):
        Execution.from_limits(tokens, seqs)


@pytest.mark.parametrize("version, graphs_counted", [("0.11", False), ("0.20.2", False), ("0.21", True), (None, True)])
def test_the_replica_sizes_its_kv_cache_as_the_scenarios_vllm_does(version, graphs_counted):
    """The serving engine's version reaches the replica's KV plan, the memory check's and their limits: vLLM before
    0.21 leaves CUDA graphs to the headroom above gpu_memory_utilization, from 0.21 it subtracts them first; the
    replica's capacity is that plan's, and the scenario's memory check reads the same plan."""
    from simulator.cost.memory_check import engine_plans
    from simulator.engines.serving.kv_cache import kv_layout

    rs = load_scenario("h200x2-qwen3-32b-serving")
    engine = ServingEngine(name="vllm", version=version)
    rs.scenario.serving_engine = engine
    deps, ex = rs.deployments("h200", 2), rs.execution_for("h200", 2)
    rep = Replica(simpy.Environment(), SystemConfig(system="vanilla-base"), deps, rs.workload, (0.0, 0.9), ex, engine)
    plan = engine_plan(0.9, [deps["base"]], ex, engine=engine)
    newest = engine_plan(0.9, [deps["base"]], ex)
    assert plan.cudagraph_counted is graphs_counted and newest.cudagraph_counted
    assert rep.engines[1].capacity == kv_layout(0.9, [deps["base"]], ex, engine)[0] == plan.usable_tokens
    freed = plan.usable_tokens - newest.usable_tokens
    assert (freed == 0) if graphs_counted else freed * plan.token_bytes >= 0.9 * plan.cudagraph_bytes
    checked = engine_plans(rs, "h200", 2)[0][0]
    assert checked.cudagraph_counted is graphs_counted
