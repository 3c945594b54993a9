"""Which γ at which load: the expected-goodput γ rule per engine iteration, and the best fixed γ per
concurrency from serving simulations.

**Per-iteration rule** (SmartSpec, arXiv 2406.14066, adapted to this cost model): for a batch of B
decoding sequences at context c, speculating with γ drafts per sequence gives

    tokens/s(γ) = B * E[M | γ] / T_iter(B, γ),   E[M | γ] = 1 + sum_{i<=γ} a_i
    T_iter(B, γ) = γ * T_pass^draft(B sequences, w tokens each, at c)
                   + T_pass^target(B sequences, w*γ + 1 tokens each, at c)

(γ = 0: plain decoding, T_iter = T_pass^target(B, 1 token each)); the rule picks the γ in 0..γ_max with
the most tokens/s. While the batch is memory-bound, a larger γ costs little and pays E[M]; once the
verification pass turns compute-bound (B*(wγ+1) tokens), every drafted token costs its FLOPs and the
best γ falls -- to 0 when even γ = 1's extra pass is not paid back. The rule is the decision an
adaptive engine would make per iteration; :func:`gamma_rule_table` evaluates it over batch sizes.

**Best fixed γ per concurrency** (:func:`best_gamma_vs_concurrency`): the serving simulator at a
closed loop of N users for every γ of a grid (same seed: common random numbers, so the comparison is
paired), and per N the γ with the highest output throughput, with its TPOT (vLLM's time per output
token) and throughput, and every γ whose throughput is within ``EQUIVALENCE`` of the best (ties).
The serving simulator runs one γ per run (no switching inside a run); in a closed loop the batch size
stays near N, so the best fixed γ at N is what a batch-size-keyed policy converges to there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from simulator.cost.cost_model import CHAIN, Deployment
from simulator.cost.spec_iteration import speculating_target, speculative_iteration
from simulator.engines.speculative import expected_tokens_per_iteration

EQUIVALENCE = 0.05  # throughputs within 5% of the best are ties (as capacity ranking's margin)


@dataclass(frozen=True)
class GammaChoice:
    gamma: int
    tokens_per_s: float
    per_gamma: dict[int, float]  # tokens/s for every γ considered


def iteration_parts(target: Deployment, draft: Deployment | None, batch: int, context: int, gamma: int) -> tuple[float, float]:
    """(draft seconds, verification seconds) of one decoding iteration for B sequences at ``context``: the one
    speculative iteration (:func:`simulator.cost.spec_iteration.speculative_iteration`) on the deployments' pass times --
    γ draft passes (level i at context + i, w tokens per sequence) and one target pass over w*γ + 1 tokens per
    sequence. γ = 0 or no draft: (0, one plain decode step)."""
    if batch < 1:
        raise ValueError("batch must be >= 1")
    if gamma < 0:
        raise ValueError("gamma must be >= 0")
    if draft is None:
        gamma, drafting, draft_pass = 0, CHAIN, None
    else:
        drafting, draft_pass = draft.drafting, (None if draft.drafting.free else draft.pass_time)
    if gamma > 0:  # the target as vLLM runs it while speculating with this drafter (γ = 0: a plain server)
        target = speculating_target(target, draft)
    d, v = speculative_iteration(target.pass_time, draft_pass, drafting, gamma, batch, float(batch * context))
    return float(d), float(v)


def iteration_time(target: Deployment, draft: Deployment | None, batch: int, context: int, gamma: int) -> float:
    """T_iter(B, γ) of one decoding iteration for B sequences at ``context`` (see the module docstring)."""
    d, v = iteration_parts(target, draft, batch, context, gamma)
    return d + v


def goodput_gamma(target: Deployment, draft: Deployment | None, acceptance, batch: int, context: int,
                  gamma_max: int) -> GammaChoice:
    """The per-iteration rule: the γ in 0..``gamma_max`` with the most expected tokens per second.

    ``acceptance``: a_1..a_{gamma_max} (``WorkloadProfile.acceptance_per_position``)."""
    a = np.asarray(acceptance, dtype=float)
    if len(a) < gamma_max:
        raise ValueError(f"need a_1..a_{gamma_max}, got {len(a)} positions")
    gs = range(gamma_max + 1 if draft is not None else 1)
    em = [expected_tokens_per_iteration(a[:g]) for g in gs]
    times = [iteration_time(target, draft, batch, context, g) for g in gs]
    best = best_goodput(em, times, batch)
    return GammaChoice(best, batch * em[best] / times[best], {g: batch * em[g] / times[g] for g in gs})


def best_goodput(expected_tokens, times, n_decoding: int, n_first: int = 0) -> int:
    """The rule's argmax: γ maximising (n_first + n_decoding * E[M | γ]) / T_iter(γ), ties -> the smaller γ.

    ``expected_tokens[γ]`` = E[M | γ] and ``times[γ]`` = T_iter(γ) for γ = 0..γ_max (n_first: first tokens of
    prefills in the same iteration, produced whatever γ)."""
    rates = [(n_first + n_decoding * m) / t for m, t in zip(expected_tokens, times)]
    return max(range(len(rates)), key=lambda g: (rates[g], -g))


class GoodputPolicy:
    """The rule as a serving engine's γ policy, applied to each iteration as it stands:
    ``policy(iter_time, n_decoding, n_first) -> γ`` with ``iter_time(γ)`` the engine's own time of that
    iteration at γ (its prefills, decoding slots and contexts: the cost model the engine runs on)."""

    def __init__(self, acceptance, gamma_max: int):
        self.gamma_max = int(gamma_max)
        a = np.asarray(acceptance, dtype=float)[: self.gamma_max]
        if len(a) < self.gamma_max:
            raise ValueError(f"need a_1..a_{self.gamma_max}, got {len(a)} positions")
        self.em = [expected_tokens_per_iteration(a[:g]) for g in range(self.gamma_max + 1)]

    def __call__(self, iter_time, n_decoding: int, n_first: int = 0) -> int:
        return best_goodput(self.em, [iter_time(g) for g in range(self.gamma_max + 1)], n_decoding, n_first)


def _goodput_policy(cfg, workload) -> GoodputPolicy:
    """The expected-goodput rule up to the configuration's γ, on its workload's acceptance."""
    return GoodputPolicy(workload.acceptance_per_position(cfg.gamma), cfg.gamma)


# ``SystemConfig.gamma_policy`` name -> (configuration, workload) -> the serving engine's γ policy (None: fixed γ)
GAMMA_POLICIES = {"fixed": lambda cfg, workload: None, "goodput": _goodput_policy}


def gamma_policy(cfg, deps: dict, workload) -> GoodputPolicy | None:
    """The base engine's γ policy of a configuration (None: fixed γ), looked up in :data:`GAMMA_POLICIES`."""
    if not cfg.adaptive or not cfg.drafts:
        return None
    make = GAMMA_POLICIES.get(cfg.gamma_policy)
    if make is None:
        raise ValueError(f"unknown gamma_policy {cfg.gamma_policy!r}")
    return make(cfg, workload)


