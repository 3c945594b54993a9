"""Plain (non-reasoning) serving workloads as serving benchmarks define them (``vllm bench serve`` and the like).

A :class:`ServingWorkload` says what requests look like and when they come:

- input and output lengths (:class:`Lengths`): fixed, vLLM's random dataset (uniform integers in
  [floor(L (1 - r)), ceil(L (1 + r))], ``--random-input-len`` / ``--random-output-len`` / ``--random-range-ratio``),
  lognormal (ShareGPT-like: a median and a spread, clipped), or measured lengths replayed in order;
  :func:`sharegpt_lengths` is vLLM's ShareGPT sample (``--dataset-name sharegpt``): lognormal prompts and replies
  clipped as vLLM filters them, at given means, with an assumed spread (:data:`SHAREGPT_SIGMA`);
- early end of sequence: the output length is the cap (``max_tokens``); with ``eos_per_token`` p > 0 a request
  stops earlier, after Geometric(p) tokens (a constant end-of-sequence probability per token);
- shared prefixes (``system_prompts``: n distinct prompts of L tokens, one drawn uniformly per request; vLLM's
  ``--random-prefix-len L`` is n = 1), hit across requests by the engines' prefix cache;
- multi-turn sessions (``sessions``): a session's turns go one after another, each after the previous answer and
  an exponential think time; turn k's prompt is the system prompt + the session's history (every earlier message
  and answer) + its new message, so the history is a shared prefix of the next turn;
- arrivals: ``request_rate`` (Poisson; ``burstiness`` b != 1: Gamma gaps of shape b, vLLM's), ``inf`` (every
  request at once, a burst), ``max_concurrency`` N (vLLM's semaphore: with rate inf a closed loop of N users, with a
  rate an open loop with at most N requests in flight, each timed from when it is sent), ``ramp_up`` (vLLM's
  ``--ramp-up-strategy``: the rate moved linearly or exponentially from a start to an end over the requests), or
  ``stages`` (a list of rate x duration, Poisson within each). With sessions the arrivals start sessions (a closed
  loop: each of the N users runs one session after another, as vLLM's multi-turn benchmark's clients).

Every request is one call of the base engine (``vanilla-base``: plain serving is base-only) carrying its prefix
segments (``Call.prefix``); a session turn publishes its own tokens (``Call.publish``) for the next turn.
:meth:`ServingWorkload.from_command` reads a ``vllm bench serve`` command line, :meth:`to_command` writes one.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.engines.serving.arrivals import (BurstyArrivals, CappedArrivals, ClosedLoopUsers, PoissonArrivals,
                                               RampArrivals, StagedArrivals)

# vLLM's ShareGPT sample (vllm/benchmarks/datasets.py: ShareGPTDataset, is_valid_sequence): the first human turn is the
# prompt, the first reply's length the request's max_tokens; a pair is skipped if the prompt or the reply is under 4
# tokens, the prompt over 1024 or both together over 2048 (here the reply is clipped at 2048 - 4 on its own).
SHAREGPT_MIN, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL = 4, 1024, 2048
# Spread of ShareGPT's prompt and reply lengths: the sd of log length, an assumption (a lognormal of sd 1, a
# coefficient of variation ~1.3 before clipping: short questions and a long tail), not measured here -- the dataset's
# lengths are not in the shared data (docs/serving-model.md, "ShareGPT"; reports/serving-released has the
# sensitivity to it).
SHAREGPT_SIGMA = 1.0
# Per-request mean prompt / reply tokens of vLLM's 1000-prompt ShareGPT sample: the median over GPUStack's released
# 1000-request ShareGPT runs (in_tok / requests, out_tok / requests; Qwen3, GLM, gpt-oss and DeepSeek tokenizers:
# 214-219 / 187-202), the default where a command line gives no lengths.
SHAREGPT_MEANS = (217, 200)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Lengths(_Strict):
    """A token-length distribution; ``sample(rng, n)`` draws n lengths, ``mean`` is its mean."""

    kind: Literal["fixed", "uniform", "lognormal", "replay"] = "fixed"
    tokens: int | None = Field(default=None, ge=1, le=10_000_000)  # fixed value / uniform centre / lognormal median
    range_ratio: float = Field(default=0.0, ge=0.0, lt=1.0)  # uniform: vLLM's --random-range-ratio
    sigma: float = Field(default=0.0, ge=0.0, le=5.0)  # lognormal: sd of log length
    min: int = Field(default=1, ge=1)
    max: int | None = Field(default=None, ge=1)
    values: list[int] | None = Field(default=None, min_length=1)  # replay: measured lengths, in order (cycled)

    @model_validator(mode="after")
    def _check(self):
        if self.kind == "replay":
            if not self.values or any(v < 1 for v in self.values):
                raise ValueError("kind replay needs values: a list of lengths >= 1")
        elif self.tokens is None:
            raise ValueError(f"kind {self.kind} needs tokens (>= 1)")
        if self.max is not None and self.max < self.min:
            raise ValueError(f"max ({self.max}) < min ({self.min})")
        return self

    def _bounds(self) -> tuple[int, int]:
        lo = math.floor(self.tokens * (1 - self.range_ratio))
        return max(lo, 1), math.ceil(self.tokens * (1 + self.range_ratio))

    @property
    def longest(self) -> int | None:
        """The longest length :meth:`sample` can draw (None: unbounded, a lognormal without ``max``)."""
        if self.kind == "replay":
            return max(self.values)
        top = self.tokens if self.kind == "fixed" else self._bounds()[1] if self.kind == "uniform" else None
        top = max(top, self.min) if top is not None else None
        return self.max if top is None else (top if self.max is None else min(top, self.max))

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.kind == "replay":
            v = np.asarray(self.values, np.int64)
            return np.resize(v, n)
        if self.kind == "fixed":
            x = np.full(n, self.tokens, np.int64)
        elif self.kind == "uniform":
            lo, hi = self._bounds()
            x = rng.integers(lo, hi + 1, n)
        else:
            x = np.rint(self.tokens * np.exp(self.sigma * rng.standard_normal(n))).astype(np.int64)
        return np.clip(x, self.min, self.max if self.max is not None else None).astype(np.int64)

    @property
    def mean(self) -> float:
        if self.kind == "replay":
            return float(np.mean(self.values))
        if self.kind == "uniform":
            lo, hi = self._bounds()
            return (lo + hi) / 2
        if self.kind == "lognormal":
            return _clipped_lognormal_mean(math.log(self.tokens), self.sigma, self.min, self.max)
        return float(self.tokens)

    @classmethod
    def lognormal_with_mean(cls, mean: float, sigma: float, lo: int = 1, hi: int | None = None) -> "Lengths":
        """The lognormal of spread ``sigma`` clipped to [lo, hi] whose (clipped) mean is ``mean``: its median solved
        for (rounding to whole tokens aside)."""
        from scipy.optimize import brentq

        hi_ = math.inf if hi is None else hi
        if not lo <= mean <= hi_:
            raise ValueError(f"mean {mean:g} outside the clip range [{lo}, {hi}]")
        if sigma == 0.0 or mean in (lo, hi_):
            return cls(kind="lognormal", tokens=max(1, round(mean)), sigma=sigma, min=lo, max=hi)
        f = lambda mu: _clipped_lognormal_mean(mu, sigma, lo, hi) - mean  # noqa: E731  increasing in mu
        a, b = math.log(lo) - 10 * sigma, math.log(min(hi_, 1e7)) + 10 * sigma
        return cls(kind="lognormal", tokens=max(1, round(math.exp(brentq(f, a, b, xtol=1e-9)))), sigma=sigma,
                   min=lo, max=hi)


def _clipped_lognormal_mean(mu: float, sigma: float, lo: float, hi: float | None) -> float:
    """E[clip(X, lo, hi)] for X = exp(mu + sigma Z): the mass below lo counted at lo, above hi at hi."""
    from scipy.stats import norm

    if sigma == 0.0:
        return float(np.clip(math.exp(mu), lo, hi if hi is not None else math.inf))
    a = (math.log(lo) - mu) / sigma
    b = (math.log(hi) - mu) / sigma if hi is not None else math.inf
    inner = math.exp(mu + sigma**2 / 2) * (norm.cdf(b - sigma) - norm.cdf(a - sigma))
    return float(lo * norm.cdf(a) + inner + (hi * norm.sf(b) if hi is not None else 0.0))


def sharegpt_lengths(mean_input: float = SHAREGPT_MEANS[0], mean_output: float = SHAREGPT_MEANS[1],
                     sigma: float = SHAREGPT_SIGMA) -> tuple[Lengths, Lengths]:
    """(prompt, reply) lengths of vLLM's ShareGPT sample at these per-request means: lognormal of spread ``sigma``,
    clipped as vLLM filters the pairs (module constants)."""
    return (Lengths.lognormal_with_mean(mean_input, sigma, SHAREGPT_MIN, SHAREGPT_MAX_PROMPT),
            Lengths.lognormal_with_mean(mean_output, sigma, SHAREGPT_MIN, SHAREGPT_MAX_TOTAL - SHAREGPT_MIN))


def eos_for_mean(cap: int, mean: float) -> float:
    """The end-of-sequence probability per token p (``eos_per_token``) at which requests capped at ``cap`` tokens
    produce ``mean`` tokens on average: E[min(cap, Geometric(p))] = (1 - (1 - p)^cap) / p, decreasing in p; 0 when
    the mean is the cap (every request runs to it)."""
    from scipy.optimize import brentq

    if not 1.0 <= mean <= cap:
        raise ValueError(f"a mean of {mean} tokens is not within [1, cap = {cap}]")
    lo, hi = 1e-12, 1.0 - 1e-12
    expected = lambda p: -math.expm1(cap * math.log1p(-p)) / p - mean  # noqa: E731  (1 - (1 - p)^cap without cancelling)
    if mean >= cap - 1e-9 or expected(lo) <= 0.0:  # the cap within what the smallest p resolves
        return 0.0
    if expected(hi) >= 0.0:  # one token within what the largest p resolves
        return hi
    return float(brentq(expected, lo, hi))


class SystemPrompts(_Strict):
    count: int = Field(default=1, ge=1, le=1_000_000)  # distinct system prompts, one drawn uniformly per request
    tokens: int = Field(ge=1, le=10_000_000)  # the length of each


class Sessions(_Strict):
    turns: Lengths  # turns per session
    think_time_s: float = Field(default=0.0, ge=0.0)  # mean of the exponential pause between an answer and the next turn


class Stage(_Strict):
    rate_per_s: float = Field(gt=0)
    duration_s: float = Field(gt=0)


class RampUp(_Strict):
    """vLLM's ``--ramp-up-strategy``: the request rate moves from ``start_rps`` to ``end_rps`` over the run."""

    strategy: Literal["linear", "exponential"]
    start_rps: float = Field(gt=0)
    end_rps: float = Field(gt=0)


