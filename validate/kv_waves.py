"""KV-bound bursts: the serving simulator's engine against vLLM's scheduler, step for step (``specsim validate kv-waves``).

Each measured burst (:mod:`calibrate.measure.kv_waves`: requests, their lengths, the engine's KV blocks, block size,
token budget; a speculative burst's tokens per verification) is replayed by the serving simulator with the same limits (``Execution.num_gpu_blocks_override``,
``block_size``, ``max_num_batched_tokens``, ``max_num_seqs``, prefix caching on) and its rounds are counted: the
round in which each request gets its first token and finishes, and the preemptions. The costs per round play no
part (counted in rounds, not seconds), so this checks admission, chunked prefill, KV growth, preemption and
re-admission only -- what decides a KV-bound engine's waves of prefill and decode-only stretches.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import InputError

RECORD_KEYS = ("burst", "blocks", "block_size", "engine_limits", "input_tokens", "output_tokens", "first_token_step",
               "finish_step", "steps")


def load_records(path: str | Path) -> dict:
    """A campaign file of :func:`calibrate.measure.kv_waves.measure_campaign` (JSON), checked."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(str(p), None, f"expected a kv-waves records JSON file ({e})") from None
    runs = doc.get("runs") if isinstance(doc, dict) else None
    if not isinstance(runs, list) or not runs:
        raise InputError(str(p), "runs", "expected a non-empty list of measured bursts")
    for i, r in enumerate(runs):
        missing = [k for k in RECORD_KEYS if not isinstance(r, dict) or k not in r]
        if missing:
            raise InputError(str(p), f"runs[{i}]", f"missing {', '.join(missing)}")
        for k in ("blocks", "block_size"):
            if isinstance(r[k], bool) or not isinstance(r[k], int) or r[k] < 1:
                raise InputError(str(p), f"runs[{i}].{k}", f"expected a positive integer (got {r[k]!r})")
        lists = ("input_tokens", "output_tokens", "first_token_step", "finish_step")
        if any(not isinstance(r[k], list) for k in lists) or not r["input_tokens"] or \
                any(len(r[k]) != len(r["input_tokens"]) for k in lists):
            raise InputError(str(p), f"runs[{i}]", "expected one length, first-token and finish step per request")
        bad = [k for k in ("input_tokens", "output_tokens") if any(isinstance(x, bool) or not isinstance(x, int)
                                                                   or x < 1 for x in r[k])]
        if bad:
            raise InputError(str(p), f"runs[{i}].{bad[0]}", "expected positive integers (tokens per request)")
    return doc


def simulate_burst(run: dict) -> dict:
    """The serving simulator's rounds for one measured burst: per request the round of its first token and of its
    finish (1-based, as the measured steps), the rounds in all, the preemptions."""
    from simulator.cost.execution import Execution
    from simulator.engines.serving.arrivals import ReplayArrivals
    from simulator.engines.request_model import BASE, Call, RequestPlan
    from validate.serving.predict import reconciled_cum
    from simulator.engines.serving.replica import simulate_serving
    from simulator.inputs.scenario import load_scenario
    from simulator.inputs.systems import SystemConfig
    from calibrate.fit.released_predict import replay_workload

    ins, outs = [int(x) for x in run["input_tokens"]], [int(x) for x in run["output_tokens"]]
    n = len(ins)
    lim = run["engine_limits"]
    deps = load_scenario("cpu-smollm2").deployments("cpu", 1)
    bs = int(run["block_size"])
    # vLLM caches whole blocks only: the prefix cache's block is the KV block; the engine is stepped in-process (no
    # API server): every call reaches it at once
    ex = Execution(max_num_batched_tokens=int(lim["max_num_batched_tokens"]), max_num_seqs=int(lim["max_num_seqs"]),
                   block_size=bs, num_gpu_blocks_override=int(run["blocks"]), prefix_caching=True,
                   prefix_cache_block=bs, front_end="concurrent")
    shared = run.get("prefix_of") or [None] * n
    head = int(run.get("burst", {}).get("prefix_tokens", 0))
    gamma = int(run.get("burst", {}).get("gamma", 0))
    gains = run.get("tokens_per_verification") or [None] * n
    plans = [RequestPlan([Call(BASE, ins[i], 0, outs[i], reconciled_cum(gains[i], outs[i]) if gamma else None,
                               prefix=((("system", j), head),) if j is not None else ())],
                         0, outs[i], 1, 0, "length") for i, j in enumerate(shared)]
    cfg = SystemConfig(system="specdecode", gamma=gamma) if gamma else SystemConfig(system="vanilla-base")
    res = simulate_serving(cfg, deps, replay_workload(max(max(outs), 64)),
                           ReplayArrivals((0.0,) * n, "burst"), n, 0, (0.0, 0.9), plans=plans, execution=ex)
    tl = res.timeline[res.timeline.engine == "base"].reset_index(drop=True)
    ends = (tl["at"] + tl["duration_s"]).to_numpy()
    rounds = tl["rounds"].to_numpy().cumsum()
    r = res.requests.sort_values("request")
    at_round = lambda t: [int(rounds[i]) for i in np.searchsorted(ends, np.asarray(t) - 1e-9)]  # noqa: E731
    queried, hit = res.info["prefix_cache"]["base"][:2]
    return {"first_token_step": at_round(r.arrival_at + r.ttft_s), "finish_step": at_round(r.done_at),
            "steps": int(rounds[-1]) if len(rounds) else 0, "preemptions": int(res.info["preemptions"]["base"]),
            "hit_rate": hit / queried if queried else 0.0}


