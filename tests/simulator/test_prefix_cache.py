"""Prefix caching in the serving engines (simulator/engines/serving/prefix_cache.py): laws on random workloads and on the
cache alone. Small CPU scenario; no timings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.cost.execution import Execution
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving import PoissonArrivals, simulate_serving
from simulator.engines.serving.bench_workload import ServingWorkload
from simulator.studies.serve_workload import simulate_workload
from simulator.engines.serving.metrics import summarize_serving
from simulator.engines.serving.prefix_cache import PrefixCache
from simulator.inputs.systems import SystemConfig
from tests.conftest import examples

SPECREASON = SystemConfig(system="specreason", threshold=5)


@pytest.fixture(scope="module")
def cpu():
    rs = load_scenario("cpu-smollm2")
    return rs, rs.deployments("cpu", 1), (rs.scenario.memory_fraction.small, rs.scenario.memory_fraction.base)


def _wl(n_prompts=1, prefix=384, new=64, out=16, rate=1.0, requests=60, **kw) -> ServingWorkload:
    d = {"input_tokens": {"kind": "uniform", "tokens": new, "range_ratio": 0.5},
         "output_tokens": {"kind": "fixed", "tokens": out}, "request_rate": rate, "num_prompts": requests, **kw}
    if n_prompts:
        d["system_prompts"] = {"count": n_prompts, "tokens": prefix}
    return ServingWorkload.model_validate(d)


def _run(cpu, sw, on=True, block=16, seed=0, mf=None):
    rs, deps, mf0 = cpu
    return simulate_workload(sw, deps, rs.workload, seed=seed, memory_fraction=mf or mf0,
                             execution=Execution(prefix_caching=on, prefix_cache_block=block))


@settings(max_examples=examples(12), deadline=None)
@given(n_prompts=st.integers(0, 4), block=st.sampled_from([1, 16, 128]), rate=st.floats(0.2, 4.0),
       seed=st.integers(0, 2**31))
def test_hit_rate_is_a_rate_and_counts_every_prompt_token(cpu, n_prompts, block, rate, seed):
    sw = _wl(n_prompts=n_prompts, rate=rate, requests=30)
    res = _run(cpu, sw, block=block, seed=seed)
    s = summarize_serving(res)
    assert 0.0 <= s["prefix_cache_hit_rate"] <= 1.0
    assert 0.0 <= s["prefix_cache_block_hit_rate"] <= 1.0 or np.isnan(s["prefix_cache_block_hit_rate"])  # no full block
    plans, _, _ = sw.plans(30, seed)
    assert s["prefix_cache_queries_tokens"] == sum(p.calls[0].new_tokens for p in plans)
    if n_prompts == 0:
        assert s["prefix_cache_hits_tokens"] == 0


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 2**31), rate=st.floats(0.2, 3.0))
def test_without_shared_prefixes_caching_on_and_off_agree(cpu, seed, rate):
    """One call per request and nothing shared: the cache has nothing to give, so every figure is the same."""
    sw = _wl(n_prompts=0, rate=rate, requests=40)
    a, b = _run(cpu, sw, True, seed=seed).requests, _run(cpu, sw, False, seed=seed).requests
    assert a.drop(columns="stop_reason").equals(b.drop(columns="stop_reason"))


def test_per_request_caching_is_what_on_and_off_differ_by(cpu):
    """A multi-call system without shared prefixes: on, a request's calls reuse its own prefix; off, every call
    re-prefills its context, in the serving engine and in the single-request engines alike (at low load the
    serving latency is the analytic one either way, tests/simulator/test_serving.py's law)."""
    from simulator.engines.analytic import CostVectors, chain_for, predict_point
    from simulator.cost.cost_tables import CostTables

    rs, deps, mf = cpu
    lat = {}
    for on in (True, False):
        ex = Execution(prefix_caching=on)
        tb = CostTables(deps["base"], deps["small"], deps["draft"], rs.workload, None, execution=ex)
        want = predict_point(SPECREASON, chain_for(SPECREASON, rs.workload, {}), CostVectors(tb))["latency_s"]
        res = simulate_serving(SPECREASON, deps, rs.workload, PoissonArrivals(1e-4 / want), 200, 7, mf, execution=ex)
        x = res.requests.latency_s.to_numpy()
        assert abs(x.mean() - want) < 4 * x.std(ddof=1) / np.sqrt(len(x)), (on, x.mean(), want)
        s = summarize_serving(res)
        assert (s["prefix_cache_hit_rate"] > 0.5) if on else (s["prefix_cache_hits_tokens"] == 0)
        lat[on] = want
    assert lat[False] > lat[True]


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 2**31), more=st.integers(2, 6), block=st.sampled_from([1, 16]))
def test_more_sharing_never_prefills_more(cpu, seed, more, block):
    """Fewer distinct system prompts (the same lengths otherwise) never raise the tokens prefilled, with room
    for every prompt in the cache (the default split holds them)."""
    few = summarize_serving(_run(cpu, _wl(n_prompts=1, requests=40), block=block, seed=seed))
    many = summarize_serving(_run(cpu, _wl(n_prompts=more, requests=40), block=block, seed=seed))
    pre = lambda s: s["prefix_cache_queries_tokens"] - s["prefix_cache_hits_tokens"]  # noqa: E731
    assert few["prefix_cache_queries_tokens"] == many["prefix_cache_queries_tokens"]
    assert pre(few) <= pre(many)


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 2**31), n_prompts=st.integers(1, 30), rate=st.floats(1.0, 20.0))
def test_kv_never_exceeds_capacity_under_eviction(cpu, seed, n_prompts, rate):
    """Many distinct prompts in a small KV cache: entries are evicted, and the KV in use (running sequences +
    cached prefixes) stays within capacity."""
    res = _run(cpu, _wl(n_prompts=n_prompts, prefix=512, rate=rate, requests=40), seed=seed, mf=(0.1, 0.3))
    tl = res.timeline[res.timeline.engine == "base"]
    assert (tl.kv_used_tokens <= tl.kv_capacity_tokens).all()


