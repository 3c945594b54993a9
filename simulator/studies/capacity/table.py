"""The planning table: ranks, ties, costs, accuracy, the recommendation and its one-line headline.

Ranking (:func:`capacity_table`): configuration A is *better* than B when the paired t-interval (95%) of their
per-GPU capacity differences over common replications lies above ``EQUIVALENCE`` (5%) of B's capacity (pairs share
the seed: CRN makes the pairing tight, so differences of a few percent can separate for one seed's requests and flip
for another's: below the margin they are ties). ``rank`` = 1 + the number of configurations better than it;
configurations that nothing beats share rank 1 (ties, reported as "within the interval of the best"). A configuration
that sustains no load (capacity 0) is never ranked.

Costs: a replica occupies TP GPUs (both models are colocated on them), so at its capacity R_max (requests/s)

    cost per 1000 requests = 1000 * TP * gpu_hour_cost / (3600 * R_max)
    replicas for a target R = ceil(R / R_max),   GPUs = replicas * TP
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from simulator.inputs.accuracy import accuracy_text, add_accuracy  # noqa: F401  (add_accuracy: re-exported)
from simulator.studies.capacity.search import CONFIDENCE, t_interval

EQUIVALENCE = 0.05  # differences below 5% of the capacity are ties (seed-to-seed spread of a few percent)


def paired_better(a: tuple, b: tuple, tp_a: int = 1, tp_b: int = 1, confidence: float = CONFIDENCE,
                  margin: float = EQUIVALENCE) -> bool:
    """A's per-GPU capacity exceeds B's by more than ``margin`` x B's: the paired t-interval of the
    differences over their common replications (same seeds: common random numbers) lies above that."""
    k = min(len(a), len(b))
    if k < 2:
        return False
    b_gpu = np.asarray(b[:k], float) / tp_b
    d = np.asarray(a[:k], float) / tp_a - b_gpu
    m, half = t_interval(d, confidence)
    return m - half > margin * float(b_gpu.mean())


def rank_configurations(df: pd.DataFrame) -> pd.DataFrame:
    """``rank`` = 1 + configurations significantly better (paired, :func:`paired_better`), and ``ties``:
    the configurations neither better nor worse than it (intervals that do not separate). A configuration
    that sustains no load (capacity 0) is never ranked: ``rank`` NA, no ties."""
    caps = [tuple(c) if isinstance(c, (tuple, list)) else (float(q),) for c, q in zip(df.get("capacities", df.max_qps), df.max_qps)]
    tps = (df.gpus_per_replica if "gpus_per_replica" in df else df.tp).tolist()  # per GPU of a replica
    n = len(df)
    live = [bool(q > 0) for q in df.max_qps]
    better = np.zeros((n, n), bool)  # better[i, j]: i beats j
    for i in range(n):
        for j in range(n):
            if i != j and live[i] and live[j]:
                better[i, j] = paired_better(caps[i], caps[j], tps[i], tps[j])
    df = df.copy()
    df["rank"] = pd.array([1 + int(better[:, j].sum()) if live[j] else None for j in range(n)], dtype="Int64")
    labels = config_names(df, df)
    df["ties"] = ["; ".join(labels[j] for j in range(n) if j != i and live[i] and live[j] and not better[i, j]
                            and not better[j, i] and df["rank"].iloc[j] == df["rank"].iloc[i]) for i in range(n)]
    return df


def mark_recommendation(df: pd.DataFrame) -> tuple[pd.DataFrame, dict]:
    """The one rule behind the table's ``standing`` and ``recommended`` columns and the Best line (:func:`headline`):
    :func:`recommend`'s best and ties. Per row: ``best``, ``within the interval of the best`` (exactly the rows the
    Best line lists), ``below the best``, ``excluded: accuracy ...`` or ``sustains no load``. Returns (the table with
    both columns, the recommendation)."""
    df = df.copy()
    rec = recommend(df)
    best = rec["best"]
    best_key = config_key(best) if best is not None else None
    meets = (df.accuracy_floor == "meets").tolist() if "accuracy_floor" in df else [True] * len(df)
    st, picked = [], []
    for r, ok in zip(df.itertuples(), meets):
        key = config_key(r)
        if not r.max_qps > 0:
            st.append("sustains no load")
        elif not ok:
            st.append(f"excluded: accuracy {r.accuracy_floor}")
        elif key == best_key:
            st.append("best")
        elif key in rec["tie_keys"]:
            st.append("within the interval of the best")
        else:
            st.append("below the best")
        picked.append(st[-1] in ("best", "within the interval of the best"))
    df["standing"] = st
    df["recommended"] = picked
    return df, rec


def capacity_table(rows: list[dict], gpu_hour_cost: float | None, target_qps: float | None,
                   currency: str = "USD") -> pd.DataFrame:
    """Rows of ``capacity_interval`` (or ``search_capacity``) -> one line per configuration with costs (in
    ``currency``, column ``currency``), ranks and ties; best (rank, then mean capacity per GPU) first."""
    df = pd.DataFrame(rows)
    df["gpus_per_replica"] = df.tp * (df.pp if "pp" in df else 1) * (df.dp if "dp" in df else 1)  # tp x pp x dp
    df["qps_per_gpu"] = df.max_qps / df.gpus_per_replica
    with np.errstate(divide="ignore"):
        df["cost_per_1000_requests"] = (1000.0 * df.gpus_per_replica * gpu_hour_cost / (3600.0 * df.max_qps)
                                        if gpu_hour_cost else np.nan)
    if gpu_hour_cost:
        df["currency"] = currency
    if target_qps:
        df["replicas"] = replicas_for(target_qps, df.max_qps)
        df["gpus"] = df.replicas * df.gpus_per_replica
        if "max_qps_lo" in df:  # at the interval's lower bound: the replicas the target needs if capacity is that low
            df["replicas_lo"] = replicas_for(target_qps, df.max_qps_lo)
            df["gpus_lo"] = df.replicas_lo * df.gpus_per_replica
        if gpu_hour_cost:
            df["fleet_cost_per_hour"] = df.gpus * gpu_hour_cost
    df = rank_configurations(df)
    df = df.sort_values(["rank", "qps_per_gpu", "max_qps"], ascending=[True, False, False], kind="stable",
                        na_position="last").reset_index(drop=True)
    df = mark_recommendation(df)[0]
    for c in ("gamma", "threshold"):
        df[c] = pd.array([None if v is None or v != v else int(v) for v in df[c]], dtype="Int64")
    return df


def replicas_for(target_qps: float, capacity) -> list[float]:
    """Replicas that serve ``target_qps`` at each capacity: ceil(target / capacity); NaN where it is 0 or unknown (a
    lower bound of 0: no number of replicas is shown to be enough)."""
    with np.errstate(divide="ignore", over="ignore"):
        need = [target_qps / q if q > 0 else np.inf for q in capacity]
    return [float(math.ceil(n)) if math.isfinite(n) else np.nan for n in need]


def recommend(df: pd.DataFrame) -> dict:
    """The recommendation among configurations that meet the accuracy floor: the best by rank (ties
    listed), or None. Configurations with capacity 0 are never recommended."""
    ok = df[(df.accuracy_floor == "meets") & (df.max_qps > 0)] if "accuracy_floor" in df else df[df.max_qps > 0]
    if not len(ok):
        return {"best": None, "ties": [], "tie_keys": set(), "capacity": 0.0}
    ok = rank_configurations(ok.drop(columns=["rank", "ties", "standing", "recommended"], errors="ignore"))
    ok = ok.sort_values(["rank", "qps_per_gpu"], ascending=[True, False], kind="stable", na_position="last")
    b = ok.iloc[0]
    tied = ok.iloc[1:][(ok["rank"].iloc[1:] == 1).fillna(False).to_numpy(bool)]
    return {"best": b, "ties": config_names(tied, df), "tie_keys": {config_key(r) for r in tied.itertuples()},
            "capacity": float(b.max_qps), "eligible": ok}


def config_key(r) -> tuple:
    """What tells the rows of a capacity table apart: the configuration's label on its hardware and TP -- of a table
    row, or of a search point (``capacity.search.Point``: the row it becomes has the same key)."""
    label = r.cfg.label if hasattr(r, "cfg") else r.label
    return (label, str(r.hardware), int(r.tp))


def config_names(rows: pd.DataFrame, table: pd.DataFrame) -> list[str]:
    """How ``rows`` of ``table`` are named in ties and recommendations: the label, with its hardware and TP where the
    table's grid has several (a label alone would name several rows)."""
    many = table.hardware.nunique() > 1 or table.tp.nunique() > 1
    return [f"{l} [{h} tp={t}]" if many else l for l, h, t in zip(rows.label, rows.hardware, rows.tp)]


