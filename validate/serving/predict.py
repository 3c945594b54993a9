"""Prediction by trace replay: each measured request's plan from its measured token counts, the measured
arrivals (or the same closed-loop users), through the serving simulator; run-level figures of both sides."""

from __future__ import annotations

import numpy as np
import pandas as pd
from pydantic import ValidationError

from simulator.errors import InputError

from .load import ServingRun

MEMORY_FRACTION = (0.3, 0.5)  # scenarios/cpu-smollm2.yaml's split; KV never binds at these batch sizes
# A measured cross-request prefix hit (the engine's cached tokens on a request's first call of an engine: blocks
# of other requests' prompts, a common chat template or system prompt) replays as one shared head segment: every
# such call's first ``cached`` tokens are taken to be the head of one common sequence, so the simulator's prefix
# cache hits them once a call has computed them (simulator.engines.serving.prefix_cache).
SHARED_HEAD = ("measured-shared-head",)


def shared_head(cached_tokens: int) -> tuple:
    """The prefix segments of a replayed first call with ``cached_tokens`` measured hits."""
    return ((SHARED_HEAD, int(cached_tokens)),) if cached_tokens > 0 else ()


def replay_plans(req: pd.DataFrame, spec_cum: dict[tuple[int, int], np.ndarray] | None = None):
    """One base-engine call per measured request (its own token counts); on a speculative run each call's
    iterations (``spec_cum``: tokens produced after each verification, (request, 0) -> cumulative counts)."""
    from simulator.engines.request_model import BASE, Call, RequestPlan

    plans = []
    for r in req.itertuples():
        # the whole prompt is new to the request; its measured hit is a shared head other requests computed
        call = Call(BASE, int(r.prompt_tokens), 0, int(r.output_tokens),
                    None if spec_cum is None else spec_cum[(int(r.request_id), 0)], prefix=shared_head(r.cached_tokens))
        plans.append(RequestPlan([call], int(r.output_tokens), int(r.output_tokens), 1, 0, "length"))
    return plans


def _speculative_calls(run: ServingRun) -> dict[tuple[int, int], int]:
    """(request, call) -> output tokens of every call that speculates: a serve-run request is one call (index 0);
    in a whole-system run, the generate calls of the speculative base engine."""
    if run.calls is None:
        return {(int(r), 0): int(o) for r, o in zip(run.requests.request_id, run.requests.output_tokens)}
    c = run.calls[(run.calls.engine == "base") & (run.calls.op == "generate")]
    return {(int(r), int(i)): int(o) for r, i, o in zip(c.request_id, c.call_index, c.output_tokens)}


def _verifications(run: ServingRun) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Per speculating call, its verification steps in order: (draft tokens verified, output tokens gained). A
    call's prefill step is left out: it produces the first token, as in the simulator."""
    out: dict[tuple[int, int], list[tuple[int, int]]] = {k: [] for k in _speculative_calls(run)}
    if run.calls is not None:
        c = run.calls[(run.calls.engine == "base") & (run.calls.op == "generate")]
        for r, i, ks, es in zip(c.request_id, c.call_index, c.spec_drafts, c.spec_emitted):
            out[(int(r), int(i))] = [(int(k), int(e)) for k, e in zip(ks, es)]
        return out
    prompt = dict(zip(run.requests.request_id, run.requests.prompt_tokens))
    s = run.steps[run.steps.engine == "base"].sort_values("step_index")
    for rids, ctx, spec, em in zip(s.request_ids, s.context_tokens, s.spec_tokens, s.emitted):
        for rid, c, k, e in zip(rids, ctx, spec, em):
            if c >= prompt[rid] and e > 0:
                out[(int(rid), 0)].append((int(k), int(e)))
    return out