def gamma_rule_table(target: Deployment, draft: Deployment | None, acceptance, batches, context: int,
                     gamma_max: int) -> pd.DataFrame:
    """The rule's γ per batch size, with the tokens/s of γ = 0 and of the chosen γ."""
    rows = []
    for b in batches:
        c = goodput_gamma(target, draft, acceptance, int(b), context, gamma_max)
        rows.append({"batch": int(b), "rule_gamma": c.gamma, "rule_tokens_per_s": c.tokens_per_s,
                     "plain_tokens_per_s": c.per_gamma[0], "rule_speedup": c.tokens_per_s / c.per_gamma[0]})
    return pd.DataFrame(rows)


def best_gamma_vs_concurrency(rows: pd.DataFrame, equivalence: float = EQUIVALENCE) -> pd.DataFrame:
    """From serving rows at closed-loop levels (``users``, ``gamma``, ``output_throughput``, ``median_tpot_ms``,
    ``request_throughput``, ...: what ``specsim capacity --users ... --gamma ...`` evaluates), per user level
    the γ with the highest output throughput, its TPOT and throughput, and the γ values tied with it."""
    need = {"users", "gamma", "output_throughput", "median_tpot_ms", "request_throughput"}
    missing = need - set(rows.columns)
    if missing:
        raise ValueError(f"serving rows lack {sorted(missing)}")
    out = []
    for u, d in rows.groupby("users", sort=True):
        d = d.sort_values("gamma")
        i = d["output_throughput"].to_numpy().argmax()
        best = d.iloc[i]
        plain = d[d["gamma"] == 0]
        tied = d[d["output_throughput"] >= (1.0 - equivalence) * best["output_throughput"]]["gamma"]
        out.append({
            "users": int(u), "best_gamma": int(best["gamma"]), "tied_gammas": ",".join(str(int(g)) for g in tied),
            "output_tok_per_s": float(best["output_throughput"]), "request_per_s": float(best["request_throughput"]),
            "median_tpot_ms": float(best["median_tpot_ms"]),
            "speedup_vs_gamma0": (float(best["output_throughput"] / plain["output_throughput"].iloc[0])
                                  if len(plain) else float("nan")),
        })
    return pd.DataFrame(out)


