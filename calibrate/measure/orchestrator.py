"""Runs one request through one of the five systems, step by step, producing trace records.

Systems (REFERENCE.md section 1):
- ``vanilla-base`` / ``vanilla-small``: one model generates every step.
- ``specdecode``: the base engine verifies ``gamma`` draft tokens per iteration.
- ``specreason``: the small model proposes a step (stop "\\n\\n", <= step_max_tokens); the base
  model scores it in one prefill over the CoT + a judge template (max_tokens 1, top-10 logprobs);
  keep if score >= threshold, else the base model regenerates the step. The first ``first_n``
  steps come from the base model. Only kept steps count toward the thinking budget, which is
  checked between steps (a step is never cut short by it; the last one may overshoot).
- ``specreason-decode``: as ``specreason``, but the base engine uses speculative decoding.

All systems generate step by step so every system yields per-step records; with prefix caching
each step's prompt is mostly cached. The CoT is held as token ids per tokenizer, so a step kept
from one model is appended as its own ids for every engine sharing that tokenizer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from calibrate.measure.answer import extract_answer, has_answer, is_correct
from calibrate.measure.datasets import INSTRUCTION, Problem
from calibrate.measure.engine import Engine, Generation, Sampling
from calibrate.contracts.trace_schema import SCHEMA_VERSION
from simulator.errors import InputError
from simulator.option_values import check_threshold
from simulator.inputs.systems import REGISTRY, SYSTEMS, SystemSpec

STEP_STOP = ("\n\n",)
JUDGE_TEMPLATE = (
    "\n\n[Judge] Evaluate only the last reasoning step above for factual correctness and logical validity, "
    "ignoring style. Rate it with one digit from 0 (wrong) to 9 (certainly correct).\nScore: "
)


@dataclass(frozen=True)
class RunConfig:
    """Knobs of a measured run of one system (what the system *is* comes from the registry,
    ``simulator.inputs.systems``); defaults follow the reference system (REFERENCE.md section 1)."""

    system: str
    threshold: float = 7.0
    first_n: int = 0
    budget_tokens: int = 8192
    step_max_tokens: int = 512
    score_mode: str = "greedy"  # greedy digit | logprob-weighted mean
    sampling: Sampling = field(default_factory=Sampling)
    max_steps: int = 100_000

    def __post_init__(self):
        if self.system not in REGISTRY:
            raise InputError(None, "system", f"unknown system {self.system!r} ({' | '.join(SYSTEMS)})")
        check_threshold(self.threshold, "threshold")  # 0..10 (10: never keep a small step), as --threshold
        if self.score_mode not in ("greedy", "mean"):
            raise InputError(None, "score_mode", "must be greedy or mean")
        for name in ("budget_tokens", "step_max_tokens"):
            if getattr(self, name) < 1:
                raise InputError(None, name, "must be >= 1")
        if self.first_n < 0:
            raise InputError(None, "first_n", "must be >= 0")

    @property
    def spec(self) -> SystemSpec:
        return REGISTRY[self.system]

    @property
    def uses_small(self) -> bool:
        """A small-model engine writes or proposes steps (a draft lives inside the base engine)."""
        return self.spec.small_writes_steps

    @property
    def uses_base(self) -> bool:
        return self.spec.uses_base


def parse_score(top_logprobs: dict[str, float], mode: str) -> tuple[float | None, dict[str, float]]:
    """Digit logprobs from the top-k; score = greedy digit or sum_d p_d*d / sum_d p_d. None if no digit."""
    import math

    digits: dict[str, float] = {}
    for tok, lp in top_logprobs.items():
        d = tok.strip()
        if len(d) == 1 and d.isdigit() and (d not in digits or lp > digits[d]):
            digits[d] = lp
    if not digits:
        return None, digits
    if mode == "greedy":
        return float(max(digits, key=lambda d: digits[d])), digits
    weights = {d: math.exp(lp) for d, lp in digits.items()}
    return sum(int(d) * w for d, w in weights.items()) / sum(weights.values()), digits


class CoT:
    """The chain of thought as token ids for each distinct tokenizer among the engines."""

    def __init__(self, question: str, engines: list[Engine]):
        self.engines = {e.tokenizer_key: e for e in engines}
        prompt = f"{INSTRUCTION}\n\n{question}"
        self.ids = {k: e.chat_prompt(prompt) for k, e in self.engines.items()}
        self.text = ""

    def ids_for(self, engine: Engine) -> list[int]:
        return self.ids[engine.tokenizer_key]

    def with_step(self, engine: Engine, producer: Engine, gen: Generation) -> list[int]:
        """``engine``'s ids of the CoT followed by ``gen`` (a step produced by ``producer``)."""
        step = gen.token_ids if engine.tokenizer_key == producer.tokenizer_key else engine.encode(gen.text)
        return self.ids_for(engine) + step

    def append(self, producer: Engine, gen: Generation) -> None:
        for key, e in self.engines.items():
            self.ids[key] = self.with_step(e, producer, gen)
        self.text += gen.text