def measured_spec_cum(run: ServingRun, reconcile: bool = True) -> dict[tuple[int, int], np.ndarray]:
    """The measured iterations of every speculating call of a run, as the simulator's ``spec_cum``.

    ``reconcile``: the iterations must produce exactly the call's output tokens after its first. A call that
    ends on a stop string drops the tokens accepted after it (the sum can exceed that: the last iteration is
    cut), and a call whose steps were not all seen would never finish (one-token iterations fill the rest)."""
    out = {}
    need = _speculative_calls(run)
    for key, it in _verifications(run).items():
        gains = [e for _k, e in it]
        out[key] = reconciled_cum(gains, need[key]) if reconcile else np.cumsum(gains).astype(np.int64)
    return out


def reconciled_cum(gains, output_tokens: int) -> np.ndarray:
    """A call's ``spec_cum`` from the tokens each of its verifications gained, producing exactly its output tokens
    after the first: cut where it reaches them (a stop string drops the tokens accepted after it), one-token
    iterations added where it falls short (steps not seen, or a re-prefill's token)."""
    n = max(int(output_tokens) - 1, 0)
    c = np.minimum(np.cumsum(gains).astype(np.int64), n)
    c = c[: int(np.searchsorted(c, n)) + 1] if len(c) and c[-1] == n else c
    top = int(c[-1]) if len(c) else 0
    if top < n:
        c = np.concatenate([c, np.arange(top + 1, n + 1, dtype=np.int64)])
    return c


def acceptance_from_runs(runs: list[ServingRun]) -> dict[tuple[int, str], dict]:
    """Per (gamma, draft), a_i = P(at least i drafts accepted) over the verification steps that verified gamma
    drafts (pooled over ``runs`` of that pair): {(gamma, draft): {"a": [...], "iterations": n, "runs": [...]}}."""
    acc: dict[tuple[int, str], list] = {}
    for r in runs:
        if r.client_spec is not None:  # a bench level: its /metrics counts, as verifications (m = accepted drafts)
            n, a = r.client_spec
            cnt = [round(n * x) for x in a] + [0]
            m = [i for i in range(r.gamma + 1) for _ in range((n if i == 0 else cnt[i - 1]) - cnt[i])]
        else:
            m = [e - 1 for it in _verifications(r).values() for k, e in it if k == r.gamma]
        cur = acc.setdefault((r.gamma, r.draft), [[], []])
        cur[0] += m
        cur[1].append(str(r.path))
    out = {}
    for (g, d), (m, paths) in acc.items():
        m = np.asarray(m)
        out[(g, d)] = {"a": [float((m >= i).mean()) if len(m) else 0.0 for i in range(1, g + 1)],
                       "iterations": int(len(m)), "runs": paths}
    return out


def sampled_spec_cum(run: ServingRun, a: list[float], seed: int = 0) -> dict[tuple[int, int], np.ndarray]:
    """Every speculating call's iterations drawn from per-position acceptance ``a`` with the simulator's own rule
    (``simulator.engines.speculative.split_iterations``), each call from its own seeded stream."""
    from simulator.engines.speculative import iteration_cdf, split_iterations

    cdf = iteration_cdf(np.asarray(a, float))
    out = {}
    for (rid, ci), n_out in _speculative_calls(run).items():
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2, rid, ci)))
        _seg, _g, toks = split_iterations(cdf, np.array([max(n_out - 1, 0)]), rng)
        out[(rid, ci)] = np.cumsum(toks).astype(np.int64)
    return out


def accept_lengths(spec: dict[tuple[int, int], np.ndarray], request_ids) -> list[float]:
    """Per request: output tokens per verification over its speculating calls (nan: none verified)."""
    tok: dict[int, float] = {}
    its: dict[int, int] = {}
    for (rid, _ci), c in spec.items():
        tok[rid] = tok.get(rid, 0.0) + (float(c[-1]) if len(c) else 0.0)
        its[rid] = its.get(rid, 0) + len(c)
    return [tok[i] / its[i] if its.get(i) else np.nan for i in request_ids]