EXACT_TRAFFIC = ("benchmark traffic: every configuration decodes it exactly (plain or speculative decoding, whose "
                 "verification keeps the base model's output distribution), so accuracy does not separate them")


def headline(df: pd.DataFrame, rec: dict, slo_text: str, gpu_hour_cost: float | None = None, currency: str = "USD",
             target_qps: float | None = None, exact: bool = False) -> str:
    """One line: the best configuration and why (capacity with its interval, accuracy, cost) -- the first
    line of every report and the line ``specsim capacity`` prints under its table. ``exact``: the requests are a
    serving benchmark's (a serving workload), which every configuration decodes exactly, so the reasoning workload's
    accuracy is not quoted (:data:`EXACT_TRAFFIC`)."""
    b = rec["best"]
    if b is None:
        return (f"No configuration to recommend: none meets the accuracy floor with a capacity above 0 under {slo_text}.")
    dev = "CPU host" if str(b.hardware) == "cpu" else "GPU"
    ci = (f" [{b.max_qps_lo:.3g}, {b.max_qps_hi:.3g}]" if "max_qps_hi" in b and np.isfinite(b.max_qps_hi) else "")
    conv = "" if bool(b.get("converged", True)) else ", interval not converged"
    if exact:
        acc = EXACT_TRAFFIC
    else:
        acc = accuracy_text(float(b.get("accuracy", np.nan)), b.accuracy_why)
    cost = (f"; {b.cost_per_1000_requests:.3g} {currency} per 1000 requests at {gpu_hour_cost:g} {currency} per {dev}-hour"
            if gpu_hour_cost and np.isfinite(b.get("cost_per_1000_requests", np.nan)) else "")
    fleet = ""
    if target_qps and np.isfinite(b.get("replicas", np.nan)):
        unit = "CPU host" if dev == "CPU host" else "GPU"
        fleet = f"; {target_qps:g} req/s takes {b.replicas:.0f} replica(s) = {b.gpus:.0f} {unit}(s)"
        if "replicas_lo" in b and not np.isfinite(b.replicas_lo):
            fleet += " (no count is shown to suffice: the interval's lower bound is 0)"
        elif np.isfinite(b.get("replicas_lo", np.nan)) and b.replicas_lo != b.replicas:
            fleet += f" ({b.replicas_lo:.0f} = {b.gpus_lo:.0f} at the interval's lower bound)"
    ties = (f"; within the interval of the best: {', '.join(rec['ties'])}" if rec["ties"] else "; no other configuration "
            "within its interval")
    return (f"Best: {b.label} on {b.hardware} {parallelism(b)}: {b.max_qps:.3g} req/s per replica{ci} (95% interval{conv}) "
            f"under {slo_text}, {b.qps_per_gpu:.3g} req/s per {dev}; {acc}{cost}{fleet}{ties}.")


