"""The per-iteration γ policy inside the serving simulator (issue 17): laws.

- a policy that always answers γ reproduces the fixed-γ engine exactly, at any load (its draws are made at
  γ_max and cut to γ per iteration: M_γ = min(M, γ + 1));
- no acceptance -> the goodput policy never drafts; perfect acceptance with free drafting at one user -> it
  always drafts γ_max, producing γ_max + 1 tokens per iteration;
- the policy's choice is the rule's choice at the bucket's context, always within 0..γ_max;
- a configuration with a policy needs a drafting system with γ >= 1.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import simulator.engines.serving.replica as replica_mod
from simulator.cost.cost_model import Drafting
from simulator.engines.gamma_choice import GoodputPolicy, best_goodput, goodput_gamma, iteration_time
from simulator.engines.request_model import Call, RequestSampler
from simulator.engines.serving.engine import Engine, Job
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving import ClosedLoopUsers, PoissonArrivals, simulate_serving
from simulator.engines.serving.metrics import summarize_serving
from simulator.inputs.systems import SystemConfig
from tests.conftest import examples


@pytest.fixture(scope="module")
def cpu():
    rs = load_scenario("cpu-smollm2")
    return rs, rs.deployments("cpu", 1), (rs.scenario.memory_fraction.small, rs.scenario.memory_fraction.base)


def _constant(g):
    return lambda cfg, deps, workload: (lambda *_: g) if cfg.adaptive else None


@pytest.mark.parametrize("system", ["specdecode", "specreason-decode"])
@pytest.mark.parametrize("gamma", [1, 2, 4])
@pytest.mark.parametrize("users", [1, 6])
def test_constant_policy_is_the_fixed_gamma_engine(cpu, monkeypatch, system, gamma, users):
    rs, deps, mf = cpu
    kw = {"threshold": 5} if system == "specreason-decode" else {}
    fixed = SystemConfig(system=system, gamma=gamma, **kw)
    adaptive = SystemConfig(system=system, gamma=5, gamma_policy="goodput", **kw)
    a = simulate_serving(fixed, deps, rs.workload, ClosedLoopUsers(users), 40, 3, mf)
    monkeypatch.setattr(replica_mod, "gamma_policy", _constant(gamma))
    b = simulate_serving(adaptive, deps, rs.workload, ClosedLoopUsers(users), 40, 3, mf)
    cols = ["latency_s", "ttft_s", "output_tokens", "done_at"]
    assert a.requests[cols].equals(b.requests[cols])
    assert b.info["gamma_rounds"].keys() == {gamma}
    assert a.info["gamma_rounds"] == b.info["gamma_rounds"]


def test_adaptive_draws_serve_every_gamma_below_the_max(cpu):
    """The adaptive sampler's draws at γ_max, cut to γ, are the fixed-γ sampler's iterations."""
    rs, _, _ = cpu
    fixed = RequestSampler(SystemConfig(system="specdecode", gamma=2), rs.workload).plans(5, 9)
    adaptive = RequestSampler(SystemConfig(system="specdecode", gamma=6, gamma_policy="goodput"), rs.workload).plans(5, 9)
    for pf, pa in zip(fixed, adaptive):
        for cf, ca in zip(pf.calls, pa.calls):
            assert (cf.spec_cum is None) == (ca.spec_draws is None)
            if cf.spec_cum is None:
                continue
            r = cf.out_tokens - 1
            assert len(ca.spec_draws) == r and ca.spec_draws.min(initial=1) >= 1 and ca.spec_draws.max(initial=1) <= 7
            m = np.minimum(ca.spec_draws.astype(np.int64), 3)
            cum = np.minimum(np.cumsum(m), r)
            n = len(cf.spec_cum)
            assert np.array_equal(cum[:n], cf.spec_cum) and (n == 0 or cf.spec_cum[-1] == r)


def _with_acceptance(rs, a):
    w = rs.workload.model_copy(update={"token_acceptance": list(a)})
    return w


def test_no_acceptance_never_drafts(cpu):
    rs, deps, mf = cpu
    w = _with_acceptance(rs, [0.0] * 6)
    res = simulate_serving(SystemConfig(system="specdecode", gamma=6, gamma_policy="goodput"), deps, w,
                           ClosedLoopUsers(4), 30, 2, mf)
    assert res.info["gamma_rounds"].keys() == {0}
    assert summarize_serving(res)["base_gamma_mean"] == 0.0


def test_perfect_free_drafting_at_one_user_always_drafts_the_max(cpu):
    """α = 1 and prompt lookup (no draft cost): every iteration at γ_max yields γ_max + 1 tokens."""
    rs, deps, mf = cpu
    g = 4
    w = _with_acceptance(rs, [1.0] * g)
    deps = {**deps, "draft": dataclasses.replace(deps["draft"], drafting=Drafting(kind="ngram"))}
    cfg = SystemConfig(system="specdecode", gamma=g, gamma_policy="goodput")
    res = simulate_serving(cfg, deps, w, ClosedLoopUsers(1), 10, 4, mf)
    assert res.info["gamma_rounds"].keys() == {g}
    iters = res.info["gamma_rounds"][g]
    # one call per request: out - 1 tokens after the prefill, γ+1 per iteration (the last one cut)
    need = sum(int(np.ceil((t - 1) / (g + 1))) for t in res.requests.output_tokens)
    assert iters == need


@settings(max_examples=examples(30), deadline=None)
@given(alpha=st.floats(0.0, 1.0), batch=st.integers(1, 64), context=st.integers(0, 20000), gmax=st.integers(1, 8),
       kind=st.sampled_from(["model", "head", "ngram"]), width=st.integers(1, 3))
def test_engine_policy_on_a_decode_only_batch_is_the_rule(alpha, batch, context, gmax, kind, width):
    """On a batch of decoding sequences the engine's iteration time at every γ is the rule's T_iter (one cost
    rule), so the engine's policy picks the rule's γ."""
    rs = load_scenario("cpu-smollm2")
    deps = rs.deployments("cpu", 1)
    draft = dataclasses.replace(deps["draft"], drafting=Drafting(kind=kind, tree_width=width))
    a = alpha ** np.arange(1, gmax + 1)
    pol = GoodputPolicy(a, gmax)
    e = Engine("base", deps["base"], 10**9, 128, draft=draft, gamma=gmax, max_spec_iters=8, gamma_policy=pol)
    for rid in range(batch):
        e._place(Job(rid, Call(1, 1, context, 9, spec_draws=np.ones(8, np.uint8)), kv=context, remaining=8, started=True))
    for g in range(gmax + 1):
        assert e._spec_time(g, 0, 0, 0, 0, batch, batch * context) == pytest.approx(
            iteration_time(deps["base"], draft, batch, context, g), rel=1e-9)
    e.sync_gamma()
    assert e.g_cur == goodput_gamma(deps["base"], draft, a, batch, context, gmax).gamma


@settings(max_examples=examples(40), deadline=None)
@given(times=st.lists(st.floats(1e-4, 1.0), min_size=2, max_size=9), nd=st.integers(1, 64), nf=st.integers(0, 64))
def test_best_goodput_maximises_tokens_per_second(times, nd, nf):
    em = list(np.cumsum([1.0] + [0.5] * (len(times) - 1)))
    g = best_goodput(em, times, nd, nf)
    rate = [(nf + nd * m) / t for m, t in zip(em, times)]
    assert rate[g] == max(rate) and all(rate[h] < rate[g] for h in range(g))


def test_policy_needs_a_drafting_system_with_gamma():
    for kw in ({"system": "specreason", "threshold": 5}, {"system": "specdecode", "gamma": 0},
               {"system": "specdecode"}):
        with pytest.raises(ValidationError, match="gamma_policy"):
            SystemConfig(gamma_policy="goodput", **kw)
    with pytest.raises(ValidationError):
        SystemConfig(system="specdecode", gamma=2, gamma_policy="sometimes")
    assert SystemConfig(system="specdecode", gamma=4, gamma_policy="goodput").label == "specdecode g=auto<=4"


def test_goodput_policy_runs_open_loop(cpu):
    rs, deps, mf = cpu
    cfg = SystemConfig(system="specreason-decode", threshold=5, gamma=4, gamma_policy="goodput")
    res = simulate_serving(cfg, deps, rs.workload, PoissonArrivals(0.5), 40, 1, mf)
    s = summarize_serving(res)
    assert res.requests.done_at.notna().all()
    assert 0.0 <= s["base_gamma_mean"] <= 4.0


def test_cli_gamma_policy(tmp_path, capsys):
    """`specsim capacity --gamma-policy goodput`: every drafting configuration runs adaptive (labelled so);
    a bad policy name or combining it with --best-gamma: one line, exit 2."""
    import pandas as pd

    from specsim_cli.main import main

    out = tmp_path / "c.csv"
    assert main(["simulate", "capacity", "cpu-serve-capacity", "--system", "specdecode", "--system", "vanilla-base", "--gamma", "3",
                 "--users", "4", "--gamma-policy", "goodput", "--requests", "30", "--workers", "1", "--out", str(out)]) == 0
    d = pd.read_csv(out, comment="#")
    assert sorted(d.label) == ["specdecode g=auto<=3", "vanilla-base"]
    assert set(d.gamma_policy) == {"goodput", "fixed"}
    capsys.readouterr()
    for extra in (["--gamma-policy", "sometimes"], ["--gamma-policy", "goodput", "--best-gamma", "--users", "2"]):
        assert main(["simulate", "capacity", "cpu-serve-capacity", *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--gamma-policy" in err[0]
