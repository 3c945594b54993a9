"""Engine 1 -- closed-form expected latency with a per-component breakdown.

E[latency] = sum over call kinds of <occupancy, cost vector>: the chain DP
(``simulator.engines.chain``) gives, for every kind of engine call, the expected mass at each
thinking-token count t; the cost vectors give the expected cost of that call at t, already
averaged over the step length K (independent of t by assumption):

    decode part:   sum_{i>=1} P(K > i) T_dec(P + t + i)                         (a correlation)
    speculative:   sum_{g>=0} u(g) P(K > g + 1) [sum_{i<gamma} T_dec^draft(x_g + i) + T_ver(x_g)],
                   x_g = P + t + 1 + g, u the renewal occupancy of ``speculative.iteration_occupancy``
    scoring:       sum_k P(K_s = k) T_fwd^base(k + J, P + t)
    small catch-up after a regenerated step of K_b tokens (charged to the base step):
                   sum_k P(K_b = k) 1[t + k < B] (T_pre^small(k, P + t) - T_pre^small(1, P + t + k))

P: prompt tokens, J: judge template tokens, B: token budget. Vanilla systems and specdecode are
one call over the whole chain, or (``execution.step_calls``) the chain with q = 0, first_n = inf
(base steps) / q = 1 without scoring (vanilla-small), one call per step plus the answer call.
Every prefill cost comes from ``CostTables.prefill`` (block prefix caching included). The whole grid shares the DP per
(threshold, first_n) and the cost vectors per (hardware, TP) and per gamma, so a grid of
gamma x threshold x TP x hardware costs a few dot products per point.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, wraps

import numpy as np

from simulator.engines.chain import ChainOccupancy, run_chain, run_chains
from simulator.cost.cost_tables import COMPONENTS, CostTables
from simulator.engines.speculative import expected_tokens_per_iteration, iteration_occupancy
from simulator.inputs.systems import SystemConfig


def _corr(values: np.ndarray, start: int, weights: np.ndarray, n: int) -> np.ndarray:
    """out[t] = sum_i weights[i] values[start + t + i], t = 0..n-1."""
    seg = values[start : start + n + len(weights) - 1]
    if len(seg) < n + len(weights) - 1:
        seg = np.concatenate([seg, np.full(n + len(weights) - 1 - len(seg), values[-1])])
    from scipy.signal import correlate  # heavy import, paid only by the analytic engine

    return correlate(seg, weights, mode="valid", method="fft")


class PrefillRows:
    """Prefill costs ``tables.prefill(who, n, c0 + t)``, t = 0..nc-1, for sets of new-token counts n: each row is
    computed once (one vectorised cost-model call for all the rows a request lacks) and kept, so the problems of a
    mixture and the gammas of one hardware/TP share the rows of the step lengths they have in common."""

    def __init__(self, tables: CostTables):
        self.tables = tables
        self._rows: dict[tuple, dict[int, np.ndarray]] = {}

    def __call__(self, who: str, ns, c0: int, nc: int) -> np.ndarray:
        """Matrix [i, t] = prefill(who, ns[i], c0 + t)."""
        ns = [int(n) for n in ns]
        have = self._rows.setdefault((who, int(c0), int(nc)), {})
        todo = sorted(set(ns) - set(have))
        if todo:
            c = c0 + np.arange(nc)
            mat = np.broadcast_to(self.tables.prefill(who, np.asarray(todo)[:, None], c[None, :]), (len(todo), nc))
            have.update(zip(todo, mat))
        return np.stack([have[n] for n in ns]) if ns else np.zeros((0, nc))


def _gamma_free(fn):
    """A cost vector that does not depend on gamma: read from ``shared`` (the same problem's vectors for
    another gamma on the same deployments) when there is one, so a grid computes it once per hardware/TP."""
    name = fn.__name__

    @wraps(fn)
    def get(self):
        return getattr(self.shared, name) if self.shared is not None else fn(self)

    return cached_property(get)


@dataclass
class CostVectors:
    """Expected cost of each call kind as a function of thinking tokens t (one hardware/TP/gamma, one
    problem of the workload: ``workload`` defaults to the tables' own). ``shared``: vectors of the same
    problem on the same deployments and execution (any gamma) whose gamma-independent vectors are reused;
    ``rows``: a :class:`PrefillRows` of the same deployments and execution, shared across problems."""

    tables: CostTables
    workload: object = None
    shared: "CostVectors | None" = None
    rows: PrefillRows | None = None

    def __post_init__(self):
        w = self.workload = self.workload if self.workload is not None else self.tables.workload
        if self.shared is not None and self.shared.tables.base != self.tables.base:
            self.shared = None  # another base engine (one speculating with a draft model runs without async): rebuild
        if self.rows is None:
            self.rows = self.shared.rows if self.shared is not None else PrefillRows(self.tables)
        self.P, self.J, self.B, self.A = w.prompt_tokens, w.judge_template_tokens, w.token_budget, w.answer_tokens
        self.t = np.arange(self.B)
        self.t_end = np.arange(self.B + w.max_step_tokens)
        self.ps, self.pb = w.step_pmf_small, w.step_pmf_base
        self.sf_s = self.ps.survival(w.max_step_tokens + 2)
        self.sf_b = self.pb.survival(w.max_step_tokens + 2)

    # ---- gamma-independent vectors -------------------------------------------------------------
    @_gamma_free
    def small_decode(self):
        return _corr(self.tables.dec_small, self.P + 1, self.sf_s[1:], self.B)

    @_gamma_free
    def base_decode(self):
        return _corr(self.tables.dec_base, self.P + 1, self.sf_b[1:], self.B)

    @_gamma_free
    def small_prefill_first(self):
        return self.tables.prefill("small", self.P + self.t, 0)

    @_gamma_free
    def small_prefill_rest(self):
        return self.tables.prefill("small", 1, self.P + self.t)

    @_gamma_free
    def small_catchup_charge(self):
        ks = np.asarray(self.pb.support)
        # after[t + k] = T_pre^small(1, P + t + k): the next step's prefill that the catch-up replaces
        after = self.rows("small", [1], self.P, self.B + int(ks.max()))[0]
        extra = self.rows("small", ks, self.P, self.B) - after[self.t[None, :] + ks[:, None]]
        return np.asarray(self.pb.probs) @ np.where(self.t[None, :] + ks[:, None] < self.B, extra, 0.0)

    def _score(self, who: str):
        ks, p = np.asarray(self.ps.support), np.asarray(self.ps.probs)
        rest = p @ self.rows(who, ks + self.J, self.P, self.B)
        prompt = float(p @ np.broadcast_to(self.tables.prefill(who, self.P + ks + self.J, 0), ks.shape))
        return rest, prompt

    @_gamma_free
    def score(self):
        return self._score("base")

    @_gamma_free
    def draft_score(self):
        """In SpecReason+Decode the draft inside the base engine prefills the scoring prompt too."""
        return self._score("draft")

    @_gamma_free
    def base_prefill(self):
        return self.tables.prefill("base", 1, self.P + self.t)

    @_gamma_free
    def base_prompt_prefill(self) -> float:
        return float(self.tables.prefill("base", self.P, 0))

    def _answer_prefill(self, who: str):
        return self.tables.prefill(who, 1, self.P + self.t_end) if self.A > 0 else np.zeros(len(self.t_end))

    def _answer_decode(self, cum: np.ndarray):
        x = self.P + self.t_end
        return cum[x + self.A] - cum[x + 1] if self.A > 1 else np.zeros(len(self.t_end))

    @_gamma_free
    def answer_prefill(self):
        return self._answer_prefill("base")

    @_gamma_free
    def answer_decode(self):
        return self._answer_decode(self.tables.cum_base)

    @_gamma_free
    def small_answer_prefill(self):
        """vanilla-small step by step: the small model writes the answer."""
        return self._answer_prefill("small")

    @_gamma_free
    def small_answer_decode(self):
        return self._answer_decode(self.tables.cum_small)

    # ---- gamma-dependent vectors ----------------------------------------------------------------
    @cached_property
    def occupancy_u(self):
        w = self.workload
        a = w.acceptance_per_position(self.tables.gamma)
        return iteration_occupancy(a, w.max_step_tokens + w.answer_tokens + w.token_budget + 2)

    def _spec(self, weights: np.ndarray, start: int, n: int):
        """(draft, verify) sums of iterations with occupancy weights over offsets g."""
        return (_corr(self.tables.draft_iter, start, weights, n), _corr(self.tables.verify_iter, start, weights, n))

    @cached_property
    def base_spec(self):
        k = len(self.sf_b) - 1
        return self._spec(self.occupancy_u[:k] * self.sf_b[1:], self.P + 1, self.B)

    @cached_property
    def answer_spec(self):
        if self.A <= 1:
            z = np.zeros(len(self.t_end))
            return z, z
        return self._spec(self.occupancy_u[: self.A - 1], self.P + 1, len(self.t_end))

    @_gamma_free
    def draft_prefill(self):
        return self.tables.prefill("draft", 1, self.P + self.t)

    @_gamma_free
    def draft_prefill_end(self):
        return self.tables.prefill("draft", 1, self.P + self.t_end)

    @_gamma_free
    def draft_prompt_prefill(self) -> float:
        return float(self.tables.prefill("draft", self.P, 0))


def chain_key(cfg: SystemConfig, workload) -> tuple[float, float]:
    """(keep-probability q, first_n) of a system's step policy on one problem."""
    spec = cfg.spec
    if spec.chain == "base":
        return (0.0, np.inf)
    if spec.chain == "small":
        return (1.0, 0)
    return (workload.acceptance_probability(cfg.threshold), cfg.first_n)


def chain_for(cfg: SystemConfig, workload, cache: dict) -> ChainOccupancy:
    """The DP for a system's step policy on one problem, memoised on (q, first_n)."""
    key = chain_key(cfg, workload)
    if key not in cache:
        cache[key] = run_chain(workload, *key)
    return cache[key]


class MixturePredictor:
    """The analytic engine over a workload mixture: per problem its chains (all configurations' chains
    in one DP pass per problem) and cost vectors; a configuration's prediction is the expectation over
    the problems (ratios such as the kept-step share are ratios of expectations, as the DES reports)."""

    def __init__(self, workload):
        self.workload = workload
        self.components = workload.components()
        self.chains: list[dict] = [{} for _ in self.components]

    def prepare(self, configs) -> None:
        """Run the DP once per problem for every (q, first_n) the configurations need."""
        for (_, w), cache in zip(self.components, self.chains):
            keys = sorted({chain_key(c, w) for c in configs} - set(cache))
            if keys:
                for k, occ in zip(keys, run_chains(w, [k[0] for k in keys], [k[1] for k in keys])):
                    cache[k] = occ

    def vectors(self, tables: CostTables, shared: list[CostVectors] | None = None) -> list[CostVectors]:
        """Cost vectors per problem; ``shared``: the problems' vectors on the same deployments and execution
        for another gamma (their gamma-independent vectors are reused)."""
        if shared is not None:
            return [CostVectors(tables, w, shared=v) for (_, w), v in zip(self.components, shared)]
        rows = PrefillRows(tables)
        return [CostVectors(tables, w, rows=rows) for _, w in self.components]

    def per_problem(self, cfg: SystemConfig, vectors: list[CostVectors]) -> list[dict]:
        return [predict_point(cfg, chain_for(cfg, w, cache), v)
                for (_, w), cache, v in zip(self.components, self.chains, vectors)]

    def predict(self, cfg: SystemConfig, vectors: list[CostVectors]) -> dict:
        parts = self.per_problem(cfg, vectors)
        return combine(parts, [p for p, _ in self.components])


def combine(parts: list[dict], weights) -> dict:
    """Expectation over problems: means of additive quantities, ratio of expectations for shares."""
    if len(parts) == 1:
        return dict(parts[0])
    wts = np.asarray(weights, dtype=float)
    out = {k: float(np.dot(wts, [p[k] for p in parts])) for k in parts[0]}
    steps = out["steps"]
    out["small_step_fraction"] = float(np.dot(wts, [p["small_step_fraction"] * p["steps"] for p in parts]) / steps)
    out["acceptance_length"] = parts[0]["acceptance_length"]
    return out


def predict(cfg: SystemConfig, tables: CostTables) -> dict:
    """Expected latency and breakdown of one configuration on the tables' workload (mixture or not)."""
    mp = MixturePredictor(tables.workload)
    mp.prepare([cfg])
    return mp.predict(cfg, mp.vectors(tables))


def _vanilla_tokens_survival(occ: ChainOccupancy, answer_tokens: int) -> np.ndarray:
    """P(T_total > i) with T_total = min(T_think, B) + A (a single call stops at max_tokens)."""
    B = occ.budget
    pmf = occ.end_pmf.copy()
    pmf[B] += pmf[B + 1 :].sum()
    pmf = pmf[: B + 1]
    total = np.zeros(B + 1 + answer_tokens)
    total[answer_tokens:] = pmf
    return np.clip(1.0 - np.cumsum(total), 0.0, 1.0)


def predict_point(cfg: SystemConfig, occ: ChainOccupancy, vec: CostVectors) -> dict:
    """Expected latency and its breakdown for one configuration."""
    tb = vec.tables
    comp = dict.fromkeys(COMPONENTS, 0.0)
    gamma = cfg.gamma
    spec_ = cfg.spec
    vanilla = spec_.one_call
    if vanilla and tb.execution.step_calls and spec_.chain == "small":
        thinking, small_frac = _small_steps(occ, vec, comp)
    elif vanilla and not tb.execution.step_calls:
        thinking, small_frac = _one_call(cfg, occ, vec, comp)
    else:
        thinking, small_frac = _chain_calls(cfg, occ, vec, comp)
    latency = float(sum(comp.values()))
    acc_len = expected_tokens_per_iteration(vec.workload.acceptance_per_position(gamma)) if gamma else np.nan
    return {
        "latency_s": latency,
        "small_step_fraction": small_frac,
        "acceptance_length": acc_len,
        "thinking_tokens": thinking,
        "steps": occ.steps,
        **comp,
    }


def _small_steps(occ: ChainOccupancy, vec: CostVectors, comp: dict) -> tuple[float, float]:
    """Vanilla-small step by step: the chain with q = 1 and no scoring, then the answer call. Fills ``comp``;
    returns (thinking tokens, small-step fraction)."""
    tb = vec.tables
    answer = np.dot(occ.end_pmf, vec.small_answer_prefill) if vec.A > 0 else 0.0
    comp["call_overhead_s"] = tb.call_s * (occ.small_proposals + (1.0 if vec.A > 0 else 0.0))
    comp["small_decode_s"] = float(np.dot(occ.small_first + occ.small_rest, vec.small_decode)
                                   + np.dot(occ.end_pmf, vec.small_answer_decode))
    comp["small_prefill_s"] = float(np.dot(occ.small_first, vec.small_prefill_first)
                                    + np.dot(occ.small_rest, vec.small_prefill_rest) + answer)
    thinking = occ.mean_thinking_tokens
    small_frac = 1.0
    return thinking, small_frac


def _one_call(cfg: SystemConfig, occ: ChainOccupancy, vec: CostVectors, comp: dict) -> tuple[float, float]:
    """A vanilla system or specdecode as one call over the whole chain. Fills ``comp``; returns (thinking tokens,
    small-step fraction)."""
    tb = vec.tables
    spec_ = cfg.spec
    sf_total = _vanilla_tokens_survival(occ, vec.A)
    P = vec.P
    comp["call_overhead_s"] = tb.call_s
    if cfg.drafts:
        n = len(sf_total) - 1
        u = vec.occupancy_u[:n]
        comp["base_prefill_s"] = vec.base_prompt_prefill
        comp["draft_s"] = vec.draft_prompt_prefill + float(np.dot(u * sf_total[1:], tb.draft_iter[P + 1 : P + 1 + n]))
        comp["verify_s"] = float(np.dot(u * sf_total[1:], tb.verify_iter[P + 1 : P + 1 + n]))
    else:
        who = "base" if spec_.chain == "base" else "small"
        dec = tb.dec_base if who == "base" else tb.dec_small
        n = len(sf_total) - 1
        comp[f"{who}_prefill_s"] = float(tb.prefill(who, P, 0))
        comp[f"{who}_decode_s"] = float(np.dot(sf_total[1:], dec[P + 1 : P + 1 + n]))
    pmf = np.diff(np.concatenate([[0.0], 1.0 - sf_total]))
    thinking = float(np.dot(np.arange(len(pmf)), pmf)) - vec.A
    small_frac = 1.0 if spec_.chain == "small" else 0.0
    return thinking, small_frac


def _chain_calls(cfg: SystemConfig, occ: ChainOccupancy, vec: CostVectors, comp: dict) -> tuple[float, float]:
    """SpecReason(-decode); vanilla-base / specdecode step by step are its base-only chain (q = 0, first_n = inf:
    no small proposals, no scoring). Fills ``comp``; returns (thinking tokens, small-step fraction)."""
    tb = vec.tables
    vanilla = cfg.spec.one_call
    spec = cfg.drafts
    reason = not vanilla
    calls = 2 * occ.small_proposals + occ.base_steps + (1.0 if vec.A > 0 else 0.0)
    comp["call_overhead_s"] = tb.call_s * calls
    if reason:
        comp["small_decode_s"] = float(np.dot(occ.small_first + occ.small_rest, vec.small_decode))
        comp["small_prefill_s"] = float(
            np.dot(occ.small_first, vec.small_prefill_first)
            + np.dot(occ.small_rest, vec.small_prefill_rest)
            + np.dot(occ.regen_continue, vec.small_catchup_charge)
        )
        score_rest, score_prompt = vec.score
        comp["scoring_s"] = float(np.dot(occ.score_rest, score_rest) + occ.score_prompt * score_prompt)
    base_mass = occ.base_gen.copy()
    base_mass[0] += occ.base_prompt
    comp["base_prefill_s"] = float(
        np.dot(occ.base_gen, vec.base_prefill) + occ.base_prompt * vec.base_prompt_prefill
        + np.dot(occ.end_pmf, vec.answer_prefill)
    )
    if spec:
        d_rest, d_prompt = vec.draft_score if reason else (np.zeros(vec.B), 0.0)
        sd_draft, sd_verify = vec.base_spec
        ans_draft, ans_verify = vec.answer_spec
        comp["draft_s"] = float(
            np.dot(base_mass, sd_draft) + np.dot(occ.base_gen, vec.draft_prefill)
            + occ.base_prompt * vec.draft_prompt_prefill
            + np.dot(occ.score_rest, d_rest) + occ.score_prompt * d_prompt
            + np.dot(occ.end_pmf, ans_draft) + (np.dot(occ.end_pmf, vec.draft_prefill_end) if vec.A > 0 else 0.0)
        )
        comp["verify_s"] = float(np.dot(base_mass, sd_verify) + np.dot(occ.end_pmf, ans_verify))
    else:
        comp["base_decode_s"] = float(np.dot(base_mass, vec.base_decode) + np.dot(occ.end_pmf, vec.answer_decode))
    thinking = occ.mean_thinking_tokens
    small_frac = occ.small_kept / occ.steps if reason else 0.0
    return thinking, small_frac
