"""``specsim simulate pass-time --engine-version``: one step priced with a stated vLLM version's host terms and sized
by that version's start-up memory accounting, as a scenario's ``serving_engine`` is; and ``specsim list engines``."""

from __future__ import annotations

import json

import pytest

from simulator.catalog import get_hardware, get_model
from simulator.catalog.engine_hosts import ServingEngine, engine_hosts, engine_version
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import prior_profile
from simulator.cost.memory_plan import DEFAULT_UTILIZATION
from simulator.cost.pass_time import pass_time_table
from simulator.engines.serving.kv_cache import engine_plan
from simulator.errors import InputError
from specsim_cli.main import main

VERSIONS = [e.version for e in engine_hosts()["vllm"]]


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_stated_version_prices_the_step_with_its_host_terms():
    oldest, newest = VERSIONS[0], VERSIONS[-1]
    args = ("qwen3-8b", "h100-sxm", 1, (64,), (1,), (1024,))
    old, meta_old = pass_time_table(*args, serving_engine=ServingEngine(version=oldest))
    new, meta_new = pass_time_table(*args)
    assert meta_old["serving_engine"].startswith(f"vllm {oldest} ") and meta_new["serving_engine"].startswith(f"vllm {newest} ")
    # the per-sequence host part follows the versions' own t_seq (the GPU parts do not move)
    t_old = engine_version(ServingEngine(version=oldest)).seq_overhead_s.value
    t_new = engine_version(ServingEngine()).seq_overhead_s.value
    assert (old.sequences_ms.iloc[0] > new.sequences_ms.iloc[0]) == (t_old > t_new)
    assert old.weights_ms.iloc[0] == pytest.approx(new.weights_ms.iloc[0])


def test_the_memory_check_sizes_the_cache_as_the_stated_version_does():
    """A batch between what two versions' KV caches hold: the version that leaves more room prices it, the other
    refuses it in vLLM's words."""
    hw, m = get_hardware("h100-sxm"), get_model("qwen3-32b")
    context = 4096

    def plan(version):
        engine = ServingEngine(version=version)
        d = Deployment(m, hw, 1, prior_profile(hw, serving_engine=engine).params(hw))
        p = engine_plan(DEFAULT_UTILIZATION, [d], max_model_len=context + 1, engine=engine)
        return int(p.kv_bytes // p.held_bytes(context + 1))

    fits = {v: plan(v) for v in VERSIONS}
    roomy, tight = max(fits, key=fits.get), min(fits, key=fits.get)
    if fits[roomy] == fits[tight]:
        pytest.skip("every fitted version sizes this cache alike")
    batch = fits[tight] + 1
    rows, _ = pass_time_table("qwen3-32b", "h100-sxm", 1, (batch,), (1,), (context,),
                              serving_engine=ServingEngine(version=roomy))
    assert len(rows) == 1
    with pytest.raises(InputError, match="of KV cache") as e:
        pass_time_table("qwen3-32b", "h100-sxm", 1, (batch,), (1,), (context,),
                        serving_engine=ServingEngine(version=tight))
    assert e.value.field == "--batch"


@pytest.mark.parametrize("extra, words", [
    (["--engine-version", "banana"], "not dotted numbers"),
    (["--engine-version", "0.0.1"], "older than every fitted version"),
])
def test_bad_engine_versions_are_usage_errors(capsys, extra, words):
    code, _out, err = run(capsys, "simulate", "pass-time", "--model", "qwen3-8b", "--hardware", "h100-sxm", *extra)
    assert code == 2 and "Traceback" not in err
    assert words in err and "--engine-version" in err


def test_a_profile_and_an_engine_version_are_one_or_the_other():
    from simulator.cost.cost_profile import prior_profile as prior

    with pytest.raises(InputError, match="one or the other") as e:
        pass_time_table("qwen3-8b", "h100-sxm", profile=prior(get_hardware("h100-sxm")),
                        serving_engine=ServingEngine(version=VERSIONS[-1]))
    assert e.value.field == "--engine-version"


def test_pass_time_json_names_the_engine(capsys):
    code, out, err = run(capsys, "simulate", "pass-time", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--engine-version",
                         VERSIONS[0], "--no-async-scheduling", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert f"vllm {VERSIONS[0]} (async scheduling off" in json.dumps(doc)


def test_list_engines_shows_every_fitted_version(capsys):
    code, out, err = run(capsys, "list", "engines")
    assert code == 0, err
    for v in VERSIONS:
        assert f" {v} " in out


@pytest.mark.parametrize("draft", ["qwen3-0.6b", "eagle3"])
def test_the_engine_line_says_when_the_iteration_runs_without_async_scheduling(draft):
    """A version whose default runs async scheduling prices a separate draft model's iteration without it (vLLM's
    default); the engine line says so exactly when the iteration is priced so: stating async scheduling, or drafting
    with an EAGLE-3 head, keeps it on for both."""
    newest = ServingEngine(version=next(v for v in reversed(VERSIONS)
                                        if engine_version(ServingEngine(version=v)).async_overlap.value > 0))
    args = ("qwen3-8b", "h100-sxm", 1, (64,), (1,), (1024,))
    default, meta = pass_time_table(*args, draft=draft, gamma=4, serving_engine=newest)
    stated, meta_on = pass_time_table(*args, draft=draft, gamma=4,
                                      serving_engine=newest.model_copy(update={"async_scheduling": True}))
    slower = default.verify_ms.iloc[0] > stated.verify_ms.iloc[0] * (1 + 1e-9)
    assert slower == (draft == "qwen3-0.6b")
    assert ("off for the speculative iteration" in meta["serving_engine"]) == slower
    assert "off for the speculative iteration" not in meta_on["serving_engine"]
    assert default.pass_ms.iloc[0] == pytest.approx(stated.pass_ms.iloc[0])  # the plain step keeps it
