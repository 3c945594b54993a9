"""Cost tables: the cost model evaluated once on every context length a request can reach.

Both engines read the same tables, so they cannot disagree about a cost. Conventions:
a call prefills ``n`` new tokens on ``c`` cached ones (producing the first output token),
then the i-th decode (i = 1..k-1) runs with ``c + n + i - 1`` ... approximated as context
``x + i`` where x is the context before the step; a speculative iteration at offset g
(tokens produced after the first) costs gamma draft decodes + one verification at x+1+g.

Every prefill goes through :meth:`CostTables.prefill`, which applies the execution's
whole-block prefix caching (``simulator.cost.execution.cache_split``), so the engines cannot
disagree about what a cached prefix saves either.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.cost.cost_model import Deployment
from simulator.cost.execution import Execution
from simulator.cost.spec_iteration import speculating_target, speculative_iteration
from simulator.inputs.workload import WorkloadProfile

COMPONENTS = (
    "small_decode_s", "small_prefill_s", "scoring_s", "base_decode_s",
    "base_prefill_s", "draft_s", "verify_s", "call_overhead_s",
)


@dataclass
class CostTables:
    base: Deployment
    small: Deployment | None  # None: a plain deployment (no small model; its tables are not built)
    draft: Deployment | None  # None: no draft (a plain deployment); needs gamma None
    workload: WorkloadProfile | None
    gamma: int | None
    execution: Execution = field(default_factory=Execution)
    max_context: int | None = None  # default: the longest context a request of the workload can reach

    def __post_init__(self):
        if self.gamma:  # a speculating base engine (γ >= 1): all its passes as vLLM runs them with this drafter
            self.base = speculating_target(self.base, self.draft)
        w = self.workload
        if self.max_context is None:
            self.max_context = w.max_prompt_tokens + w.token_budget + w.max_step_tokens + w.answer_tokens + 4 * (self.gamma or 1) + 8
        x = np.arange(self.max_context + 1, dtype=float)
        self.dec_small = None if self.small is None else np.asarray(self.small.decode_time(x), dtype=float)
        self.dec_base = np.asarray(self.base.decode_time(x), dtype=float)
        self.cum_small = None if self.small is None else np.concatenate([[0.0], np.cumsum(self.dec_small)])
        self.cum_base = np.concatenate([[0.0], np.cumsum(self.dec_base)])
        if self.gamma is not None:
            # draft_iter[x] = sum_{i<gamma} T_level_draft(x + i) (a decode for a chain draft, a pass of w tokens
            # for a tree of width w, 0 for prompt lookup); verify_iter[x] = T_verify(gamma, x) (w*gamma + 1 tokens):
            # the one speculative iteration at batch 1 over every context
            dd = self.draft.drafting
            d, v = speculative_iteration(self.base.pass_time, None if dd.free else self.draft.pass_time, dd,
                                         self.gamma, 1, x)
            self.draft_iter = np.zeros_like(x) + d  # 0.0 when no draft pass runs (gamma = 0, prompt lookup)
            self.verify_iter = np.asarray(v, dtype=float)
        self.call_s = self.base.cost.call_overhead_s  # one engine call (same engine kind for both models)

    # ---- sums of decode passes used by the DES ---------------------------------------------
    def decode_sum(self, who: str, context: int, tokens: int) -> float:
        """sum_{i=1..tokens-1} T_dec(context + i): the decodes after a call's prefill."""
        if tokens <= 1:
            return 0.0
        cum = self.cum_small if who == "small" else self.cum_base
        return float(cum[context + tokens] - cum[context + 1])

    def prefill(self, who: str, new_tokens, cached_tokens):
        """Prefill ``new_tokens`` on ``cached_tokens`` nominally cached ones (broadcasts over arrays);
        with block prefix caching the uncached tail of the last partial block is prefilled again."""
        dep = {"small": self.small, "base": self.base, "draft": self.draft}[who]
        if self.execution.prefix_cache_block > 1 or not self.execution.prefix_caching:
            new_tokens, cached_tokens = self.execution.split(new_tokens, cached_tokens)
        if who == "draft":
            return dep.draft_prefill_time(new_tokens, cached_tokens)
        return dep.prefill_time(new_tokens, cached_tokens)
