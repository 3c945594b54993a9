"""Workload model: what a request looks like, independent of hardware.

Per (dataset, small model, base model):

- ``steps_per_request.base`` / ``.small``: N_X, the number of reasoning steps to the answer
  when every step comes from model X. Both engines turn it into a per-step *answer hazard*
  h_X(j) = P(N_X = j+1 | N_X > j): the step at index j ends the request with probability
  h_X(j) where X produced the step. Vanilla runs thus reproduce N_X exactly, and a mixed
  SpecReason chain ends at a rate set by who wrote each kept step. When ``small`` is omitted
  it is ``base`` scaled by ``verbosity`` (small-model steps per base-model step).
- ``step_tokens.small`` / ``.base``: tokens per step (a step ends at a blank line, <= 512).
- ``scores``: pmf of the base model's utility score 0..9 for a small-model step, so the
  acceptance at threshold tau is P(score >= tau) for any tau.
- ``token_acceptance``: a_i = P(the first i drafted tokens are all accepted), i = 1..8, for
  the (draft -> target) pair; non-increasing. Expected tokens per verification with gamma
  drafts: E = 1 + sum_{i<=gamma} a_i (Leviathan et al., per-position form).
- ``token_budget``: thinking tokens (kept steps only) after which the request stops.
- prompt, answer and judge-template lengths.

Assumptions (stated, tested): step lengths, scores and the step count are mutually
independent; a step's length does not depend on its position in the chain.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simulator.inputs.distributions import IntDistribution, IntPMF
from simulator.provenance import Provenance


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PerModel(_Strict):
    base: IntDistribution
    small: IntDistribution


class StepCounts(_Strict):
    base: IntDistribution
    small: IntDistribution | None = None


class Problem(_Strict):
    """One problem of a workload mixture: its weight and the fields in which it differs.

    A field left out is the workload's own (shared across problems); see ``WorkloadProfile.components``.
    """

    name: str
    weight: float = Field(default=1.0, gt=0)
    prompt_tokens: int | None = Field(default=None, ge=1)
    steps_per_request: StepCounts | None = None
    verbosity: float | None = Field(default=None, gt=0)
    step_tokens: PerModel | None = None
    scores: list[float] | None = Field(default=None, min_length=10, max_length=10)
    source: str = ""  # what this problem's fields were fitted from (or "prior")


class WorkloadProfile(_Strict):
    """Hardware-independent description of the requests (see module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    name: str
    dataset: str
    base_model: str
    small_model: str
    provenance: Provenance
    prompt_tokens: int = Field(ge=1)
    answer_tokens: int = Field(default=0, ge=0)
    judge_template_tokens: int = Field(default=70, ge=1)
    token_budget: int = Field(default=8192, ge=1)
    max_step_tokens: int = Field(default=512, ge=1)
    steps_per_request: StepCounts
    verbosity: float = Field(default=1.0, gt=0)
    step_tokens: PerModel
    scores: list[float] = Field(min_length=10, max_length=10)
    token_acceptance: list[float] = Field(min_length=1, max_length=16)
    # a mixture over problems (requests): each request draws a problem with probability weight / sum
    problems: list[Problem] | None = Field(default=None, min_length=1)

    @field_validator("scores")
    @classmethod
    def _scores_pmf(cls, v):
        if any(p < 0 for p in v) or not np.isclose(sum(v), 1.0, atol=1e-6):
            raise ValueError("scores must be 10 probabilities (score 0..9) summing to 1")
        return v

    @field_validator("token_acceptance")
    @classmethod
    def _acceptance(cls, v):
        if any(not (0.0 <= a <= 1.0) for a in v):
            raise ValueError("token_acceptance a_i must lie in [0, 1]")
        if any(v[i + 1] > v[i] + 1e-12 for i in range(len(v) - 1)):
            raise ValueError("token_acceptance a_i = P(first i accepted) must be non-increasing in i")
        return v

    @model_validator(mode="after")
    def _lengths(self):
        for who in ("base", "small"):
            pmf = getattr(self.step_tokens, who).compile()
            if pmf.min < 1 or pmf.max > self.max_step_tokens:
                raise ValueError(f"step_tokens.{who} must lie in [1, max_step_tokens={self.max_step_tokens}]")
        for who in ("base", "small"):
            d = getattr(self.steps_per_request, who)
            if d is not None and d.compile().min < 1:
                raise ValueError(f"steps_per_request.{who} must be >= 1")
        return self

    # ---- the mixture ------------------------------------------------------------------------------
    def components(self) -> list[tuple[float, "WorkloadProfile"]]:
        """(probability, one problem's workload) for every problem; a workload without ``problems``
        is its own single component (so every engine reproduces the one-problem numbers exactly)."""
        return self.mixture_components

    @cached_property
    def mixture_components(self) -> list[tuple[float, "WorkloadProfile"]]:
        if not self.problems:
            out = [(1.0, self)]
        else:
            total = sum(p.weight for p in self.problems)
            base = self.model_dump(exclude={"problems"})
            out = []
            for p in self.problems:
                upd = {k: v for k, v in p.model_dump(exclude={"name", "weight", "source"}).items() if v is not None}
                out.append((p.weight / total, WorkloadProfile.model_validate(
                    {**base, **upd, "name": f"{self.name}/{p.name}"})))
        return out

    @property
    def is_mixture(self) -> bool:
        return bool(self.problems) and len(self.problems) > 1

    # ---- compiled views, shared by both engines -------------------------------------------
    @cached_property
    def step_pmf_small(self) -> IntPMF:
        return self.step_tokens.small.compile()

    @cached_property
    def step_pmf_base(self) -> IntPMF:
        return self.step_tokens.base.compile()

    @cached_property
    def steps_pmf_base(self) -> IntPMF:
        return self.steps_per_request.base.compile()

    @cached_property
    def steps_pmf_small(self) -> IntPMF:
        if self.steps_per_request.small is not None:
            return self.steps_per_request.small.compile()
        b = self.steps_pmf_base
        scaled = np.maximum(1, np.rint(b.support * self.verbosity)).astype(np.int64)
        return IntPMF.from_weights(scaled, b.probs)

    def acceptance_probability(self, threshold: int) -> float:
        """P(score >= threshold) for threshold 0..9 (10 means never accept)."""
        return float(sum(self.scores[threshold:]))

    def acceptance_per_position(self, gamma: int) -> np.ndarray:
        """a_1..a_gamma; positions beyond the profile repeat the last conditional rate."""
        a = list(self.token_acceptance)
        while len(a) < gamma:
            last, prev = a[-1], (a[-2] if len(a) > 1 else 1.0)
            cond = last / prev if prev > 0 else 0.0
            a.append(last * cond)
        return np.asarray(a[:gamma])

    def max_steps(self) -> int:
        if self.problems:
            return max(c.max_steps() for _, c in self.components())
        return max(self.steps_pmf_base.max, self.steps_pmf_small.max)

    @property
    def max_prompt_tokens(self) -> int:
        """The longest prompt of any problem (cost tables must reach it)."""
        return max(c.prompt_tokens for _, c in self.components())


def answer_hazard(steps: IntPMF, n_steps: int) -> np.ndarray:
    """h[j] = P(N = j+1 | N > j), j = 0..n_steps-1 (1 beyond the support's end): the chance that the request
    ends after step j given that step j runs, so that with no budget the number of steps is distributed as N
    (law tested: E[steps] = E[N])."""
    dense = steps.dense(n_steps + 1)
    surv = 1.0 - np.cumsum(dense)  # surv[j] = P(N > j) = P(N >= j+1)
    p_end = dense[1 : n_steps + 1]
    with np.errstate(invalid="ignore", divide="ignore"):
        h = np.where(surv[:n_steps] > 1e-15, p_end / surv[:n_steps], 1.0)
    return np.clip(h, 0.0, 1.0)


def load_workload(path: str | Path) -> WorkloadProfile:
    from simulator.inputs.loading import load_yaml_model

    return load_yaml_model(path, WorkloadProfile)
