"""The draft-head study (``specsim study draft-head``; ``docs/draft-head-cpu.md``): the head's and the other drafts'
measurements (``calibrate.measure.study.draft_head_runs``) beside the per-position prediction of their speedup, and
the report (``validate.study.draft_head_report``)."""

from __future__ import annotations

import os
import platform
import statistics
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from calibrate.measure.study.draft_head import validate_gamma
from calibrate.measure.study.draft_head_runs import DraftHeadMeasurements, measure_draft_head
from calibrate.measure.study.experiment import cpu_model
from validate.study.draft_head_report import write_report


def _speedup_rows(cfg: dict, m: DraftHeadMeasurements) -> list[dict]:
    """Measured (wall and CPU time) vs predicted speedup of the head and the n-gram at every timed gamma."""
    from calibrate.measure.study.acceptance import acceptance_length, speedup_per_position

    timed, acc = m.timed, m.acc
    rows = []
    dec = timed["decode_pass_s"]
    for d in ("head", "ngram"):
        for g in cfg["timed_gammas"]:
            rs = [r for r in timed["runs"] if r["draft"] == d and r["gamma"] == g]
            plain = [r for r in timed["runs"] if r["draft"] == "plain" and r["gamma"] == g]
            speed = statistics.median([r["time_s"] for r in plain]) / statistics.median([r["time_s"] for r in rs])
            speed_cpu = statistics.median([r["cpu_s"] for r in plain]) / statistics.median([r["cpu_s"] for r in rs])
            passes = [x for r in rs for x in r["draft_pass_s"]]
            c = statistics.median(passes) / dec if passes else 0.0
            if d == "ngram":  # one lookup per iteration, not per drafted token
                c = c / g
            ver = [s for r in rs for k, s in r["verify_s"] if k == g]
            v = statistics.median(ver) / dec if ver else 1.0  # none timed at this gamma: one decode, as run.py takes it
            a_g = np.array(acc[d]["per_gamma"][g]["a"])
            rows.append({"draft": d, "gamma": g, "measured": speed, "measured_cpu": speed_cpu, "c": c, "v": v,
                         "E_replay": acc[d]["per_gamma"][g]["E"],
                         "E_timed": acceptance_length([x for r in rs[:1] for x in r["log"]]),
                         "predicted": speedup_per_position(a_g, c, v), "predicted_v1": speedup_per_position(a_g, c),
                         "plain_s": [r["time_s"] for r in plain], "spec_s": [r["time_s"] for r in rs],
                         "same_tokens": all(r["same_tokens"] for r in rs)})
            rows[-1]["err"] = rows[-1]["predicted"] / speed - 1
    return rows


def _provenance(cfg: dict, m: DraftHeadMeasurements, command: str) -> dict:
    return {"command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "platform": platform.platform(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "torch": m.versions["torch"], "transformers": m.versions["transformers"], "seed": cfg["seed"], "config": cfg,
            "target": str(m.target_dir), "feature": "output of the final decoder layer, before the final RMSNorm",
            "eval_problems": [p.problem_id for p in m.eval_probs], "train_problems": len(m.train_probs),
            "generated_tokens": int(sum(len(y) for y in m.ys)), "replay_s": m.replay_s,
            "decode_pass_s": m.timed["decode_pass_s"], "loadavg_before_after_timing": m.timed["loadavg"], "runtime_s": None}


def run_draft_head_study(cfg: dict, out: Path, command: str, log=print) -> dict:
    """``specsim study draft-head``: see ``docs/draft-head-cpu.md``. ``cfg`` keys: see ``cli.draft_head``."""
    gammas = list(cfg["gammas"])
    for g in gammas + list(cfg["timed_gammas"]):
        validate_gamma(g, "--gamma")
    gmax = max(gammas)
    t_start = time.perf_counter()
    m = measure_draft_head(cfg, log)
    rows = _speedup_rows(cfg, m)
    prov = _provenance(cfg, m, command)
    head_a = m.acc["head"]["per_gamma"][gmax]["a"]
    result = {"provenance": prov, "train": m.train_rec, "distill": m.distill_rec, "acceptance": m.acc, "speedup": rows,
              "token_acceptance": [float(x) for x in head_a[:8]],
              "token_acceptance_note": "a_i = P(first i head drafts accepted) (calibrate.measure.study.acceptance), replayed at "
                                       f"gamma = {gmax} on the held-out problems; the simulator's workload.token_acceptance"}
    prov["runtime_s"] = time.perf_counter() - t_start
    out.mkdir(parents=True, exist_ok=True)
    write_report(result, out)
    return result