def replay_system_plans(calls: pd.DataFrame, requests: pd.DataFrame, spec: dict | None = None):
    """Whole-system runs: each request's measured calls in order, on their engines, with the measured
    prompt / cached / output tokens (block-granular prefix-cache hits included: they are measured); the
    speculating calls with their iterations (``spec``: (request, call) -> cumulative tokens)."""
    from simulator.engines.request_model import BASE, SMALL, Call, RequestPlan

    plans = []
    by_req = {rid: d for rid, d in calls.groupby("request_id", sort=True)}
    for r in requests.itertuples():
        d = by_req[r.request_id]
        # a hit on a request's first call of an engine is another request's prompt blocks: a shared head
        cs, seen = [], set()
        for c in d.itertuples():
            first = c.engine not in seen
            seen.add(c.engine)
            cached = 0 if first else int(c.cached_tokens)
            cs.append(Call(SMALL if c.engine == "small" else BASE, int(c.prompt_tokens) - cached, cached,
                           int(c.output_tokens), (spec or {}).get((int(c.request_id), int(c.call_index))),
                           prefix=shared_head(c.cached_tokens) if first else ()))
        gen = d[d.op == "generate"]
        plans.append(RequestPlan(cs, int(gen.output_tokens.sum()), int(d.output_tokens.sum()), len(gen),
                                 int((gen.engine == "small").sum()), "replay"))
    return plans


def _workload():
    from simulator.inputs.workload import WorkloadProfile

    # only the token bounds matter to a replica serving replayed plans
    return WorkloadProfile.model_validate({
        "name": "serving-replay", "dataset": "replay", "base_model": "smollm2-135m", "small_model": "smollm2-135m-cut6",
        "provenance": {"kind": "prior", "source": "validate/serving/predict.py (replayed plans)"},
        "prompt_tokens": 1, "answer_tokens": 0, "judge_template_tokens": 1, "token_budget": 4096, "max_step_tokens": 4096,
        "steps_per_request": {"base": {"kind": "geometric", "mean": 1, "min": 1, "max": 1}}, "verbosity": 1.0,
        "step_tokens": {"small": {"kind": "lognormal", "median": 8, "sigma": 0.5, "min": 1, "max": 64},
                        "base": {"kind": "lognormal", "median": 8, "sigma": 0.5, "min": 1, "max": 64}},
        "scores": [0.1] * 10, "token_acceptance": [0.5]})


def run_models(run: ServingRun, setup) -> dict:
    """The profile's models per role, with the draft's depth taken from the run when it recorded another one
    (``run.json`` models.draft.num_layers, same width): a 4-layer draft is not costed as the profile's 6-layer one."""
    models = dict(setup.models)
    d = ((run.meta.get("models") or {}).get("draft") or {}) if run.gamma else {}
    n, h = d.get("num_layers"), d.get("hidden_size")
    m = models.get("draft")
    if m is not None and n and int(n) != m.layers and (h is None or int(h) == m.hidden):
        models["draft"] = m.cut(int(n), name=f"{m.name}-as-{int(n)}-layers")
    return models


def run_execution(run: ServingRun):
    """How the measured run's base engine ran: the scheduler limits and prefix caching its run.json records
    (``engine_limits``: serve-run and serve-systems write them; per role for the latter), else vLLM's defaults on its
    device (``Execution.for_device``); a `vllm serve` run's one API server process receives, tokenizes and streams
    every request (``Execution.front_end`` serial)."""
    from simulator.cost.execution import Execution

    lim = (run.meta.get("options") or {}).get("engine_limits") or {}
    lim = lim.get("base", lim)
    try:
        return Execution.from_limits(lim.get("max_num_batched_tokens"), lim.get("max_num_seqs"),
                                     prefix_caching=bool(lim.get("prefix_caching", True)),
                                     front_end="serial" if run.client_side else "concurrent")
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(str(run.path / "run.json"), f"options.engine_limits.{err['loc'][0] if err['loc'] else ''}",
                         f"scheduler limits vLLM would refuse ({err['msg'].removeprefix('Value error, ')})") from None
    except ValueError as e:
        raise InputError(str(run.path / "run.json"), "options.engine_limits", f"expected whole numbers ({e})") from None


