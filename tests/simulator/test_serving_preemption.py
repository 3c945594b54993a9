"""A call preempted in the middle of its chunked prefill (issue 29's review found it): its first token has not come
yet, so its re-prefill must produce it. Before the fix the call was re-queued as started: its re-prefill produced no
token, so it needed one token more than its draws give (a γ-policy engine indexed past its row: IndexError; a plain
engine decoded one token too many)."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.engines.gamma_choice import GoodputPolicy
from simulator.engines.request_model import Call
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving.engine import Engine


def _engine(kind: str) -> Engine:
    deps = load_scenario("cpu-smollm2").deployments("cpu", 1)
    if kind == "plain":
        return Engine("base", deps["base"], 10**6, 8, token_budget=16)
    pol = GoodputPolicy(0.7 ** np.arange(1, 5), 4) if kind == "policy" else None
    return Engine("base", deps["base"], 10**6, 8, draft=deps["draft"], gamma=4, max_spec_iters=8, token_budget=16,
                  gamma_policy=pol)


def _call(kind: str, out: int) -> Call:
    if kind == "plain":
        return Call(1, 40, 0, out)
    if kind == "policy":
        return Call(1, 40, 0, out, spec_draws=np.full(out - 1, 3, np.uint8))
    cum = np.minimum(np.cumsum(np.full(out - 1, 3)), out - 1)
    return Call(1, 40, 0, out, spec_cum=cum[: int(np.searchsorted(cum, out - 1)) + 1])


@pytest.mark.parametrize("kind", ["plain", "fixed", "policy"])
def test_a_call_preempted_mid_prefill_produces_exactly_its_tokens(kind):
    e = _engine(kind)
    out = 6
    e.submit(0, _call(kind, out))
    e.admit()
    e.round_time()
    first, done = e.advance(1)  # 16 of the 40 prompt tokens: a partial chunk, no token yet
    assert not first and not done and e.pending[e.act[0]] == 24
    e.preempt_youngest()
    assert e.waiting[0].started is False and e.preemptions == 1
    e.admit()
    produced, rounds, firsts = 0, 0, 0
    while e.act:
        s = e.act[0]
        before = e.remaining[s]
        e.round_time()
        k = max(e.rounds_left(), 1) if e.n_prefill == 0 else 1
        first, done = e.advance(k)
        firsts += len(first)
        produced += before - max(e.remaining[s], 0)
        rounds += 1
        assert rounds < 50, "the call never finishes"
        for d in done:
            assert e.remaining[d] <= 0
            e.finish(d)
    assert firsts == 1 and produced == out


def test_a_decoding_call_preempted_recomputes_every_known_token_and_its_re_prefill_samples_the_next():
    """vLLM recomputes a preempted request's prompt and every output token (the last sampled one too, whose KV was
    not written yet), and the re-prefill's last position samples the next token: the call still produces exactly
    its tokens, one of them from the re-prefill, and only one first token."""
    e = Engine("base", load_scenario("cpu-smollm2").deployments("cpu", 1)["base"], 10**6, 8, token_budget=64)
    out = 6
    e.submit(0, Call(1, 40, 0, out))
    e.admit()
    e.round_time()
    first, _ = e.advance(1)  # the whole prompt: the first token
    assert len(first) == 1
    e.round_time()
    e.advance(1)  # one decode: 2 tokens out, 41 written
    s = e.act[0]
    assert e.kv[s] == 41 and e.remaining[s] == out - 2
    e.preempt_youngest()
    assert e.waiting[0].pending == 42  # prompt + both outputs
    e.admit()
    s = e.act[0]
    e.round_time()
    first, done = e.advance(1)  # the re-prefill
    assert not first and e.remaining[s] == out - 3 and e.kv[s] == 42
    rounds = 0
    while e.act:
        e.round_time()
        first, done = e.advance(1)
        assert not first
        for d in done:
            e.finish(d)
        rounds += 1
    assert rounds == out - 3


@pytest.mark.parametrize("kind", ["plain", "fixed", "policy"])
def test_a_call_preempted_while_decoding_produces_exactly_its_tokens(kind):
    """Preempted after its first decoding iteration, a call (plain or speculating) re-prefills every known token,
    gets one token from that re-prefill, and still produces exactly its tokens, with one first token."""
    e = _engine(kind)
    out = 9
    e.submit(0, _call(kind, out))
    e.admit()
    produced, firsts, rounds, preempted = 0, 0, 0, False
    while e.act:
        s = e.act[0]
        before = e.remaining[s]
        e.round_time()
        first, done = e.advance(1)
        firsts += len(first)
        produced += before - max(e.remaining[s], 0)
        rounds += 1
        assert rounds < 60, "the call never finishes"
        if not preempted and e.n_prefill == 0 and e.started[s] and e.remaining[s] < out - 1:
            known = e.kv[s] + 1  # written tokens and the last sampled one
            e.preempt_youngest()
            assert e.waiting[0].pending == known
            e.admit()
            preempted = True
            continue
        for d in done:
            e.finish(d)
    assert preempted and firsts == 1 and produced == out


@pytest.mark.parametrize("capacity, over", [(30, 1), (10**6, 0)])
def test_a_call_larger_than_the_cache_alone_is_admitted_and_counted(capacity, over):
    """A call whose context does not fit the cache even alone runs (the simulation goes on) and is counted; one that
    fits is not. A second call behind the oversized one waits for it (head-of-line) and is not counted."""
    deps = load_scenario("cpu-smollm2").deployments("cpu", 1)
    e = Engine("base", deps["base"], capacity, 8, token_budget=16)
    e.submit(0, Call(1, 40, 0, 4))
    e.submit(1, Call(1, 8, 0, 4))
    e.admit()
    assert len(e.act) == (1 if over else 2) and e.over_capacity == over
