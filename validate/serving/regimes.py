"""The released serving runs' held-out errors by regime: which kind of `vllm bench serve` run each GPU misses.

Reads a report folder's ``heldout-gpu.csv`` / ``heldout-version.csv`` (``specsim validate serving --released``) and
groups its runs by what decides their figures:

- ``loop``: N users in a closed loop (``--max-concurrency``): per-request latency at a small batch;
- ``burst, ShareGPT``: every ShareGPT prompt at once: queueing, then a large mixed batch;
- ``burst, long prompts``: random prompts of >= 1024 tokens at once: prefill-bound (the GPU's compute rate);
- ``burst, short``: random prompts of <= 256 tokens and <= 16 out at once: admission and host bound;
- ``other``.

Per GPU (or version) and regime: runs, the median |error| and bias of TPOT, ITL, TTFT and output throughput (the
report's own summary: its fitted rows only), and the median measured / predicted throughput (1 = right; < 1 the run
is slower than predicted). The errors are the held-out ones of the report; nothing is refitted here.

    specsim validate serving-regimes reports/serving-released --out reports/serving-released --force
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

REGIMES = ("loop", "burst, ShareGPT", "burst, long prompts", "burst, short", "other")


def regime(row) -> str:
    """The regime of one run (module docstring)."""
    if row["concurrency"] > 0:
        return "loop"
    if row["dataset"] == "sharegpt":
        return "burst, ShareGPT"
    if row["input_tokens"] >= 1024:
        return "burst, long prompts"
    if row["input_tokens"] <= 256 and row["output_tokens"] <= 16:
        return "burst, short"
    return "other"


def summarize(h: pd.DataFrame, by: str) -> pd.DataFrame:
    """Per ``by`` (gpu or version) and regime, and per ``by`` over all regimes: the report's own summary
    (``calibrate.fit.host_fit.summary``: fitted rows only, median and p90 |error| and bias per figure) and the median
    measured / predicted output throughput."""
    from calibrate.fit.host_fit import summary

    need = {by, "in_fit", "concurrency", "dataset", "input_tokens", "output_tokens", "meas_out_tps", "pred_out_tps"}
    missing = sorted(need - set(h.columns))
    if missing:
        raise ValueError(f"columns missing: {', '.join(missing)}")
    h = h.assign(regime=h.apply(regime, axis=1), tps_ratio=h["meas_out_tps"] / h["pred_out_tps"])
    both = pd.concat([h, h.assign(regime="all")])
    both["key"] = both[by].astype(str) + " | " + both["regime"]
    s = summary(both, "key")
    s = s[s["key"] != "all"]
    fitted = both[both["in_fit"]]
    s["measured / predicted tps"] = s["key"].map(fitted.groupby("key")["tps_ratio"].median())
    s[[by, "regime"]] = s["key"].str.split(" | ", n=1, expand=True, regex=False)
    order = {r: i for i, r in enumerate(REGIMES + ("all",))}
    s = s.assign(_o=s["regime"].map(order)).sort_values([by, "_o"]).drop(columns=["key", "_o"])
    keep = [by, "regime", "runs"] + [c for c in s.columns if "median |err|" in c or "bias" in c] + [
        "measured / predicted tps"]
    return s[keep].reset_index(drop=True)


def write(report: Path, out: Path, command: str) -> str:
    """``OUT/regimes.md`` and ``regimes.csv`` from the report's held-out tables; returns the markdown."""
    from simulator.errors import InputError
    from simulator.inputs.loading import write_atomic
    from validate.serving.released import md_table

    parts, frames = [], []
    for fold, by in (("gpu", "gpu"), ("version", "version")):
        f = report / f"heldout-{fold}.csv"
        if not f.is_file():
            raise InputError(str(f), None, "a released serving report's held-out table (specsim validate serving "
                             "--released ... --holdout gpu,version)")
        try:
            s = summarize(pd.read_csv(f, dtype={"version": str}), by)  # "0.10" is a version, not 0.1
        except ValueError as e:
            raise InputError(str(f), None, str(e)) from None
        frames.append(s.assign(fold=fold))
        parts.append(f"## Held out by {fold}\n\n" + md_table(s.assign(**{by: s[by].astype(str)})) + "\n")
    text = ("# Released serving runs: held-out errors by regime\n\n" f"Command: `{command}`\n\n"
            + (__doc__ or "").split("\n\n")[1] + "\n\n" + "\n".join(parts))
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "regimes.md", text)
    write_atomic(out / "regimes.csv", pd.concat(frames).to_csv(index=False, float_format="%.4g"))
    return text