class ServingWorkload(_Strict):
    """A served workload (module docstring); the scenario field ``serving_workload``."""

    input_tokens: Lengths  # the new message of each request (turn)
    output_tokens: Lengths  # its max_tokens cap
    eos_per_token: float = Field(default=0.0, ge=0.0, lt=1.0)  # early end of sequence: P(stop) after each token
    system_prompts: SystemPrompts | None = None
    sessions: Sessions | None = None
    request_rate: float | Literal["inf"] = "inf"  # vLLM's default: every request at once
    burstiness: float = Field(default=1.0, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1, le=1_000_000)
    stages: list[Stage] | None = Field(default=None, min_length=1)
    ramp_up: RampUp | None = None  # in place of request_rate
    num_prompts: int = Field(default=1000, ge=1, le=10_000_000)  # requests (with sessions: sessions)
    source: str = ""  # where it came from (a command line, a result file)

    @model_validator(mode="after")
    def _check(self):
        if isinstance(self.request_rate, float) and not (self.request_rate > 0 and math.isfinite(self.request_rate)):
            raise ValueError("request_rate must be a number > 0 or 'inf'")
        if self.stages is not None and (self.request_rate != "inf" or self.max_concurrency is not None
                                        or self.ramp_up is not None):
            raise ValueError("stages replace request_rate, ramp_up and max_concurrency: give one or the other")
        if self.ramp_up is not None and (self.request_rate != "inf" or self.sessions is not None):
            raise ValueError("ramp_up sets the request rate (leave request_rate at inf, as vLLM requires) and does not "
                             "start sessions")
        if self.max_concurrency is not None and self.request_rate != "inf" and self.sessions is not None:
            raise ValueError("max_concurrency with a finite request_rate (a capped open loop) and sessions is not "
                             "modelled: use request_rate inf (each of max_concurrency users runs sessions) or no cap")
        return self

    # ---- arrivals -----------------------------------------------------------------------------------
    def at_load(self, rate_per_s: float | None = None, users: int | None = None) -> "ServingWorkload":
        """The same requests at another load (a capacity search's rate, a closed loop of ``users``)."""
        if users is not None:
            return self.model_copy(update={"request_rate": "inf", "max_concurrency": int(users), "stages": None,
                                           "ramp_up": None})
        return self.model_copy(update={"request_rate": float(rate_per_s), "max_concurrency": None, "stages": None,
                                       "ramp_up": None})

    def arrivals(self):
        """The arrival process of requests (with sessions: of sessions)."""
        if self.stages is not None:
            return StagedArrivals(tuple((s.rate_per_s, s.duration_s) for s in self.stages))
        cv = 1.0 / math.sqrt(self.burstiness)
        if self.ramp_up is not None:
            arr = RampArrivals(self.ramp_up.strategy, self.ramp_up.start_rps, self.ramp_up.end_rps, cv)
        elif self.request_rate == "inf":
            if self.max_concurrency is not None:
                return ClosedLoopUsers(self.max_concurrency, 0.0)
            return PoissonArrivals(math.inf)
        else:
            rate = float(self.request_rate)
            arr = BurstyArrivals(rate, cv) if self.burstiness != 1.0 else PoissonArrivals(rate)
        return arr if self.max_concurrency is None else CappedArrivals(arr, self.max_concurrency)

    # ---- requests -----------------------------------------------------------------------------------
    def plans(self, n: int, seed) -> tuple[list, list[list[int]] | None, np.ndarray]:
        """(plans, sessions, think): ``n`` requests (with sessions: n sessions, their turns numbered in order);
        ``sessions`` the request ids of every session's turns (None without sessions), ``think`` each request's
        pause before it is sent after its previous turn (s). Request streams: child 2 of the seed."""
        from simulator.engines.request_model import BASE, Call, RequestPlan

        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(3)[2])
        turns = self.sessions.turns.sample(rng, n) if self.sessions else np.ones(n, np.int64)
        m = int(turns.sum())
        new = self.input_tokens.sample(rng, m)
        cap = self.output_tokens.sample(rng, m)
        out = np.minimum(cap, rng.geometric(self.eos_per_token, m)) if self.eos_per_token > 0 else cap
        sp = self.system_prompts
        which = rng.integers(0, sp.count, n) if sp else np.zeros(n, np.int64)
        think = (rng.exponential(self.sessions.think_time_s, m) if self.sessions and self.sessions.think_time_s > 0
                 else np.zeros(m))
        plans, sessions, rid = [], [], 0
        for s in range(n):
            prefix: tuple = ((("system", int(which[s])), sp.tokens),) if sp else ()
            ids = []
            for k in range(int(turns[s])):
                ctx = sum(t for _key, t in prefix) + int(new[rid])
                publish = ("session", s, k) if self.sessions and k + 1 < turns[s] else None
                call = Call(BASE, ctx, 0, int(out[rid]), prefix=prefix, publish=publish)
                plans.append(RequestPlan([call], 0, int(out[rid]), 1, 0, "length" if out[rid] == cap[rid] else "eos"))
                if publish is not None:  # the next turn's prompt holds this one's message and answer
                    prefix = prefix + ((publish, int(new[rid]) + int(out[rid])),)
                ids.append(rid)
                rid += 1
            sessions.append(ids)
        if self.sessions is None:
            think[:] = 0.0
        return plans, (sessions if self.sessions else None), think

    # ---- vllm bench serve ------------------------------------------------------------------------------
    @classmethod
    def from_command(cls, line: str, where: str = "--bench-serve") -> "ServingWorkload":
        """A ``vllm bench serve`` command line (random dataset; options that do not shape the traffic, such as
        --model or --save-result, are accepted and ignored). Errors name the option."""
        try:
            argv = shlex.split(line)
        except ValueError as e:
            raise InputError(where, None, f"not a command line ({e})") from None
        if not argv:
            raise InputError(where, None, "empty: expected a `vllm bench serve [options]` command line")
        program = []
        while argv and not argv[0].startswith("-"):  # vllm bench serve / python benchmark_serving.py
            program.append(argv.pop(0))
        if program and not _is_bench_program(program):
            raise InputError(where, None, f"{' '.join(program)!r} is not a vllm bench serve command (expected "
                             "`vllm bench serve [options]`, `python benchmark_serving.py [options]` or the options alone)")
        try:
            a, rest = _parser().parse_known_args(argv)
        except argparse.ArgumentError as e:
            raise InputError(where, e.argument_name, str(e.message)) from None
        unknown = [r for r in rest if r.startswith("--") and r.split("=")[0] not in _IGNORED]
        if unknown:
            raise InputError(where, unknown[0], "option not understood as workload shape (known: "
                             + ", ".join(sorted(_SHAPE)) + "; ignored: --model, --save-result, ...)")
        if a.dataset_name not in DATASETS:
            raise InputError(where, "--dataset-name", f"{a.dataset_name!r}: only the {', '.join(DATASETS)} datasets' "
                             "lengths are known here; give the run's result JSON (its measured lengths) or lengths in "
                             "serving_workload")
        try:
            rate = "inf" if a.request_rate in ("inf", "Infinity") else float(a.request_rate)
            d = {**_dataset_lengths(a, where), "request_rate": rate, "burstiness": a.burstiness,
                 "max_concurrency": a.max_concurrency, "ramp_up": _ramp_up(a, where), "source": line.strip()}
            return cls.model_validate(d)
        except (ValueError, ValidationError) as e:
            if isinstance(e, ValidationError):
                raise pydantic_error_to_input_error(where, e) from None
            raise InputError(where, "--request-rate", f"expected a number or inf ({e})") from None

    def to_command(self) -> str:
        """The ``vllm bench serve`` line of this workload (random dataset); InputError if it has no such line."""
        i, o = self.input_tokens, self.output_tokens
        if (i.kind, o.kind) not in (("fixed", "fixed"), ("uniform", "uniform")) or i.range_ratio != o.range_ratio \
                or self.sessions or self.stages or self.eos_per_token or (self.system_prompts and self.system_prompts.count > 1) \
                or i.min != 1 or o.min != 1 or i.max or o.max:
            raise InputError(None, "serving_workload", "only a random-dataset workload (fixed or uniform lengths, one "
                             "shared prefix, one rate) has a vllm bench serve command line")
        parts = ["vllm bench serve --dataset-name random", f"--random-input-len {i.tokens}",
                 f"--random-output-len {o.tokens}"]
        if i.range_ratio:
            parts.append(f"--random-range-ratio {i.range_ratio!r}")
        if self.system_prompts:
            parts.append(f"--random-prefix-len {self.system_prompts.tokens}")
        parts.append(f"--request-rate {self.request_rate!r}" if self.request_rate != "inf" else "--request-rate inf")
        if self.ramp_up is not None:
            r = self.ramp_up
            parts.append(f"--ramp-up-strategy {r.strategy} --ramp-up-start-rps {r.start_rps!r} --ramp-up-end-rps "
                         f"{r.end_rps!r}")
        if self.burstiness != 1.0:
            parts.append(f"--burstiness {self.burstiness!r}")
        if self.max_concurrency is not None:
            parts.append(f"--max-concurrency {self.max_concurrency}")
        parts.append(f"--num-prompts {self.num_prompts}")
        return " ".join(parts)

    @classmethod
    def from_measured(cls, prompt_tokens: list[int], output_tokens: list[int], rate_per_s: float, users: int,
                      source: str, max_concurrency: int | None = None) -> "ServingWorkload":
        """A measured run (a result JSON's per-request lengths, in send order, and its traffic) as a workload:
        the lengths replayed, the arrivals as the run's client made them (an open loop's cap on requests in flight
        ``max_concurrency`` kept)."""
        d = {"input_tokens": {"kind": "replay", "values": [int(x) for x in prompt_tokens]},
             "output_tokens": {"kind": "replay", "values": [max(int(x), 1) for x in output_tokens]},
             "num_prompts": len(prompt_tokens), "source": source}
        if users:
            d.update(request_rate="inf", max_concurrency=int(users))
        else:
            d["request_rate"] = "inf" if math.isinf(rate_per_s) else float(rate_per_s)
            if max_concurrency is not None and math.isfinite(rate_per_s):
                d["max_concurrency"] = int(max_concurrency)
        try:
            return cls.model_validate(d)
        except ValidationError as e:
            raise pydantic_error_to_input_error(source, e) from None


