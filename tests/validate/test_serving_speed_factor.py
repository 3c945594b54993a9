"""Steps of one shape (a one-user `vllm bench serve` run's decode steps) pin the machine's speed, not the
batch scaling: the step fit then scales every term of the profile by one factor, and larger batches keep the profile's
growth instead of the flat growth a single re-fitted efficiency would give."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost.cost_profile import load_profile
from simulator.cost.setup import Setup
from validate.serving.fit import fit_step_params, one_shape, step_aggregates, step_times as _step_times
from tests.conftest import examples

PROFILE = "simulator/profiles/cost_cpu-epyc-vllm032.yaml"


@pytest.fixture(scope="module")
def setup_params():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    setup = Setup.from_names("cpu", 1, "smollm2-135m", "smollm2-135m-cut6")
    prof = load_profile(root / PROFILE)
    return setup, prof.params(setup.hardware)


def _steps(batch: int, new: int, contexts) -> pd.DataFrame:
    n = len(contexts)
    return pd.DataFrame({"duration_s": np.ones(n), "running": batch, "new_tokens": [[new] * batch] * n,
                         "context_tokens": [[int(c)] * batch for c in contexts], "engine": "base"})


@settings(max_examples=examples(25), deadline=None)
@given(s=st.floats(0.2, 8.0), batch=st.integers(1, 64), new=st.integers(1, 512), ctx=st.integers(0, 8000))
def test_slowed_scales_every_pass_exactly(setup_params, s, batch, new, ctx):
    setup, params = setup_params
    agg = step_aggregates(_steps(batch, new, [ctx]))
    base = _step_times(params, setup, agg)
    assert _step_times(params.slowed(s), setup, agg) == pytest.approx(base * s, rel=1e-9)


def test_one_shape_steps_fit_a_speed_factor_that_keeps_the_batch_growth(setup_params):
    setup, params = setup_params
    true = params.slowed(2.5)
    dec = _steps(1, 1, np.arange(64, 96))
    rng = np.random.default_rng(0)
    dec["duration_s"] = _step_times(true, setup, step_aggregates(dec)) * np.exp(rng.normal(0, 0.02, len(dec)))
    assert one_shape(step_aggregates(dec))
    fitted, facts = fit_step_params(dec, params, setup)
    assert set(facts["values"]) == {"speed_factor"} and facts["values"]["speed_factor"] == pytest.approx(2.5, rel=0.02)
    at8 = step_aggregates(_steps(8, 1, [80]))
    # the profile's growth from batch 1 to 8 is kept (a re-fit of the memory efficiency alone would flatten it)
    g_true = _step_times(true, setup, at8)[0] / _step_times(true, setup, step_aggregates(_steps(1, 1, [80])))[0]
    g_fit = _step_times(fitted, setup, at8)[0] / _step_times(fitted, setup, step_aggregates(_steps(1, 1, [80])))[0]
    assert g_fit == pytest.approx(g_true, rel=1e-6)


def test_one_user_steps_over_varied_contexts_are_one_shape(setup_params):
    """A one-user ladder with prompts and outputs of varied lengths (vllm bench serve --random-range-ratio): its decode
    steps span contexts 50-150 but still one batch shape, so they pin a speed factor, not the terms (the term re-fit
    flattened the batch growth: TPOT p50 at 2-8 users 15.0% off against 5.7%, docs/serve-bench.md)."""
    setup, params = setup_params
    dec = _steps(1, 1, np.arange(50, 150))
    dec["duration_s"] = _step_times(params.slowed(1.9), setup, step_aggregates(dec))
    assert one_shape(step_aggregates(dec))
    _, facts = fit_step_params(dec, params, setup)
    assert facts["values"]["speed_factor"] == pytest.approx(1.9, rel=1e-6)
    assert not one_shape(step_aggregates(pd.concat([dec, _steps(2, 1, [80])], ignore_index=True)))


def test_mixed_shapes_still_fit_the_terms(setup_params):
    setup, params = setup_params
    mixed = pd.concat([_steps(1, 1, np.arange(64, 96)), _steps(1, 64, [0, 0, 0]), _steps(4, 1, [100, 120])],
                      ignore_index=True)
    mixed["duration_s"] = _step_times(params, setup, step_aggregates(mixed))
    assert not one_shape(step_aggregates(mixed))
    _, facts = fit_step_params(mixed, params, setup)
    assert "speed_factor" not in facts["values"] and "mem_efficiency" in facts["values"]


def test_one_user_steps_of_mixed_shapes_keep_the_per_sequence_cost(setup_params):
    """Prefills and decodes of one running sequence (a one-user run of two engines): the per-sequence cost is the
    per-step cost's exact twin there, so it stays at the profile's value and the batch growth beyond one sequence is
    the profile's; steps with several sequence counts fit it."""
    setup, params = setup_params
    one = pd.concat([_steps(1, 1, np.arange(64, 96)), _steps(1, 64, [0, 0, 0])], ignore_index=True)
    one["duration_s"] = _step_times(params.slowed(1.5), setup, step_aggregates(one))
    assert not one_shape(step_aggregates(one))
    fitted, facts = fit_step_params(one, params, setup)
    assert fitted.seq_overhead_s == params.seq_overhead_s and "per-step cost's twin" in facts["kept_at_prior"][
        "seq_overhead_s"]
    several = pd.concat([one, _steps(4, 1, [100, 120])], ignore_index=True)
    several["duration_s"] = _step_times(params.slowed(1.5), setup, step_aggregates(several))
    _, facts = fit_step_params(several, params, setup)
    assert "seq_overhead_s" not in facts["kept_at_prior"]