def compare(doc: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(per burst, per request): measured vs simulated steps; errors relative to the measured step."""
    bursts, reqs = [], []
    for run in doc["runs"]:
        sim = simulate_burst(run)
        name = run["burst"]["name"]
        steps = len(run["steps"])
        pre = int(sum(s.get("preempted", 0) for s in run["steps"]))
        f_m, f_s = np.asarray(run["finish_step"], float), np.asarray(sim["finish_step"], float)
        t_m, t_s = np.asarray(run["first_token_step"], float), np.asarray(sim["first_token_step"], float)
        for i in range(len(f_m)):
            reqs.append({"burst": name, "request": i, "input_tokens": run["input_tokens"][i],
                         "output_tokens": run["output_tokens"][i], "first_measured": t_m[i], "first_simulated": t_s[i],
                         "finish_measured": f_m[i], "finish_simulated": f_s[i]})
        bursts.append({"burst": name, "requests": len(f_m), "kv_blocks": run["blocks"], "block_size": run["block_size"],
                       "kv_tokens": run["blocks"] * run["block_size"],
                       "demand_tokens": int(sum(run["input_tokens"]) + sum(run["output_tokens"])),
                       "steps_measured": steps, "steps_simulated": sim["steps"],
                       "steps_error": sim["steps"] / steps - 1.0,
                       "preemptions_measured": pre, "preemptions_simulated": sim["preemptions"],
                       "hit_rate_measured": sum(run.get("cached_tokens") or [0]) / sum(run["input_tokens"]),
                       "hit_rate_simulated": sim["hit_rate"],
                       "finish_mean_abs_steps": float(np.mean(np.abs(f_s - f_m))),
                       "finish_max_abs_steps": float(np.max(np.abs(f_s - f_m))),
                       "first_token_mean_abs_steps": float(np.mean(np.abs(t_s - t_m))),
                       "first_token_max_abs_steps": float(np.max(np.abs(t_s - t_m)))})
    return pd.DataFrame(bursts), pd.DataFrame(reqs)


def write_report(folder: Path, doc: dict, bursts: pd.DataFrame, reqs: pd.DataFrame, command: str) -> Path:
    from simulator.inputs.loading import write_atomic

    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "requests.csv", reqs.to_csv(index=False))
    write_atomic(folder / "bursts.csv", bursts.to_csv(index=False))
    pct = lambda x: f"{100 * x:+.1f}%"  # noqa: E731
    lines = ["# KV-bound bursts: the simulator's engine against vLLM's scheduler, in steps", "",
             f"Command: `{command}`", "",
             f"Measured: {doc.get('engine')} {doc.get('vllm_version')}, model {doc.get('model_dir')}, {doc.get('date')} "
             f"({doc.get('host', {}).get('machine')}), by `{doc.get('command', 'unknown')}`; records: `records.json` "
             f"({doc.get('source')}). Simulated: the "
             "serving simulator's engine with the same KV blocks, block size, token budget and max_num_seqs, prefix "
             "caching on; counted in engine steps (rounds), so no cost parameter plays a part.", "",
             "| burst | requests | KV blocks x block size | demand (tokens) | steps measured / simulated | steps error | preemptions "
             "measured / simulated | prefix-cache hit rate measured / simulated | finish step, mean / max abs error "
             "(steps) | first-token step, mean / max abs error (steps) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for b in bursts.itertuples():
        lines.append(f"| {b.burst} | {b.requests} | {b.kv_blocks} x {b.block_size} | {b.demand_tokens} | {b.steps_measured} / "
                     f"{b.steps_simulated} | {pct(b.steps_error)} | {b.preemptions_measured} / {b.preemptions_simulated} "
                     f"| {b.hit_rate_measured:.3f} / {b.hit_rate_simulated:.3f} | {b.finish_mean_abs_steps:.1f} / {b.finish_max_abs_steps:.0f} | {b.first_token_mean_abs_steps:.1f}"
                     f" / {b.first_token_max_abs_steps:.0f} |")
    lines += ["", "Per request: `requests.csv` (lengths, first-token and finish steps, measured and simulated)."]
    return write_atomic(folder / "README.md", "\n".join(lines) + "\n")