def parallelism(row) -> str:
    """``TP=t`` of a configuration row (or any mapping with ``tp`` and optional ``pp``, ``dp``, ``ep``), ``TP=t x
    PP=p`` with pipeline stages, ``x DP=d`` with data-parallel attention, ``, EP=e`` with expert parallelism."""
    pp, dp, ep = (int(row.get(k, 1) or 1) for k in ("pp", "dp", "ep"))
    return (f"TP={row['tp']}" + (f" x PP={pp}" if pp > 1 else "") + (f" x DP={dp}" if dp > 1 else "")
            + (f", EP={ep}" if ep > 1 else ""))


DISPLAY = {
    "label": "configuration", "hardware": "hw", "tp": "tp", "rate_qps": "offered/s", "users": "users",
    "rank": "rank", "max_qps": "max req/s", "max_qps_lo": "lo", "max_qps_hi": "hi", "qps_per_gpu": "req/s/GPU",
    "replications": "reps", "converged": "±10%", "accuracy": "accuracy", "accuracy_lo": "acc lo", "accuracy_hi": "acc hi",
    "accuracy_floor": "acc floor", "recommended": "pick", "latency_mean_s": "mean s", "latency_p99_s": "p99 s",
    "ttft_mean_s": "TTFT s", "queue_delay_mean_s": "queue s", "goodput_qps": "goodput/s", "slo_met": "SLO",
    "base_batch_mean": "base batch", "small_batch_mean": "small batch", "base_utilization": "base util",
    "small_utilization": "small util", "base_kv_occupancy_max": "base KV max", "cost_per_1000_requests": "cost/1000 req",
    "replicas": "replicas", "replicas_lo": "replicas at lo", "gpus": "GPUs", "gpus_lo": "GPUs at lo",
    "evaluations": "sims", "window_throughput_qps": "thr/s",
    "throughput_ratio": "thr/offered", "queue_growth": "queue growth", "latency_drift": "drift", "latency_growth": "growth",
}


def render_capacity_table(df: pd.DataFrame, title: str) -> None:
    from rich.table import Table

    from simulator.report.report_table import print_rich_table

    keep = {"accuracy", "accuracy_floor"}
    cols = [c for c in DISPLAY if c in df.columns and (c in keep or not df[c].isna().all())]
    t = Table(title=title)
    for c in cols:
        t.add_column(DISPLAY[c], justify="left" if c in ("label", "hardware") else "right")
    for row in df[cols].itertuples(index=False):
        t.add_row(*(("unknown" if c.startswith("accuracy") else "-") if v is None or v is pd.NA or (isinstance(v, float) and v != v)
                    else f"{v:.3g}" if isinstance(v, (float, np.floating)) else str(v) for c, v in zip(cols, row)))
    print_rich_table(t)