def predict_run(run: ServingRun, params, setup, acceptance: list[float] | None = None):
    """(per-request table: measured and predicted, serving result of the simulator).

    A speculative run replays each request's measured iterations, or -- with ``acceptance`` (a_1..a_gamma) --
    iterations drawn from it."""
    from simulator.engines.serving.arrivals import ClosedLoopUsers, ReplayArrivals
    from simulator.engines.serving.replica import simulate_serving
    from simulator.inputs.systems import SystemConfig, spec_of

    spec = None
    if run.gamma and run.client_spec is not None:  # bench level: iterations drawn from its own /metrics acceptance
        spec = sampled_spec_cum(run, acceptance if acceptance is not None else run.client_spec[1])
    elif run.gamma:
        spec = measured_spec_cum(run) if acceptance is None else sampled_spec_cum(run, acceptance)
    if run.calls is not None:
        plans = replay_system_plans(run.calls, run.requests, spec)
        thr = min(10, int(round(run.meta.get("threshold") or 0)))
        cfg = SystemConfig(system=run.system, threshold=thr if spec_of(run.system).scores_steps else None,
                           gamma=run.gamma or None)
    elif run.gamma:
        plans, cfg = replay_plans(run.requests, spec), SystemConfig(system="specdecode", gamma=run.gamma)
    else:
        plans, cfg = replay_plans(run.requests), SystemConfig(system="vanilla-base")
    if run.mode == "closed":
        arrivals = ClosedLoopUsers(run.users, 0.0)
    else:
        arrivals = ReplayArrivals(tuple(float(t) for t in run.requests.arrival_s), run.label)
    res = simulate_serving(cfg, setup.deployments(params, run_models(run, setup)), _workload(), arrivals,
                           len(plans), seed=0, memory_fraction=MEMORY_FRACTION, plans=plans, execution=run_execution(run))
    sim = res.requests.set_index("request")
    t = run.requests[["request_id", "prompt_tokens", "output_tokens", "latency_s", "ttft_s"]].copy()
    t["pred_latency_s"] = sim.loc[t.request_id, "latency_s"].to_numpy()
    t["pred_ttft_s"] = sim.loc[t.request_id, "ttft_s"].to_numpy()
    # TPOT as vLLM's benchmark defines it: (latency - TTFT) / (output tokens - 1), requests with >= 2 tokens
    n1 = (t.output_tokens - 1).where(t.output_tokens > 1)
    t["tpot_s"] = (t.latency_s - t.ttft_s) / n1
    t["pred_tpot_s"] = (t.pred_latency_s - t.pred_ttft_s) / n1
    if run.gamma and run.client_spec is not None:  # a client sees no verifications: the level's 1 + sum a_i
        t["accept_len"] = 1.0 + float(np.sum(run.client_spec[1]))
        t["pred_accept_len"] = accept_lengths(spec, t.request_id)
    elif run.gamma:  # acceptance length: output tokens per verification (vLLM's mean acceptance length)
        t["accept_len"] = accept_lengths(measured_spec_cum(run, reconcile=False), t.request_id)
        t["pred_accept_len"] = accept_lengths(spec, t.request_id)
    return t, res


