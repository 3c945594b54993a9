"""Async scheduling with a speculator, as vLLM defaults it: on without a speculator or with EAGLE / MTP-style drafting,
off with a separate draft model or CPU prompt lookup unless the scenario asks for it (``CostParams.speculating_with``, the one rule;
``simulator.cost.spec_iteration.speculating_target`` applies it to a speculating engine's passes)."""

from dataclasses import replace

import numpy as np
from hypothesis import given, settings, strategies as st

from simulator.catalog import get_hardware
from simulator.catalog.engine_hosts import ServingEngine, host_terms
from simulator.cost.cost_model import Drafting
from simulator.cost.cost_profile import prior_profile
from simulator.cost.spec_iteration import speculating_target
from simulator.engines.gamma_choice import iteration_parts
from simulator.engines.serving.engine import Engine
from tests.conftest import deployments, examples


def _params(async_scheduling=None, version=None):
    hw = get_hardware("h100-sxm")
    return prior_profile(hw, serving_engine=ServingEngine(version=version, async_scheduling=async_scheduling)).params(hw)


def test_a_version_default_turns_async_off_for_a_draft_model_only():
    c = _params()  # the newest version: async on by default
    assert c.async_overlap > 0 and c.async_overlap_non_eagle == 0.0
    for kind in ("model", "ngram"):  # vLLM's draft_model and (CPU) ngram methods
        assert c.speculating_with(Drafting(kind)).async_overlap == 0.0, kind
    for kind in ("head", "eagle3", "mtp", "block"):  # EAGLE / MTP-style: async on by default
        assert c.speculating_with(Drafting(kind)) is c, kind
    assert c.speculating_with(None) is c


def test_a_stated_async_scheduling_keeps_the_overlap_with_a_draft_model():
    on, off = _params(async_scheduling=True), _params(async_scheduling=False)
    assert on.async_overlap > 0 and on.speculating_with(Drafting("model")).async_overlap == on.async_overlap
    assert off.async_overlap == 0 and off.speculating_with(Drafting("model")).async_overlap == 0
    assert "async_overlap_non_eagle" not in host_terms(ServingEngine(async_scheduling=True))
    assert host_terms(ServingEngine())["async_overlap_non_eagle"].value == 0.0


@settings(max_examples=examples(40), deadline=None)
@given(st.integers(1, 256), st.integers(0, 32000), st.integers(1, 8))
def test_losing_the_overlap_never_makes_a_pass_faster(batch, context, gamma):
    b, s = deployments("h100-sxm", 1)
    b = replace(b, cost=_params())
    s = replace(s, cost=_params(), drafting=Drafting("model"))
    bt = speculating_target(b, s)
    n = np.full(batch, gamma + 1.0)
    c = np.full(batch, float(context))
    assert bt.batch_forward_time(n, c, n) >= b.batch_forward_time(n, c, n) * (1 - 1e-12)
    d, v = iteration_parts(b, s, batch, context, gamma)  # the γ rule prices the speculating target
    d2, v2 = iteration_parts(bt, s, batch, context, gamma)
    assert (d, v) == (d2, v2)


def test_the_serving_engine_runs_a_draft_model_speculator_on_the_speculating_target():
    b, s = deployments("h100-sxm", 1)
    b, s = replace(b, cost=_params()), replace(s, cost=_params(), drafting=Drafting("model"))
    eng = Engine("base", b, 10**7, 64, draft=s, gamma=3, max_spec_iters=16)
    assert eng.dep.cost.async_overlap == 0.0 and eng.pc.a == 0.0
    head = replace(s, drafting=Drafting("head"))
    assert Engine("base", b, 10**7, 64, draft=head, gamma=3, max_spec_iters=16).dep is b  # EAGLE-style: async kept
    assert Engine("base", b, 10**7, 64).dep is b  # no speculator
