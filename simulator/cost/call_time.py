"""The time of engine calls: the one place it is computed for single calls.

A call (one request to one engine) costs

    T_call = t_call + T_pre(new, cached) + sum_{i=1..out-1} T_dec(ctx + i)                (plain)
    T_call = t_call + T_pre(new, cached) + T_pre^draft(new, cached)
             + sum_r [ sum_{i<gamma} T_dec^draft(x_r + i) + T_ver(gamma, x_r) ],  x_r = ctx + 1 + g_r   (speculative)

with ``ctx`` the context before the call's output (decode i at ctx + i) and g_r the output tokens before
speculative iteration r. Every term is a look-up in :class:`~simulator.cost.cost_tables.CostTables` (the cost
model evaluated once per context length, block prefix caching applied in ``CostTables.prefill``).

Users: the single-request DES (sampled calls, ``simulator.engines.des``) and calibration / validation
(measured calls, ``calibrate.fit.fit_cost.CallPredictor``). The serving simulator times whole engine
*passes* of a batch instead (``simulator.engines.serving.pass_cost``, equal to ``Deployment.batch_forward_time``
by test); the analytic engine sums the same tables in expectation (``simulator.engines.analytic``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from simulator.cost.cost_tables import COMPONENTS, CostTables

SMALL, BASE = 0, 1  # engine indices (as simulator.engines.request_model)
GEN, SCORE, ANSWER = 0, 1, 2  # call kinds


@dataclass
class CallArrays:
    """Calls as flat arrays (one entry per call) and their speculative iterations (one entry per iteration)."""

    engine: np.ndarray  # SMALL / BASE
    kind: np.ndarray  # GEN / SCORE / ANSWER: SCORE time goes to ``scoring_s``
    new: np.ndarray
    cached: np.ndarray
    out: np.ndarray
    ctx: np.ndarray  # decode i (i = 1..out-1) runs at context ctx + i
    spec: np.ndarray  # bool: the call's output comes from speculative iterations (no plain decodes)
    draft_prefill: np.ndarray  # bool: the draft model inside the base engine prefills this call's prompt too
    it_call: np.ndarray  # owning call of each speculative iteration
    it_offset: np.ndarray  # output tokens before the iteration (g_r)
    it_gamma: np.ndarray | None = None  # drafted tokens per iteration (None: the tables' gamma)


def call_costs(calls: CallArrays, tables: CostTables, tables_for_gamma=None) -> dict[str, np.ndarray]:
    """Seconds of every call by component (``COMPONENTS``). ``tables_for_gamma(g)`` gives the tables of
    drafting width g when the iterations mix widths (default: ``tables`` for all)."""
    engine, kind, new, cached = calls.engine, calls.kind, calls.new, calls.cached
    out, ctx, spec = calls.out, calls.ctx, calls.spec
    n = len(out)
    comp = {c: np.zeros(n) for c in COMPONENTS}
    comp["call_overhead_s"][:] = tables.call_s
    small, base = engine == SMALL, engine == BASE
    score, gen = kind == SCORE, kind != SCORE
    if small.any():
        comp["small_prefill_s"][small] = tables.prefill("small", new[small], cached[small])
        idx = small & (out > 1)
        comp["small_decode_s"][idx] = tables.cum_small[ctx[idx] + out[idx]] - tables.cum_small[ctx[idx] + 1]
    if base.any():
        pre = np.zeros(n)
        pre[base] = tables.prefill("base", new[base], cached[base])
        comp["scoring_s"][score] = pre[score]
        bg = base & gen
        comp["base_prefill_s"][bg] = pre[bg]
        plain = bg & ~spec & (out > 1)
        comp["base_decode_s"][plain] = tables.cum_base[ctx[plain] + out[plain]] - tables.cum_base[ctx[plain] + 1]
    dp = calls.draft_prefill
    if dp.any():
        comp["draft_s"][dp] = tables.prefill("draft", new[dp], cached[dp])
    if len(calls.it_call):
        x = ctx[calls.it_call] + 1 + calls.it_offset
        gammas = [None] if calls.it_gamma is None else np.unique(calls.it_gamma)
        for g in gammas:
            m = slice(None) if g is None else calls.it_gamma == g
            tb = tables if g is None or tables_for_gamma is None else tables_for_gamma(int(g))
            comp["draft_s"] += np.bincount(calls.it_call[m], weights=tb.draft_iter[x[m]], minlength=n)
            comp["verify_s"] += np.bincount(calls.it_call[m], weights=tb.verify_iter[x[m]], minlength=n)
    return comp