def measured_itl(run: ServingRun) -> np.ndarray | None:
    """vLLM's ITL measured on a one-engine run (``serve-run``): per request, the gaps between the ends of the
    engine steps that gave it output after its first token (a verification's accepted tokens are one chunk),
    the first gap from its first token. None for whole-system runs (a request spans several calls)."""
    if run.calls is not None:
        return None
    if run.client_side:  # `vllm bench serve`: the client's own per-chunk gaps
        gaps = [np.asarray(v, dtype=float) for v in run.client_itls.values() if len(v)]
        return np.concatenate(gaps) if gaps else np.zeros(0)
    prompt = dict(zip(run.requests.request_id, run.requests.prompt_tokens))
    ends: dict[int, list[float]] = {int(r): [float(t)] for r, t in zip(run.requests.request_id, run.requests.first_token_s)}
    s = run.steps[run.steps.engine == "base"].sort_values("step_index")
    em = s.emitted if "emitted" in s and run.gamma else [None] * len(s)
    for t0, d, rids, ctx, e in zip(s.started_s, s.duration_s, s.request_ids, s.context_tokens, em):
        end = float(t0 + d)
        for i, (rid, c) in enumerate(zip(rids, ctx)):
            if c >= prompt[rid] and (e is None or e[i] > 0):
                ends[int(rid)].append(end)
    gaps = [np.diff(v) for v in ends.values() if len(v) > 1]
    return np.concatenate(gaps) if gaps else np.zeros(0)


def _itl_figures(x: np.ndarray | None) -> dict:
    if x is None or not len(x):
        return {"itl_mean_ms": np.nan, "itl_p50_ms": np.nan, "itl_p99_ms": np.nan}
    return {"itl_mean_ms": float(x.mean() * 1e3), "itl_p50_ms": float(np.median(x) * 1e3),
            "itl_p99_ms": float(np.percentile(x, 99) * 1e3)}


def measured_run_figures(run: ServingRun) -> dict:
    r, s = run.requests, run.steps[run.steps.engine == "base"]
    span = float(r.done_s.max() - r.arrival_s.min())
    return {"throughput_rps": len(r) / span, "output_tok_per_s": float(r.output_tokens.sum()) / span,
            "batch_mean": float(np.average(s.running, weights=s.duration_s)) if len(s) else np.nan, "span_s": span,
            "latency_p50_s": float(r.latency_s.median()), "ttft_p50_s": float(r.ttft_s.median()),
            "prefix_cache_hit_rate": _measured_hit_rate(run), **_itl_figures(measured_itl(run))}


def _measured_hit_rate(run: ServingRun) -> float:
    """Cached / prompt tokens over every call the engine saw (vLLM's prefix_cache_hits / queries); nan when the
    run did not record them (a client sees no cache: imported bench runs say 0)."""
    t = run.calls if run.calls is not None else run.requests
    if "cached_tokens" not in t or not t.prompt_tokens.sum():
        return np.nan
    return float(t.cached_tokens.sum() / t.prompt_tokens.sum())


def predicted_run_figures(res, one_engine: bool = True) -> dict:
    """Run-level figures of a replay; ITL over every round (as measured: the whole run), one-engine runs only."""
    from simulator.engines.serving.metrics import itl_summary

    r = res.requests
    span = float(r.done_at.max() - r.arrival_at.min())
    tl = res.timeline[res.timeline.engine == "base"]
    itl = {"itl_mean_ms": np.nan, "itl_p50_ms": np.nan, "itl_p99_ms": np.nan}
    if one_engine and "itl" in res.info:
        s = itl_summary(*res.info["itl"], since=-np.inf)
        itl = {"itl_mean_ms": s["mean_itl_ms"], "itl_p50_ms": s["median_itl_ms"], "itl_p99_ms": s["p99_itl_ms"]}
    q, h = (sum(v[i] for v in res.info.get("prefix_cache", {}).values()) for i in (0, 1))
    return {"throughput_rps": len(r) / span, "output_tok_per_s": float(r.output_tokens.sum()) / span,
            "batch_mean": float(np.average(tl.batch, weights=tl.duration_s)), "span_s": span,
            "latency_p50_s": float(r.latency_s.median()), "ttft_p50_s": float(r.ttft_s.median()),
            "prefix_cache_hit_rate": h / q if q else np.nan, **itl}

