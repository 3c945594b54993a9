"""Engine 2 -- discrete-event simulation (SimPy) of requests, step by step.

Models one request at a time on a set of GPUs shared by the colocated base and small
engines: every engine call holds the GPU resource for its duration, so the models take
turns (as in the reference system). Each request follows the chain of ``simulator.chain``:
step lengths, scores, answer events and speculative-decoding acceptances are sampled with
an explicit ``numpy.random.Generator``; every duration comes from the same
:class:`~simulator.cost_tables.CostTables` the analytic engine sums, so the two engines
agree in expectation (tested).

Returns per-request and per-step pandas DataFrames.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import simpy
from scipy import stats

from simulator.cost_tables import COMPONENTS, CostTables
from simulator.speculative import tokens_per_iteration_pmf
from simulator.systems import USES_GAMMA, SystemConfig
from simulator.workload import answer_hazard

VANILLA = ("vanilla-base", "vanilla-small", "specdecode")


@dataclass
class _Request:
    comp: dict = field(default_factory=lambda: dict.fromkeys(COMPONENTS, 0.0))
    iterations: int = 0
    spec_tokens: int = 0
    answer_s: float = 0.0

    def add(self, key: str, seconds: float) -> float:
        self.comp[key] += float(seconds)
        return float(seconds)


class RequestSimulator:
    """Samples one request of a system configuration; durations from the cost tables."""

    def __init__(self, cfg: SystemConfig, tables: CostTables, rng: np.random.Generator):
        self.cfg, self.tb, self.rng = cfg, tables, rng
        w = tables.workload
        self.w = w
        self.n_max = w.max_steps() + 1
        self.h_small = answer_hazard(w.steps_pmf_small, self.n_max)
        self.h_base = answer_hazard(w.steps_pmf_base, self.n_max)
        self.q_scores = np.asarray(w.scores)
        if cfg.gamma:
            self.m_pmf = tokens_per_iteration_pmf(w.acceptance_per_position(cfg.gamma))

    # ---- building blocks ------------------------------------------------------------------
    def spec_segment(self, r: _Request, x0: int, tokens: int) -> tuple[float, float]:
        """Speculative iterations producing ``tokens`` tokens from context x0: (draft_s, verify_s)."""
        if tokens <= 0:
            return 0.0, 0.0
        inc = self.rng.choice(len(self.m_pmf), size=tokens, p=self.m_pmf) + 1
        offsets = np.concatenate([[0], np.cumsum(inc)[:-1]])
        g = offsets[offsets < tokens]
        r.iterations += len(g)
        r.spec_tokens += int(np.minimum(inc[: len(g)], tokens - g).sum())
        return float(self.tb.draft_iter[x0 + g].sum()), float(self.tb.verify_iter[x0 + g].sum())

    def base_generate(self, r: _Request, t: int, k: int, first_call: bool) -> float:
        """One base-model call writing k tokens at thinking tokens t (speculatively with a draft)."""
        P = self.w.prompt_tokens
        s = r.add("call_overhead_s", self.tb.call_s)
        new, cached = (P, 0) if first_call else (1, P + t)
        s += r.add("base_prefill_s", self.tb.prefill("base", new, cached))
        if self.cfg.system in USES_GAMMA:
            s += r.add("draft_s", self.tb.prefill("draft", new, cached))
            d, v = self.spec_segment(r, P + t + 1, k - 1)
            s += r.add("draft_s", d) + r.add("verify_s", v)
        else:
            s += r.add("base_decode_s", self.tb.decode_sum("base", P + t, k))
        return s

    def small_generate(self, r: _Request, t: int, k: int, first_call: bool) -> float:
        """One small-model call writing k tokens at thinking tokens t (vanilla-small step by step)."""
        P = self.w.prompt_tokens
        new, cached = (P + t, 0) if first_call else (1, P + t)
        s = r.add("call_overhead_s", self.tb.call_s) + r.add("small_prefill_s", self.tb.prefill("small", new, cached))
        return s + r.add("small_decode_s", self.tb.decode_sum("small", P + t, k))

    def answer_call(self, r: _Request, t: int, who: str = "base") -> float:
        """The answer call after the chain: 1 new token on the cached chain, then the answer."""
        w, P = self.w, self.w.prompt_tokens
        if who == "small":
            return self.small_generate(r, t, w.answer_tokens, first_call=False)
        s = r.add("call_overhead_s", self.tb.call_s) + r.add("base_prefill_s", self.tb.prefill("base", 1, P + t))
        if self.cfg.system in USES_GAMMA:
            s += r.add("draft_s", self.tb.prefill("draft", 1, P + t))
            d, v = self.spec_segment(r, P + t + 1, w.answer_tokens - 1)
            s += r.add("draft_s", d) + r.add("verify_s", v)
        else:
            s += r.add("base_decode_s", self.tb.decode_sum("base", P + t, w.answer_tokens))
        return s

    def sample_chain_step(self, j: int, t: int, who: str) -> tuple[int, bool]:
        k = int((self.w.step_pmf_small if who == "small" else self.w.step_pmf_base).sample(self.rng))
        h = (self.h_small if who == "small" else self.h_base)
        ends = self.rng.random() < (h[j] if j < len(h) else 1.0)
        return k, ends

    def stop_reason(self, answer_found: bool, thinking_tokens: int) -> str | None:
        """Checked between steps: the answer ends the request first, then the token budget."""
        if answer_found:
            return "answer"
        return "budget" if thinking_tokens >= self.w.token_budget else None

    # ---- whole requests ---------------------------------------------------------------------
    def vanilla(self, rid: int):
        """vanilla-base, vanilla-small, specdecode: one call over the whole chain (the default execution)."""
        cfg, w, P = self.cfg, self.w, self.w.prompt_tokens
        who = "small" if cfg.system == "vanilla-small" else "base"
        t, j, steps = 0, 0, []
        while True:
            k, ends = self.sample_chain_step(j, t, who)
            steps.append({"request": rid, "step": j, "proposer": who, "kept_tokens": k, "context_tokens": P + t})
            t += k
            j += 1
            stop = self.stop_reason(ends, t)
            if stop:
                break
        total = min(t, w.token_budget) + w.answer_tokens
        r = _Request()
        r.add("call_overhead_s", self.tb.call_s)
        if cfg.system == "specdecode":
            r.add("base_prefill_s", self.tb.prefill("base", P, 0))
            r.add("draft_s", self.tb.prefill("draft", P, 0))
            d, v = self.spec_segment(r, P + 1, total - 1)
            r.add("draft_s", d)
            r.add("verify_s", v)
        else:
            r.add(f"{who}_prefill_s", self.tb.prefill(who, P, 0))
            r.add(f"{who}_decode_s", self.tb.decode_sum(who, P, total))
        return r, steps, stop, min(t, w.token_budget)

    def specreason(self, rid: int, gpu_hold):
        """SpecReason(+Decode): generator yielding the duration of each engine call."""
        cfg, w, P, J = self.cfg, self.w, self.w.prompt_tokens, self.w.judge_template_tokens
        spec = cfg.system == "specreason-decode"
        r, steps = _Request(), []
        t, j, prev_regen = 0, 0, 0
        while True:
            rec = {"request": rid, "step": j, "context_tokens": P + t, "small_tokens": 0, "score": np.nan,
                   "accepted": False, "base_tokens": 0, "small_s": 0.0, "scoring_s": 0.0, "base_s": 0.0}
            if j < cfg.first_n:
                k, ends = self.sample_chain_step(j, t, "base")
                rec["base_s"] = self.base_generate(r, t, k, first_call=(j == 0))
                yield from gpu_hold(rec["base_s"])
                rec.update(proposer="base", base_tokens=k, kept_tokens=k)
                prev_regen = 0
            else:
                # small model proposes (prefill: first call / catch-up on a regenerated step / 1 token)
                ks, ends_s = self.sample_chain_step(j, t, "small")
                if j == cfg.first_n:
                    pre = self.tb.prefill("small", P + t, 0)
                elif prev_regen:
                    pre = self.tb.prefill("small", prev_regen, P + t - prev_regen)
                else:
                    pre = self.tb.prefill("small", 1, P + t)
                s = r.add("call_overhead_s", self.tb.call_s) + r.add("small_prefill_s", pre)
                s += r.add("small_decode_s", self.tb.decode_sum("small", P + t, ks))
                rec["small_s"] = s
                yield from gpu_hold(s)
                # base model scores the step in one prefill pass
                new, cached = (P + ks + J, 0) if j == 0 else (ks + J, P + t)
                s = r.add("call_overhead_s", self.tb.call_s) + r.add("scoring_s", self.tb.prefill("base", new, cached))
                if spec:
                    s += r.add("draft_s", self.tb.prefill("draft", new, cached))
                rec["scoring_s"] = s
                yield from gpu_hold(s)
                score = int(self.rng.choice(10, p=self.q_scores))
                accepted = score >= cfg.threshold
                rec.update(small_tokens=ks, score=score, accepted=accepted)
                if accepted:
                    k, ends, prev_regen = ks, ends_s, 0
                    rec.update(proposer="small", kept_tokens=ks)
                else:
                    k, ends = self.sample_chain_step(j, t, "base")
                    rec["base_s"] = self.base_generate(r, t, k, first_call=False)
                    yield from gpu_hold(rec["base_s"])
                    rec.update(proposer="base", base_tokens=k, kept_tokens=k)
                    prev_regen = k
            rec["step_s"] = rec["small_s"] + rec["scoring_s"] + rec["base_s"]
            steps.append(rec)
            t += k
            j += 1
            stop = self.stop_reason(ends, t)
            if stop:
                break
        if w.answer_tokens > 0:
            r.answer_s = self.answer_call(r, t)
            yield from gpu_hold(r.answer_s)
        return r, steps, stop, t

    def stepwise(self, rid: int, gpu_hold):
        """vanilla-base, vanilla-small, specdecode step by step (``execution.step_calls``): one call
        per step on the cached chain, then the answer call; a generator like :meth:`specreason`."""
        w, P = self.w, self.w.prompt_tokens
        who = "small" if self.cfg.system == "vanilla-small" else "base"
        gen = self.small_generate if who == "small" else self.base_generate
        r, steps = _Request(), []
        t, j = 0, 0
        while True:
            k, ends = self.sample_chain_step(j, t, who)
            s = gen(r, t, k, first_call=(j == 0))
            yield from gpu_hold(s)
            steps.append({"request": rid, "step": j, "context_tokens": P + t, "proposer": who, "kept_tokens": k,
                          "small_tokens": k if who == "small" else 0, "score": np.nan, "accepted": who == "small",
                          "base_tokens": k if who == "base" else 0, "small_s": s if who == "small" else 0.0,
                          "scoring_s": 0.0, "base_s": s if who == "base" else 0.0, "step_s": s})
            t += k
            j += 1
            stop = self.stop_reason(ends, t)
            if stop:
                break
        if w.answer_tokens > 0:
            r.answer_s = self.answer_call(r, t, who)
            yield from gpu_hold(r.answer_s)
        return r, steps, stop, t


def simulate(cfg: SystemConfig, tables: CostTables, n_requests: int, seed: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Run ``n_requests`` sequential requests; returns (requests, steps) DataFrames."""
    rng = np.random.default_rng(seed)
    env = simpy.Environment()
    gpus = simpy.Resource(env, capacity=1)  # colocated engines take turns on the same GPUs
    sim = RequestSimulator(cfg, tables, rng)
    req_rows, step_rows = [], []

    def gpu_hold(seconds: float):
        with gpus.request() as req:
            yield req
            yield env.timeout(seconds)

    def one_request(rid: int):
        start = env.now
        if cfg.system in VANILLA and tables.execution.step_calls:
            r, steps, stop, think = yield from sim.stepwise(rid, gpu_hold)
        elif cfg.system in VANILLA:
            r, steps, stop, think = sim.vanilla(rid)
            yield from gpu_hold(sum(r.comp.values()))
        else:
            r, steps, stop, think = yield from sim.specreason(rid, gpu_hold)
        small_kept = sum(1 for s in steps if s.get("proposer") == "small")
        req_rows.append({
            "request": rid, "latency_s": env.now - start, "steps": len(steps), "small_steps": small_kept,
            "thinking_tokens": think, "stop_reason": stop, "iterations": r.iterations,
            "spec_tokens": r.spec_tokens, "answer_s": r.answer_s, **r.comp,
        })
        step_rows.extend(steps)

    def driver():
        for rid in range(n_requests):
            yield env.process(one_request(rid))

    env.process(driver())
    env.run()
    return pd.DataFrame(req_rows), pd.DataFrame(step_rows)


def summarize(requests: pd.DataFrame, level: float = 0.99) -> dict:
    """Mean, percentiles and a t-interval for the mean latency; component means."""
    lat = requests["latency_s"].to_numpy()
    n = len(lat)
    se = lat.std(ddof=1) / np.sqrt(n) if n > 1 else np.nan
    half = stats.t.ppf(0.5 + level / 2, n - 1) * se if n > 1 else np.nan
    out = {
        "latency_s": float(lat.mean()), "latency_p50_s": float(np.percentile(lat, 50)),
        "latency_p90_s": float(np.percentile(lat, 90)), "latency_p99_s": float(np.percentile(lat, 99)),
        "ci_low_s": float(lat.mean() - half), "ci_high_s": float(lat.mean() + half), "ci_level": level,
        "small_step_fraction": float(requests["small_steps"].sum() / requests["steps"].sum()),
        "thinking_tokens": float(requests["thinking_tokens"].mean()),
        "steps": float(requests["steps"].mean()),
        "measured_acceptance_length": float(requests["spec_tokens"].sum() / requests["iterations"].sum())
        if requests["iterations"].sum() > 0 else np.nan,
        "requests": n,
    }
    for c in COMPONENTS:
        out[c] = float(requests[c].mean())
    return out