def _step_record(request_id: int, step_index: int, context_tokens: int) -> dict:
    return {
        "schema_version": SCHEMA_VERSION, "kind": "step", "request_id": request_id, "step_index": step_index,
        "proposer": "base", "small_tokens": 0, "small_time_s": 0.0, "score_new_tokens": 0,
        "score_cached_tokens": 0, "score_time_s": 0.0, "score": None, "digit_logprobs": {},
        "accepted": False, "base_tokens": 0, "base_time_s": 0.0, "base_prompt_tokens": 0,
        "base_cached_tokens": 0, "spec_gamma": 0, "spec_drafted_per_pos": [], "spec_accepted_per_pos": [],
        "context_tokens": context_tokens, "kept_tokens": 0, "text": "", "started_at": time.time(),
    }


def _fill_base(rec: dict, base: Engine, gen: Generation) -> None:
    rec.update(base_tokens=len(gen.token_ids), base_time_s=gen.time_s, base_prompt_tokens=gen.prompt_tokens,
               base_cached_tokens=gen.cached_tokens, spec_gamma=base.gamma,
               spec_drafted_per_pos=list(gen.spec_drafted_per_pos),
               spec_accepted_per_pos=list(gen.spec_accepted_per_pos))


def run_step(cfg: RunConfig, cot: CoT, base: Engine | None, small: Engine | None, request_id: int,
             step_index: int, max_tokens: int, seed: int) -> tuple[dict, Engine, Generation]:
    """One step of any system; returns (record, producer, kept generation)."""
    lead = base if base is not None else small
    rec = _step_record(request_id, step_index, len(cot.ids_for(lead)))
    stop = list(STEP_STOP)
    propose = cfg.spec.scores_steps and step_index >= cfg.first_n
    if cfg.spec.chain == "small":
        gen = small.generate(cot.ids_for(small), max_tokens, stop, cfg.sampling, seed)
        rec.update(proposer="small", accepted=True, small_tokens=len(gen.token_ids), small_time_s=gen.time_s)
        return rec, small, gen
    if propose:
        # Phase 1: the small model proposes a step.
        prop = small.generate(cot.ids_for(small), max_tokens, stop, cfg.sampling, seed)
        rec.update(small_tokens=len(prop.token_ids), small_time_s=prop.time_s)
        # Phase 2: the base model judges it in one prefill over CoT + step + judge template.
        sr = base.score(cot.with_step(base, small, prop) + base.encode(JUDGE_TEMPLATE))
        score, digits = parse_score(sr.top_logprobs, cfg.score_mode)
        accepted = (score if score is not None else 0.0) >= cfg.threshold
        rec.update(score_new_tokens=sr.prompt_tokens - sr.cached_tokens, score_cached_tokens=sr.cached_tokens,
                   score_time_s=sr.time_s, score=score, digit_logprobs=digits, accepted=accepted)
        if accepted:
            rec["proposer"] = "small"
            return rec, small, prop
    # Phase 3: the base model (re)generates the step, speculatively if it has a draft.
    gen = base.generate(cot.ids_for(base), max_tokens, stop, cfg.sampling, seed + 1)
    _fill_base(rec, base, gen)
    return rec, base, gen


def run_request(cfg: RunConfig, problem: Problem, request_id: int, base: Engine | None, small: Engine | None,
                seed: int, on_step: Callable[[dict], None] | None = None) -> tuple[list[dict], dict]:
    """Run one request to an answer, EOS, or the budget; return (step records, request record)."""
    t0, started_at = time.perf_counter(), time.time()
    engines = [e for e in (base, small) if e is not None]
    cot = CoT(problem.question, engines)
    steps: list[dict] = []
    thinking, stop_reason = 0, "max_steps"
    for step_index in range(cfg.max_steps):
        # Every step may run to step_max_tokens; the budget is checked between steps, so the last
        # step may overshoot it (the reference code's rule, and the simulator's: simulator/engines/chain.py).
        max_tokens = cfg.step_max_tokens
        rec, producer, gen = run_step(cfg, cot, base, small, request_id, step_index, max_tokens,
                                      seed * 100_003 + 2 * step_index)
        cot.append(producer, gen)
        rec.update(kept_tokens=len(gen.token_ids), text=gen.text)
        steps.append(rec)
        thinking += len(gen.token_ids)
        if on_step:
            on_step(rec)
        if has_answer(gen.text):
            stop_reason = "answer"
        elif gen.finish_reason == "eos" or not gen.token_ids:
            stop_reason = "eos"
        elif thinking >= cfg.budget_tokens:
            stop_reason = "budget"
        else:
            continue
        break
    answer = extract_answer(cot.text)
    req = {
        "schema_version": SCHEMA_VERSION, "kind": "request", "request_id": request_id,
        "problem_id": problem.problem_id, "system": cfg.system, "num_steps": len(steps),
        "num_small_steps": sum(s["proposer"] == "small" for s in steps),
        "num_base_steps": sum(s["proposer"] == "base" for s in steps), "thinking_tokens": thinking,
        "small_tokens": sum(s["small_tokens"] for s in steps), "base_tokens": sum(s["base_tokens"] for s in steps),
        "small_time_s": sum(s["small_time_s"] for s in steps), "score_time_s": sum(s["score_time_s"] for s in steps),
        "base_time_s": sum(s["base_time_s"] for s in steps),
        "spec_drafted_tokens": sum(sum(s["spec_drafted_per_pos"]) for s in steps),
        "spec_accepted_tokens": sum(sum(s["spec_accepted_per_pos"]) for s in steps),
        "stop_reason": stop_reason, "answer": answer, "reference_answer": problem.answer,
        "correct": is_correct(answer, problem.answer), "latency_s": time.perf_counter() - t0,
        "started_at": started_at,
    }
    return steps, req