_SHAPE = {"--dataset-name", "--random-input-len", "--random-output-len", "--random-range-ratio", "--random-prefix-len",
          "--request-rate", "--burstiness", "--max-concurrency", "--num-prompts", "--sharegpt-output-len",
          "--prefix-repetition-prefix-len", "--prefix-repetition-suffix-len", "--prefix-repetition-num-prefixes",
          "--prefix-repetition-output-len", "--ramp-up-strategy", "--ramp-up-start-rps", "--ramp-up-end-rps"}
_IGNORED = {"--model", "--tokenizer", "--backend", "--endpoint", "--host", "--port", "--base-url", "--save-result",
            "--save-detailed", "--result-dir", "--result-filename", "--seed", "--trust-remote-code", "--label",
            "--percentile-metrics", "--metric-percentiles", "--ignore-eos", "--disable-tqdm", "--served-model-name",
            "--append-result", "--metadata", "--temperature", "--top-p", "--top-k", "--goodput", "--endpoint-type",
            "--dataset-path", "--num-warmups"}


DATASETS = ("random", "sharegpt", "prefix_repetition")


def _ramp_up(a, where: str) -> dict | None:
    """``--ramp-up-strategy`` with its start and end rates (all three, as vLLM requires), else None."""
    given = [a.ramp_up_strategy, a.ramp_up_start_rps, a.ramp_up_end_rps]
    if all(x is None for x in given):
        return None
    if any(x is None for x in given):
        raise InputError(where, "--ramp-up-strategy", "a ramp-up needs --ramp-up-strategy, --ramp-up-start-rps and "
                         "--ramp-up-end-rps together")
    return {"strategy": a.ramp_up_strategy, "start_rps": a.ramp_up_start_rps, "end_rps": a.ramp_up_end_rps}


