"""The GPU step campaign's plan and its before-the-run predictions (issue 31).

``plan``: the points ``calibrate/gpu_step_bench.py`` times on a lent GPU, per catalog model (shapes from the
catalog, so the bench needs no project import there): decode steps at batch 1-256 and contexts 1k-16k, verification
passes of k+1 = 2..9 tokens, a 1-layer draft head's step, prefill passes, and two eager decode points.

``predict``: the cost model's prediction of every point as it stands (catalog priors of the named GPU,
``simulator/catalog/gpu_priors.yaml``), written *before* the records exist, so the comparison with them is held
out. The bench times the GPU part of an engine step (CUDA events around graph replays, no scheduler), so the
prediction compared is ``device_ms`` = the pass without its host terms (``step``: t_step or a draft's t_draft;
``sequences``: S t_seq); ``pass_ms`` (what an engine step would take) is written beside it.

    python -m calibrate.gpu_step_plan plan --out PLAN.json
    python -m calibrate.gpu_step_plan predict PLAN.json --hardware h200 --out PREDICTED.csv
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

SPEC_FIELDS = ("name", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
               "tie_embeddings", "qkv_bias")


def _points(decode_b, decode_c, verify_n, verify_b, verify_c, head_b, head_c, prefill_n, eager_b):
    pts = []
    for C in decode_c:
        for B in decode_b:
            pts.append({"op": "decode", "batch": B, "new": 1, "context": C})
    for B in verify_b:
        for n in verify_n:
            pts.append({"op": "verify", "batch": B, "new": n, "context": verify_c})
    for C in head_c:
        for B in head_b:
            pts.append({"op": "head", "batch": B, "new": 1, "context": C})
    for n in prefill_n:
        pts.append({"op": "prefill", "batch": 1, "new": n, "context": 0})
    for B in eager_b:
        pts.append({"op": "decode_eager", "batch": B, "new": 1, "context": 1024})
    return pts


# the campaign's models and points: the engine fit's model family (Llama-3.1-8B) in full, the reference system's
# base (QwQ-32B) and small model (R1-Distill-Qwen-1.5B) on lighter grids; seconds per model bound the call
CAMPAIGN = {
    "llama-3.1-8b": dict(points=_points([1, 2, 4, 8, 16, 32, 64, 128, 256], [1024, 4096, 16384], range(2, 10),
                                        [1, 8, 32], 4096, [1, 4, 16, 64], [1024, 4096], [64, 256, 1024, 4096],
                                        [1, 32]), max_seconds=130),
    "r1-distill-qwen-1.5b": dict(points=_points([1, 4, 16, 64, 256], [1024, 4096, 16384], [2, 5, 9], [1, 16], 4096,
                                                [1, 16], [1024], [256, 2048], [1]), max_seconds=50),
    "qwq-32b": dict(points=_points([1, 4, 16, 64, 128], [1024, 4096, 16384], [2, 4, 6, 9], [1, 16], 4096,
                                   [1, 16], [1024], [256, 2048], [1]), max_seconds=140),
}


def make_plan(models=None, max_seconds: float = 330.0, repeats: int = 5) -> dict:
    from simulator.catalog import get_model

    out = {"dtype": "bfloat16", "repeats": repeats, "max_seconds": max_seconds, "reserve_bytes": 8e9, "models": []}
    for name in models or CAMPAIGN:
        m = get_model(name, None, "--model")
        spec = {k: getattr(m, k) for k in SPEC_FIELDS}
        out["models"].append({"spec": spec, **CAMPAIGN[name]})
    return out


def predict(plan: dict, hardware: str, profile=None) -> pd.DataFrame:
    """One row per planned point: the model's prediction, its terms, and ``device_ms`` (no host terms)."""
    from simulator.catalog import get_hardware, get_model
    from simulator.cost_model import Deployment, prior_profile
    from simulator.pass_time import PARTS, draft_deployment

    hw = get_hardware(hardware, None, "--hardware")
    prof = profile or prior_profile(hw)
    params = prof.params(hw)
    rows = []
    for m in plan["models"]:
        model = get_model(m["spec"]["name"], None, "--model")
        target = Deployment(model, hw, 1, params)
        head = draft_deployment(target, "head", params)
        for p in m["points"]:
            B, T, C = p["batch"], p["new"], p["context"]
            dep = head if p["op"] == "head" else target
            logit_rows = B * T if p["op"] == "verify" else B
            bd = dep.pass_breakdown(float(B * T), float(B * (C + T)), float(B * T * (C + (T + 1) / 2)),
                                    float(logit_rows), float(B))
            r = {"model": model.name, "hardware": hw.name, **p, "pass_ms": float(bd["total"]) * 1e3}
            r.update({f"{k}_ms": float(bd[k]) * 1e3 for k in PARTS})
            r["device_ms"] = r["pass_ms"] - r["step_ms"] - r["sequences_ms"]
            rows.append(r)
    df = pd.DataFrame(rows)
    df.attrs["profile"] = prof.name
    return df


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m calibrate.gpu_step_plan", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("plan")
    a.add_argument("--out", required=True)
    a.add_argument("--models", default=None, help="comma-separated catalog names (default: the campaign's)")
    a.add_argument("--max-seconds", type=float, default=330.0)
    b = sub.add_parser("predict")
    b.add_argument("plan")
    b.add_argument("--hardware", required=True)
    b.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    from simulator.errors import InputError

    try:
        if args.cmd == "plan":
            models = args.models.split(",") if args.models else None
            Path(args.out).write_text(json.dumps(make_plan(models, args.max_seconds), indent=1))
        else:
            plan = json.loads(Path(args.plan).read_text())
            df = predict(plan, args.hardware)
            df.to_csv(args.out, index=False, float_format="%.6g")
            print(f"{len(df)} points predicted with {df.attrs['profile']} -> {args.out}")
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