def gamma_vs_concurrency(rows: pd.DataFrame, rs, equivalence: float = EQUIVALENCE) -> pd.DataFrame:
    """:func:`best_gamma_vs_concurrency` per (hardware, TP, system) of a scenario's closed-loop serving rows,
    with the per-iteration rule's γ (:func:`goodput_gamma`) at each level's mean base-engine batch and a
    mid-budget context (prompt + half the token budget), over the γ range of the rows."""
    out = []
    if "gamma_policy" not in rows:
        rows = rows.assign(gamma_policy="fixed")
    if "threshold" not in rows:
        rows = rows.assign(threshold=np.nan)
    for (hw, tp, system, thr), d in rows.groupby(["hardware", "tp", "system", "threshold"], sort=False, dropna=False):
        d = d.assign(gamma=d["gamma"].fillna(0).astype(int))
        adaptive = d[d["gamma_policy"] != "fixed"].set_index("users")
        d = d[d["gamma_policy"] == "fixed"]
        gmax = int(d["gamma"].max())
        deps = rs.deployments(hw, int(tp))
        a = rs.workload.acceptance_per_position(max(gmax, 1))
        ctx = int(rs.workload.max_prompt_tokens + rs.workload.token_budget // 2)
        best = best_gamma_vs_concurrency(d, equivalence)
        batch = d.groupby("users")["base_batch_mean"].mean() if "base_batch_mean" in d else None
        rule = []
        for u in best["users"]:
            b = max(1, int(round(batch.loc[u]))) if batch is not None else int(u)
            rule.append(goodput_gamma(deps["base"], deps["draft"], a, b, ctx, gmax).gamma)
        best.insert(0, "threshold", thr)
        best.insert(0, "system", system)
        best.insert(0, "tp", int(tp))
        best.insert(0, "hardware", hw)
        best["rule_gamma"] = rule
        if len(adaptive):  # the same system with γ chosen per iteration by the rule (serving simulator)
            u = best["users"]
            best["adaptive_gamma_mean"] = adaptive["base_gamma_mean"].reindex(u).to_numpy()
            best["adaptive_tpot_ms"] = adaptive["median_tpot_ms"].reindex(u).to_numpy()
            best["adaptive_tok_per_s"] = adaptive["output_throughput"].reindex(u).to_numpy()
            best["adaptive_vs_best"] = best["adaptive_tok_per_s"] / best["output_tok_per_s"]
        out.append(best)
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()
