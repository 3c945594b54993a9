"""One speculative iteration, one definition (issue 29): ``simulator.cost.spec_iteration.speculative_iteration`` prices
the iteration for the what-if engines' batch-1 cost tables (``CostTables.draft_iter`` / ``verify_iter``), the γ rule
(``gamma_choice.iteration_parts``) and the serving engine (``Engine._spec_time``; its stretches over arrays of
contexts, fused in ``pass_cost.spec_iteration_times``). On random scenario / drafter (the scenario's own, a tree, prompt
lookup, a block drafter) / γ / batch / context they agree:

- the γ rule is the function on ``Deployment.pass_time``, float for float;
- the cost tables at batch 1 are the function over the array of contexts (to 1e-12: array vs scalar evaluation);
- the serving engine's ``_spec_time`` (no prefill) is the γ rule's iteration (to 1e-9: ``PassCost``'s pre-multiplied
  coefficients), and with prefills sharing the iteration it is the passes over the explicit per-sequence batches
  (``Deployment.batch_forward_time``) the definition describes;
- the fused k-iteration evaluation ``spec_iteration_times`` is the function over the same array of contexts,
  bit-identical (==).
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost.cost_model import Drafting
from simulator.cost.cost_tables import CostTables
from simulator.engines.gamma_choice import iteration_parts
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving.engine import Engine
from simulator.engines.serving.pass_cost import PassCost, spec_iteration_times
from simulator.cost.spec_iteration import speculating_target, speculative_iteration
from tests.conftest import examples

# a separate draft model (CPU: hard roofline; A6000 at TP 2), a draft head (FP8), DeepSeek-R1's MTP module (MoE + MLA:
# a pass time that is not affine in the aggregates)
SCENARIOS = ["cpu-smollm2", "reference-a6000-qwq32b", "fp8-qwq32b-head-h100-h200", "moe-deepseek-r1-h200x8-mtp"]
AFFINE = SCENARIOS[:3]
DRAFTERS = ["own", "tree2", "tree3", "ngram", "block"]  # block: the gamma drafts in one pass (DSpark)


@lru_cache(maxsize=None)
def _scenario(name: str):
    rs = load_scenario(name)
    return rs, rs.deployments(rs.hardware_names[0], rs.tps[0])


@lru_cache(maxsize=None)
def _deps(name: str, drafter: str):
    rs, deps = _scenario(name)
    d = deps["draft"]
    if drafter.startswith("tree"):
        d = dataclasses.replace(d, drafting=Drafting(d.drafting.kind, int(drafter[4:])))
    elif drafter in ("ngram", "block"):
        d = dataclasses.replace(d, drafting=Drafting(drafter))
    return rs, deps["base"], deps["small"], d


@lru_cache(maxsize=None)
def _tables(name: str, drafter: str, gamma: int) -> CostTables:
    rs, b, s, d = _deps(name, drafter)
    return CostTables(b, s, d, rs.workload, gamma, execution=rs.scenario.execution)


def _engine(name: str, drafter: str) -> Engine:
    _, b, _, d = _deps(name, drafter)
    return Engine("base", b, 10**9, 128, draft=d, gamma=8, max_spec_iters=8)


def _draft_pass(dep):
    return None if dep.drafting.free else dep.pass_time


@settings(max_examples=examples(60), deadline=None)
@given(scenario=st.sampled_from(SCENARIOS), drafter=st.sampled_from(DRAFTERS), gamma=st.integers(0, 8),
       batch=st.integers(1, 64), context=st.integers(0, 6000))
def test_tables_gamma_rule_and_serving_engine_price_the_iteration_by_the_one_function(scenario, drafter, gamma, batch,
                                                                                       context):
    _, b, _, d = _deps(scenario, drafter)
    bs = speculating_target(b, d)  # the target as a speculating engine runs it (γ >= 1 configured)
    one = speculative_iteration(bs.pass_time, _draft_pass(d), d.drafting, gamma, batch, float(batch * context))
    # the γ rule: the function itself (γ = 0: a plain server's step)
    rule = iteration_parts(b, d, batch, context, gamma)
    if gamma:
        assert rule == (float(one[0]), float(one[1]))
    # the cost tables: the function at batch 1 over every context
    tb = _tables(scenario, drafter, gamma)
    x = min(context, tb.max_context)
    d1, v1 = iteration_parts(b, d, 1, x, gamma)
    assert tb.draft_iter[x] == pytest.approx(d1, rel=1e-12, abs=1e-300)
    assert tb.verify_iter[x] == pytest.approx(v1, rel=1e-12)
    # the serving engine (γ 8 configured: it speculates, at each iteration's γ), a decode-only batch (n_pref = 0): the
    # function on its speculating target, on PassCost's coefficients
    e = _engine(scenario, drafter)
    assert e._spec_time(gamma, 0, 0, 0, 0, batch, batch * context) == pytest.approx(sum(one), rel=1e-9)


@settings(max_examples=examples(40), deadline=None)
@given(scenario=st.sampled_from(SCENARIOS), drafter=st.sampled_from(DRAFTERS), gamma=st.integers(0, 6),
       dec=st.lists(st.integers(0, 5000), max_size=12),
       pref=st.lists(st.tuples(st.integers(1, 600), st.integers(0, 5000)), max_size=4))
def test_the_engine_with_prefills_is_the_passes_over_the_explicit_batches(scenario, drafter, gamma, dec, pref):
    """Prefills (n_j new tokens on c_j cached, one logit row each) share every pass of the iteration with the
    decoding sequences: draft pass 0 (+ w tokens per decoding sequence on c_i; γ = 0: the prefills alone), draft passes
    i = 1..γ-1 (w tokens on c_i + i, decoding sequences only), the verification (+ wγ + 1 tokens and logit rows)."""
    if not dec and not pref:
        return
    _, b, _, d = _deps(scenario, drafter)
    w, v = d.drafting.tree_width, d.drafting.verify_tokens(gamma)
    pn = np.array([n for n, _ in pref], dtype=float)
    pc = np.array([c for _, c in pref], dtype=float)
    cd = np.array(dec, dtype=float)
    one, nd = np.ones, len(dec)

    def batch(dep, n_dec, c_dec, with_prefills=True):
        n = np.concatenate([pn if with_prefills else [], np.full(nd, float(n_dec))])
        c = np.concatenate([pc if with_prefills else [], c_dec])
        rows = np.concatenate([one(len(pn)) if with_prefills else [], np.full(nd, float(n_dec))])
        return dep.batch_forward_time(n, c, rows) if len(n) else 0.0

    draft = 0.0
    if not d.drafting.free:
        if gamma == 0:  # the draft ingests the prefills only
            draft = d.batch_forward_time(pn, pc, one(len(pn))) if len(pn) else 0.0
        elif d.drafting.kind == "block":  # one pass: the prefills + gamma tokens (gamma logit rows) per sequence
            draft = batch(d, gamma, cd)
        else:
            draft = batch(d, w, cd) + sum(batch(d, w, cd + i, False) for i in range(1, gamma) if nd)
    want = draft + batch(speculating_target(b, d), v, cd)
    N = int(pn.sum())
    KV = int((pc + pn).sum())
    A = int(sum(n * c + n * (n + 1) // 2 for n, c in pref))
    e = _engine(scenario, drafter)
    assert e._spec_time(gamma, N, KV, A, len(pref), nd, sum(dec)) == pytest.approx(want, rel=1e-9)


@settings(max_examples=examples(60), deadline=None)
@given(scenario=st.sampled_from(AFFINE), width=st.integers(1, 3), gamma=st.integers(1, 8), batch=st.integers(1, 64),
       contexts=st.lists(st.integers(0, 200_000), min_size=1, max_size=40))
def test_the_fused_evaluation_is_the_one_function_over_an_array_of_contexts(scenario, width, gamma, batch, contexts):
    """``spec_iteration_times`` (the serving stretches' fast path: k iterations as one (γ+1)-row evaluation) ==
    ``speculative_iteration`` on ``PassCost.times`` over the same array of total contexts, float for float."""
    _, b, _, d = _deps(scenario, "own")
    d = dataclasses.replace(d, drafting=Drafting(d.drafting.kind, width))
    tc, dc = PassCost(b), PassCost(d)
    ctx = np.sort(np.array(contexts, dtype=float))
    vt = d.drafting.verify_tokens(gamma)
    fused = spec_iteration_times(dc, tc, gamma, float(batch), vt, ctx, width)
    dr, ver = speculative_iteration(tc.times, dc.times, d.drafting, gamma, batch, ctx)
    assert fused is not None and np.array_equal(fused, dr + ver)
    # and each element is the function at that one context (scalar pass times: to rounding, p-norm powers)
    k = len(ctx) // 2
    one = speculative_iteration(tc.time, dc.time, d.drafting, gamma, batch, float(ctx[k]))
    assert fused[k] == pytest.approx(one[0] + one[1], rel=1e-12)