def _dataset_lengths(a, where: str) -> dict:
    """The lengths, shared prefixes and request count of a command line's dataset: random (``--random-*``), ShareGPT
    (vLLM's sample at the released runs' means, an assumed spread) or prefix_repetition (vLLM's
    ``PrefixRepetitionRandomDataset``: num_prefixes prefixes of prefix_len tokens, each leading num_prompts //
    num_prefixes prompts of a suffix_len-token suffix, shuffled; here a prefix is drawn per request)."""
    if a.dataset_name == "prefix_repetition":
        n = a.prefix_repetition_num_prefixes
        if n < 1 or a.num_prompts < n:
            raise InputError(where, "--prefix-repetition-num-prefixes", f"expected 1 to --num-prompts ({a.num_prompts})"
                             f" prefixes, as vLLM requires (got {n})")
        return {"input_tokens": {"kind": "fixed", "tokens": a.prefix_repetition_suffix_len},
                "output_tokens": {"kind": "fixed", "tokens": a.prefix_repetition_output_len},
                "system_prompts": {"count": n, "tokens": a.prefix_repetition_prefix_len},
                "num_prompts": a.num_prompts // n * n}
    if a.dataset_name == "sharegpt":
        li, lo = sharegpt_lengths()
        if a.sharegpt_output_len is not None:
            if a.sharegpt_output_len < 1:
                raise InputError(where, "--sharegpt-output-len", f"expected >= 1 (got {a.sharegpt_output_len})")
            lo = Lengths(kind="fixed", tokens=a.sharegpt_output_len)
        d = {"input_tokens": li.model_dump(), "output_tokens": lo.model_dump()}
    else:
        d = {"input_tokens": {"kind": "uniform" if a.random_range_ratio else "fixed", "tokens": a.random_input_len,
                              "range_ratio": a.random_range_ratio},
             "output_tokens": {"kind": "uniform" if a.random_range_ratio else "fixed", "tokens": a.random_output_len,
                               "range_ratio": a.random_range_ratio}}
    if a.random_prefix_len:
        d["system_prompts"] = {"count": 1, "tokens": a.random_prefix_len}
    return {**d, "num_prompts": a.num_prompts}


def _is_bench_program(words: list[str]) -> bool:
    """Whether the words before a command line's first option start ``vllm bench serve``: the ``vllm`` CLI (by any
    path) with ``bench serve``, or a Python interpreter running vLLM's ``benchmark_serving.py``."""
    names = [w.rsplit("/", 1)[-1] for w in words]
    if names[-2:] == ["bench", "serve"]:
        return len(names) >= 3 and names[-3] == "vllm"
    return names[-1] == "benchmark_serving.py" and (len(names) == 1 or re.fullmatch(r"python[0-9.]*", names[0]))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False, exit_on_error=False)
    p.add_argument("--dataset-name", default="random")  # vLLM's default for `vllm bench serve` is random
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=128)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--random-prefix-len", type=int, default=0)
    p.add_argument("--request-rate", default="inf")
    p.add_argument("--burstiness", type=float, default=1.0)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--sharegpt-output-len", type=int, default=None)
    p.add_argument("--ramp-up-strategy", default=None)
    p.add_argument("--ramp-up-start-rps", type=float, default=None)
    p.add_argument("--ramp-up-end-rps", type=float, default=None)
    for name, default in (("prefix-len", 256), ("suffix-len", 256), ("num-prefixes", 10), ("output-len", 128)):
        p.add_argument(f"--prefix-repetition-{name}", type=int, default=default)  # vLLM's defaults
    return p


def parse_workload(data: dict, where: str | None, field: str = "serving_workload") -> ServingWorkload:
    """A ``serving_workload`` mapping (or ``{"command": "vllm bench serve ..."}``), checked; errors name the field."""
    if isinstance(data, str):
        return ServingWorkload.from_command(data, where or field)
    if not isinstance(data, dict):
        raise InputError(where, field, f"expected a mapping or a vllm bench serve command line (got {type(data).__name__})")
    if "command" in data:
        if set(data) != {"command"}:
            raise InputError(where, field, "command stands alone (its options say the whole workload)")
        return ServingWorkload.from_command(str(data["command"]), where or field)
    try:
        return ServingWorkload.model_validate(data)
    except ValidationError as e:
        err = pydantic_error_to_input_error(where, e)
        raise InputError(where, f"{field}.{err.field}" if err.field else field, err.message) from None
