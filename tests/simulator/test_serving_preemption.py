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