def test_shared_system_prompt_lowers_ttft(cpu):
    sw = _wl(n_prompts=1, prefix=448, new=64, rate=0.5, requests=60)
    on, off = (summarize_serving(_run(cpu, sw, v)) for v in (True, False))
    assert on["prefix_cache_hit_rate"] > 0.7
    assert on["mean_ttft_ms"] < 0.6 * off["mean_ttft_ms"]


def test_session_turns_hit_their_history(cpu):
    sw = ServingWorkload.model_validate({
        "input_tokens": {"kind": "fixed", "tokens": 40}, "output_tokens": {"kind": "fixed", "tokens": 20},
        "system_prompts": {"count": 1, "tokens": 100}, "sessions": {"turns": {"kind": "fixed", "tokens": 4},
                                                                   "think_time_s": 1.0},
        "request_rate": 0.2, "num_prompts": 5})
    plans, sessions, think = sw.plans(5, 0)
    assert len(plans) == 20 and [len(s) for s in sessions] == [4] * 5
    # turn k's prompt: system prompt + k earlier (message + answer) + its message
    assert [p.calls[0].new_tokens for p in plans[:4]] == [140, 200, 260, 320]
    s = summarize_serving(_run(cpu, sw, block=1))
    # every turn but the first of each session hits its history (less the last answer token, never written)
    first_hits = 4 * 100  # sessions 2..5 hit the system prompt
    later_hits = 5 * sum(100 + 60 * k - 1 for k in (1, 2, 3))
    assert s["prefix_cache_hits_tokens"] == first_hits + later_hits
    res = _run(cpu, sw, block=1)
    r = res.requests.set_index("request")
    for ids in sessions:  # a turn is sent after the previous one's answer and its think time
        for a, b in zip(ids, ids[1:]):
            assert r.arrival_at[b] >= r.done_at[a] + think[b] - 1e-9


