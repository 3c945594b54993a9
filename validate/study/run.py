"""The study pipeline: measure -> predict -> explain -> distil -> transfer -> report.

The measurements come from ``calibrate.measure.study.experiment``; this module puts the three predictions (i.i.d.
closed form, per-position form, full simulator) beside the measured speedups, explains the rejections, carries the
distilled draft's gain over to the reference deployments, and writes the report."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from calibrate.measure.study.experiment import StudyConfig, StudyMeasurements, cpu_model, cut_layers, measure_study
from simulator.inputs.loading import write_atomic

__all__ = ["StudyConfig", "run_study"]


def _sim_layers(draft: str) -> int | None:
    """Draft depth for the simulator: the cut's layers; the full 30 for the bf16 copy."""
    return 30 if draft == "bf16copy" else cut_layers(draft.removesuffix("-distilled"))


def _speedup_rows(cfg: StudyConfig, m: StudyMeasurements, draft: str) -> list[dict]:
    """Measured vs predicted speedup of one draft at every timed gamma."""
    from calibrate.measure.study.acceptance import acceptance_length, speedup_iid, speedup_per_position
    from validate.study import simulate

    timed, acc = m.timed, m.acc
    rs = [r for r in timed["runs"] if r["draft"] == draft]
    c = statistics.median([x for r in rs for x in r["draft_pass_s"]] or [0.0]) / timed["decode_pass_s"]
    if draft in m.ngram:  # a lookup per iteration, not per token
        c = c / max(1, statistics.median(cfg.timed_gammas))
    a_max = np.array(acc[draft]["per_gamma"][max(cfg.gammas)]["a"])
    sim = simulate.simulate_cpu_speedups(a_max, _sim_layers(draft), cfg.timed_gammas) \
        if draft in m.model_drafts else {}
    rows = []
    for g in cfg.timed_gammas:
        rg = [r for r in rs if r["gamma"] == g]
        spec_t = sum(r["time_s"] for r in rg)
        van_t = sum(timed["vanilla_time_s"][r["problem"]] for r in rg)
        ver = [s for r in rg for k, s in r["verify_s"] if k == g]
        v = statistics.median(ver) / timed["decode_pass_s"] if ver else 1.0
        a_g = np.array(acc[draft]["per_gamma"][g]["a"])
        real_log = [x for r in rg for x in r["log"]]
        rows.append({"draft": draft, "gamma": g, "measured": van_t / spec_t, "c": c, "v": v,
                     "E_replay": acc[draft]["per_gamma"][g]["E"], "E_timed": acceptance_length(real_log),
                     "same_tokens": all(r["same_tokens"] for r in rg),
                     "iid": speedup_iid(acc[draft]["alpha"], g, c), "per_position": speedup_per_position(a_g, c),
                     "per_position_v": speedup_per_position(a_g, c, v), "simulator": sim.get(g, float("nan"))})
    return rows


def _transfer(cfg: StudyConfig, acc: dict, log) -> list[dict] | None:
    """The distilled draft's per-position gain carried over to the reference deployments (None without one)."""
    from validate.study import simulate

    if not cfg.train_steps:
        return None
    before = np.array(acc[f"cut{cfg.distill_layers}"]["per_gamma"][max(cfg.gammas)]["a"])
    after = np.array(acc[f"cut{cfg.distill_layers}-distilled"]["per_gamma"][max(cfg.gammas)]["a"])
    log("simulator what-if transfer")
    return simulate.transfer_gain(before, after, list(range(1, 9)))


def _provenance(cfg: StudyConfig, m: StudyMeasurements, command: str, sim_source: str) -> dict:
    return {"command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "hardware": f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPU cores",
            "cpu_model": cpu_model(), "torch": m.versions["torch"], "transformers": m.versions["transformers"],
            "threads": cfg.threads, "dtype": cfg.dtype, "target": str(m.target_dir),
            "drafts": {d: str(p) for d, p in m.draft_dirs.items()}, "seed": cfg.seed, "config": asdict(cfg),
            "eval_problems": [p.problem_id for p in m.eval_probs], "runtime_s": None,
            "simulator_cost_profile": sim_source, "decode_pass_s": m.timed["decode_pass_s"],
            "tf_agreement": float(np.mean(np.concatenate([v.tf_agree for v in m.views]))),
            "generated_tokens": int(sum(len(y) for y in m.ys))}


def run_study(cfg: StudyConfig, out: Path, command: str, log=print) -> dict:
    """Measure, compare with the predictions, explain, transfer; ``out/result.json`` and the report."""
    from validate.study import breakdown, simulate
    from validate.study.report import write_report

    cfg.validate()
    t_start = time.perf_counter()
    m = measure_study(cfg, log)
    sim_source = simulate.cpu_cost_profile()[1]
    rows = [row for d in m.names for row in _speedup_rows(cfg, m, d)]
    for r in rows:
        for k in ("iid", "per_position", "per_position_v", "simulator"):
            r[f"err_{k}"] = r[k] / r["measured"] - 1
    # -- 5. why drafts are rejected
    log("rejection breakdowns")
    tok_bd = {d: breakdown.token_breakdowns(m.tokens, d) for d in m.names}
    steps_bd = breakdown.specreason_step_breakdowns(Path(cfg.traces))
    # -- 6. transfer the distilled gain to the reference deployments
    transfer = _transfer(cfg, m.acc, log)
    prov = _provenance(cfg, m, command, sim_source)
    result = {"provenance": prov, "acceptance": m.acc, "speedup": rows, "distill": m.distill_info, "transfer": transfer,
              "token_breakdowns": {d: {k: v.to_dict(orient="records") for k, v in bd.items()} for d, bd in tok_bd.items()},
              "step_breakdowns": {k: v.to_dict(orient="records") for k, v in steps_bd.items()}}
    prov["runtime_s"] = time.perf_counter() - t_start
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "result.json", json.dumps(result, default=float))  # raw; re-render with write_report
    write_report(result, out)
    return result