@settings(max_examples=examples(40), deadline=None)
@given(ops=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 300), st.integers(0, 300)), min_size=1, max_size=40),
       block=st.sampled_from([1, 16]), cap=st.integers(200, 2000))
def test_cache_bookkeeping(ops, block, cap):
    """The cache alone: tokens = the sum of its entries, held nodes are never evicted, evicting stops at the
    room asked for, a hit never exceeds the context less one token and is whole blocks."""
    pc = PrefixCache(block)
    for rid, (sp, plen, new) in enumerate(ops):
        prefix = ((("sys", sp), plen),)
        total = plen + new
        own, cut = pc.take_own(rid)
        kept, cached = pc.match(prefix, own, 0, total, cut)
        assert 0 <= kept <= max(total - 1, 0) and kept % block == 0 and cached <= plen
        paths = pc.hold(prefix)
        free = cap - pc.tokens
        out = pc.evict(free, cap // 2)
        assert all(p in pc.nodes for p in pc.held)
        assert out == 0 or free + out - (cap // 2) < block  # stops within a block of the room asked for
        pc.place(prefix, paths, kept, total)
        if rid % 3 == 0:
            pc.keep(rid, new, None, paths)
        pc.release(paths)
        assert pc.tokens == sum(pc.nodes.values()) + sum(v for k, v in pc.lru.items() if type(k) is not tuple)
        assert pc.lru_tokens == sum(pc.lru.values())
        assert not pc.held
    assert 0 <= pc.hit_tokens <= pc.query_tokens


@pytest.mark.parametrize("evicted", [False, True, "tail"])
def test_a_preempted_call_rehits_what_it_wrote(cpu, evicted):
    """vLLM V1 frees a preempted request's blocks with their hashes: placed again, it re-prefills only what was
    evicted meanwhile (its tail, or everything if its entry went) and the token it had sampled last, and its lookup
    is not counted as a new query."""
    from simulator.engines.request_model import Call
    from simulator.engines.serving.engine import Engine

    _rs, deps, _mf = cpu
    e = Engine("base", deps["base"], 10**6, 8)
    e.submit(0, Call(1, 40, 0, 10))
    e.admit()
    e.advance(1)  # the prefill (first token)
    e.advance(3)  # three decodes
    s = e.act[0]
    kv = e.kv[s]
    assert kv == 43
    e.preempt_youngest()
    assert e.cache_tokens == kv and e.pinned == 0
    if evicted == "tail":
        assert e.pcache.evict(0, 20) == 20 and e.cache_tokens == kv - 20
    elif evicted:
        e.pcache.evict(0, 10**9)
    e.admit()
    s = e.act[0]
    # it recomputes every token it knows: the 43 it wrote and the last one it sampled (not written yet)
    want = {False: (kv, 1), True: (0, kv + 1), "tail": (kv - 20, 21)}[evicted]
    assert (e.kv[s], e.pending[s]) == want
    assert e.pcache.query_tokens == 40 and e.pcache.hit_tokens == 0
    assert e.pinned + e.cache_tokens == kv + 1  # its whole known context, pinned for its re-prefill


def test_closed_loop_users_run_sessions_one_after_another(cpu):
    sw = ServingWorkload.model_validate({
        "input_tokens": {"kind": "fixed", "tokens": 30}, "output_tokens": {"kind": "fixed", "tokens": 10},
        "sessions": {"turns": {"kind": "fixed", "tokens": 3}}, "num_prompts": 6}).at_load(users=2)
    res = _run(cpu, sw, block=1)
    r = res.requests.sort_values("arrival_at")
    assert len(r) == 18
    # never more than 2 requests in the system: at any arrival, at most one other is unfinished
    for t in r.arrival_at:
        assert ((r.arrival_at <= t) & (r.done_at > t + 1e-9)).sum() <= 2
    s = summarize_serving(res)
    assert s["prefix_cache_hits_tokens"] == 6 * sum(40 * k - 1 for k in (1, 2))
