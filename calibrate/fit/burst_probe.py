"""What the released H100/H200 bursts say about their own admission: the checks behind
docs/serving-model.md's "Where it stops", each a table anyone can rerun.

``specsim measure burst-probe engines`` -- per GPU and serving engine (vLLM, SGLang, TensorRT-LLM) over the
table's bursts of >= 900 requests producing > 100 tokens each: the sequences the run streamed per median gap,
``B_eff = output tok/s x median ITL`` (Little's law at the median step: the decoding batch if every running
sequence got a token every step) and mean TTFT as a share of the run's duration. Raw measurements, no model.

``specsim measure burst-probe prefill`` -- the released vLLM bursts that are nearly all prefill (1000 x ~128
tokens in, 4 out): the matmul work 2 x active parameters x prompt tokens, per GPU, over the run's whole duration, as
a share of the GPU's dense BF16 peak -- a lower bound on the rate the engine's compute-bound passes reached.

``specsim measure burst-probe intake`` -- per doc, the bursts of ~1000 prompts of ~128 tokens with 4 tokens out
(nearly all intake and prefill) per serving engine on the same machine and client: milliseconds of the run per
request and mean TTFT as a share of the run; and each engine's mean TTFT at 4 closed-loop users. Raw measurements, no
model: where vLLM's time per request is far above another engine's on the same doc, the difference is vLLM's own
per-request cost, not the GPU's.

``specsim measure burst-probe two-stage`` -- each doc's bursts (>= 16 tokens out) predicted with the front end its own
4-token burst shows (a separate run of the same doc, server and TP): c = that run's duration per request, s = 2 x its
mean TTFT / duration - 1 (a one-stage serial front end gives a share of ~1/2, one that parses the whole burst before
letting any request on gives ~1), as the serving replica's two-stage front end (``front_end_first_share``); beside
the host terms' own one-stage serial front end. Host terms per GPU held out (``--fits``: a ``fits-gpu.json`` of the released validation) or the catalog's.

``specsim measure burst-probe typical`` -- the released vLLM bursts (>= 900 requests, > 100 tokens out each) as the
typical request sees them: mean and median TPOT over requests (the table has both), measured and predicted with the
catalog's terms, and the share of the run over which the burst's first tokens spread (2 x median TTFT / duration, ~1
when requests are admitted evenly over the whole run, small when all are admitted at once). Where the median TPOT is
missed as much as the mean, the miss is in every request's gaps, not in a few short requests' stalls. Then a
summary per GPU group (A100; H100/H200), the figures docs/results.md quotes.

``specsim measure burst-probe what-if`` -- the serving simulator's errors on groups of released vLLM runs
under the catalog's host terms and under one changed assumption at a time: a serial front end that also pays
``front_end_token_s`` per streamed token (with a smaller per-sequence step cost t_seq, as the bursts' median ITL
asks), vLLM's A100 batching caps (256 sequences) on the H100/H200, the H100/H200 compute efficiency scaled, and
random-dataset requests that end early (`vllm bench serve` does not ignore EOS: a run's mean output below its cap,
``gpustack_import.output_caps``) with a constant end-of-sequence probability per token at the run's mean.
In-sample screens (the catalog's own fit), not held-out figures.

``specsim measure burst-probe admission`` -- each burst (>= 16 tokens out) of a doc with a 4-token burst at its TP
(the probe), with the catalog's terms: measured / predicted mean TTFT, mean TPOT and output throughput, the
prompts one step's token budget holds (``max_num_batched_tokens`` / prompt), the predicted peak KV share and
preemptions, and the probe's measured / predicted duration; then the rank correlation (Spearman) of the probe's ratio
and of the prompts per step with each figure's ratio over the bursts. A burst whose doc's probe runs slower than
predicted is a burst whose admission is slower: a deployment's own cost per new request, which neither its GPU nor
its version predicts (docs/history.md, 2026-12-02)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.fit.gpustack_import import GPUSTACK, TABLE, ReleasedRun, released_runs
from calibrate.fit.host_fit import big_burst, catalog_terms, in_fit, intake_probe, is_intake_probe, nearest, probe_intake

ENGINES = (("vllm", "vllm serve"), ("sglang", "python3 -m sglang"), ("trtllm", "trtllm-serve"))
FIGS = ("out_tps", "ttft_ms", "itl_ms", "tpot_ms")


def is_burst(requests: float, out_tok: float, concurrency) -> bool:
    """A burst of the kind the H100/H200 rows miss: >= 900 requests at once, > 100 output tokens each."""
    return big_burst(requests, concurrency) and out_tok / requests > 100


def run_is_burst(run: ReleasedRun) -> bool:
    """:func:`is_burst` of a released run."""
    return is_burst(run.requests, run.requests * run.output_tokens, run.concurrency)

def engines_table(folder: Path | str = GPUSTACK) -> pd.DataFrame:
    """Per (gpu, engine): bursts, median / min / max of B_eff, median of mean TTFT / duration, median output tok/s."""
    d = _engine_rows(folder)
    d = d[[is_burst(r.requests, r.out_tok, r.max_concurrency) for r in d.itertuples()]].copy()
    d["gpu"] = d.file.str.extract(r"__(\w+)\.md", expand=False)
    d["b_eff"] = d.out_tps * d.median_itl_ms / 1e3
    d["ttft_share"] = d.mean_ttft_ms / 1e3 / d.duration_s
    g = d.groupby(["gpu", "engine"])
    return pd.DataFrame({"bursts": g.size(), "b_eff_median": g.b_eff.median(), "b_eff_min": g.b_eff.min(),
                         "b_eff_max": g.b_eff.max(), "ttft_share_median": g.ttft_share.median(),
                         "out_tps_median": g.out_tps.median()}).reset_index()


def _engine_rows(folder: Path | str) -> pd.DataFrame:
    d = pd.read_csv(Path(folder) / TABLE)
    cmd = d.serve_cmd.fillna("")
    d["engine"] = "other"
    for name, prefix in ENGINES:
        d.loc[cmd.str.startswith(prefix), "engine"] = name
    return d


def intake_table(folder: Path | str = GPUSTACK) -> pd.DataFrame:
    """Per doc and engine: its 4-token bursts (>= 900 prompts, < 10 tokens out each, at once; median over the doc's
    such runs) as ms of run per request and mean TTFT / duration, and its mean TTFT at 4 closed-loop users (median)."""
    d = _engine_rows(folder)
    burst = d[[intake_probe(r.requests, r.out_tok / r.requests, r.max_concurrency) for r in d.itertuples()]].assign(
        ms_per_request=lambda x: x.duration_s / x.requests * 1e3, ttft_share=lambda x: x.mean_ttft_ms / 1e3 / x.duration_s)
    loop = d[d.max_concurrency == 4]
    g = burst.groupby(["file", "engine"])
    out = pd.DataFrame({"bursts": g.size(), "ms_per_request": g.ms_per_request.median(),
                        "ttft_share": g.ttft_share.median()})
    out["ttft_ms_4_users"] = loop.groupby(["file", "engine"]).mean_ttft_ms.median()
    return out.reset_index().sort_values(["file", "engine"]).reset_index(drop=True)


def prefill_table(runs: list[ReleasedRun]) -> pd.DataFrame:
    """Per released vLLM burst of < 10 output tokens per request: its duration and the share of the GPU's dense
    BF16 peak its prompts' matmuls (2 x active parameters per token, attention left out) took over it, per GPU."""
    rows = []
    for r in runs:
        if r.concurrency is not None or r.output_tokens >= 10:
            continue
        rows.append({"run": r.key, "version": r.version, "gpu": r.gpu, "model": r.model, "tp": r.tp,
                     "duration_s": r.measured["duration_s"], "mean_ttft_s": r.measured["mean_ttft_ms"] / 1e3,
                     "share_of_peak": r.peak_matmul_s(r.input_tokens * r.requests) / r.measured["duration_s"]})
    return pd.DataFrame(rows).sort_values(["gpu", "model"]).reset_index(drop=True)


def predict(run: ReleasedRun, host: dict | None = None, eta_scale: float = 1.0, caps: tuple | None = None,
            early_end: bool = False) -> dict:
    """The simulator's figures of ``run`` with the catalog's host terms of its version updated by ``host``, the
    compute efficiencies (dense and MoE) x ``eta_scale`` on an H100 / H200, ``caps`` = (max_num_seqs,
    max_num_batched_tokens) replacing the run's batching on an H100 / H200, and with ``early_end`` a random-dataset
    run's requests ending early at its measured mean (:func:`calibrate.fit.released_predict.run_workload`)."""
    from calibrate.fit.released_predict import predict_released

    hot = run.gpu != "a100-80gb"
    if caps is not None and hot:
        run = replace(run, max_num_seqs=caps[0], max_num_batched_tokens=caps[1])
    return predict_released(run, host, early_end=early_end, eta_scale=eta_scale if hot else 1.0)


GROUPS = {
    "h100/h200 bursts": lambda r: r.gpu != "a100-80gb" and run_is_burst(r),
    "h100/h200 long prompts": lambda r: r.gpu != "a100-80gb" and r.input_tokens >= 1000 and in_fit(r),
    "a100 (fitted rows)": lambda r: r.gpu == "a100-80gb" and in_fit(r),
    "random dataset (fitted rows)": lambda r: r.dataset == "random" and in_fit(r),
    "every fitted row": in_fit,
}
VARIANTS = {
    "catalog": {},
    # the API server's streaming cost per token t_tok under the catalog's own front end (two stages where its version
    # has them): 50 us, and 150 us, vLLM 0.32's API server on this project's CPU (reports/front-end-cpu)
    "t_tok 50 us": {"host": {"front_end_token_s": 5e-5}},
    "t_tok 150 us": {"host": {"front_end_token_s": 1.5e-4}},
    # run when a streaming cost needed a one-stage front end: these set the catalog's two-stage share s to 0
    "t_seq 30 us + t_tok 200 us": {"host": {"seq_overhead_s": 3e-5, "front_end_token_s": 2e-4,
                                            "front_end_first_share": 0.0}},
    "t_seq 60 us + t_tok 100 us": {"host": {"seq_overhead_s": 6e-5, "front_end_token_s": 1e-4,
                                            "front_end_first_share": 0.0}},
    "H100/H200 at 256 seqs / 8192 tokens": {"caps": (256, 8192)},
    "H100/H200 compute efficiency x 0.6": {"eta_scale": 0.6},
    "random-dataset requests end early (EOS per token)": {"early_end": True},
}


def what_if(runs: list[ReleasedRun], groups: list[str], variants: list[str]) -> pd.DataFrame:
    """Per group and variant: runs, median |error| and median signed error (bias) of output throughput, mean TTFT,
    median ITL and mean TPOT, in %."""
    rows = []
    for g in groups:
        sel = [r for r in runs if GROUPS[g](r)]
        for v in variants:
            err = np.array([[p[f] / m[f] - 1 for f in FIGS] for r in sel
                            for p, m in [(predict(r, **VARIANTS[v]), _measured(r))]]) * 100
            row = {"group": g, "variant": v, "runs": len(sel)}
            for i, f in enumerate(FIGS):
                row[f"{f} median |err| %"] = float(np.median(np.abs(err[:, i]))) if len(sel) else np.nan
                row[f"{f} bias %"] = float(np.median(err[:, i])) if len(sel) else np.nan
            rows.append(row)
    return pd.DataFrame(rows)


def typical_table(runs: list[ReleasedRun]) -> pd.DataFrame:
    """Per released vLLM burst (:func:`is_burst`): measured and predicted mean / median TPOT over requests, their
    ratios, and the admission share 2 x median TTFT / duration, measured and predicted (catalog terms)."""
    from calibrate.fit.released_predict import predict_released

    rows = []
    for r in runs:
        if not run_is_burst(r):
            continue
        p, m = predict_released(r), r.measured
        rows.append({"run": r.key, "gpu": r.gpu, "tp": r.tp, "mean_tpot_ms": m["mean_tpot_ms"],
                     "pred_mean_tpot_ms": p["tpot_ms"], "median_tpot_ms": m["median_tpot_ms"],
                     "pred_median_tpot_ms": p["median_tpot_ms"],
                     "median_ratio": m["median_tpot_ms"] / p["median_tpot_ms"],
                     "mean_ratio": m["mean_tpot_ms"] / p["tpot_ms"],
                     "admission_share": 2 * m["median_ttft_ms"] / 1e3 / m["duration_s"],
                     "pred_admission_share": 2 * p["median_ttft_ms"] / 1e3 / p["duration_s"]})
    return pd.DataFrame(rows)


def typical_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per GPU group (the A100, capped at 256 sequences; the H100/H200, at 1024) over :func:`typical_table`'s bursts:
    runs, the median (and range) of measured / predicted median TPOT, the median of the mean TPOT's ratio, and the
    median admission share measured and predicted."""
    group = np.where(table.gpu == "a100-80gb", "a100", "h100/h200")
    return pd.DataFrame([{"gpus": g, "bursts": len(t), "median_tpot_ratio": t.median_ratio.median(),
                          "min": t.median_ratio.min(), "max": t.median_ratio.max(),
                          "mean_tpot_ratio": t.mean_ratio.median(), "admission_share": t.admission_share.median(),
                          "pred_admission_share": t.pred_admission_share.median()}
                         for g, t in table.groupby(group)])


def _measured(run: ReleasedRun) -> dict:
    from calibrate.fit.released_predict import measured_figures

    return measured_figures(run)


def _probes(runs: list[ReleasedRun]) -> dict[str, list[ReleasedRun]]:
    out: dict[str, list[ReleasedRun]] = {}
    for r in runs:
        if is_intake_probe(r):
            out.setdefault(r.doc, []).append(r)
    return out


NO_PROBE = "no burst of >= 16 tokens out has a 4-token burst of its doc at its TP"


def _probe_for(run: ReleasedRun, probes: dict[str, list[ReleasedRun]]) -> ReleasedRun | None:
    """The 4-token burst of ``run``'s doc at its TP, the same async setting where the doc has one (None: no probe)."""
    same = [p for p in probes.get(run.doc, []) if p.tp == run.tp]
    return min(same, key=lambda p: p.async_scheduling != run.async_scheduling) if same else None


def two_stage_table(runs: list[ReleasedRun], fits: dict | None = None) -> pd.DataFrame:
    """Per burst of >= 16 tokens out whose doc has a 4-token burst (the probe: same TP, the same async setting where
    it has one): signed errors of TPOT, TTFT, output throughput and median ITL with the host terms' serial front end
    (``as fitted``) and with the probe's two-stage intake (``two-stage``). ``fits``: {gpu: {version: host terms}}
    fitted without that GPU (``fits-gpu.json``); None: the catalog's terms."""
    from calibrate.fit.released_predict import measured_figures, predict_released

    probes, rows = _probes(runs), []
    for r in runs:
        probe = _probe_for(r, probes)
        if not in_fit(r) or r.concurrency is not None or probe is None:
            continue
        h = nearest(r.version, fits.get(r.gpu, {})) if fits is not None else None
        host = catalog_terms(h) if h else None
        c, share = probe_intake(probe)
        m = measured_figures(r)
        row = {"run": r.key, "probe": probe.key, "gpu": r.gpu, "version": r.version, "c_ms": c * 1e3, "s": share}
        for name, kw in (("as fitted", {}), ("two-stage", {"intake": (c, share)})):
            p = predict_released(r, host, **kw)
            row.update({f"{name}: {f}": p[f] / m[f] - 1.0 for f in ("tpot_ms", "ttft_ms", "out_tps", "itl_ms")})
        rows.append(row)
    return pd.DataFrame(rows)


def two_stage_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per GPU and overall: runs and median |error| (%) of each figure under each front end."""
    cols = [c for c in table.columns if ": " in c]
    parts = [(g, sub) for g, sub in table.groupby("gpu")] + [("all", table)]
    return pd.DataFrame([{"gpu": g, "runs": len(sub), **{c: 100 * float(np.median(np.abs(sub[c]))) for c in cols}}
                         for g, sub in parts])


ADMISSION_FIGS = (("ttft", "ttft_ms"), ("tpot", "tpot_ms"), ("out_tps", "out_tps"))


def admission_table(runs: list[ReleasedRun]) -> pd.DataFrame:
    """Per burst of >= 16 tokens out whose doc has a 4-token burst at its TP: measured / predicted mean TTFT, mean
    TPOT and output throughput (catalog terms), the prompts per step's token budget, the predicted peak KV share and
    preemptions, and the probe's measured / predicted duration (module docstring)."""
    from calibrate.fit.released_predict import measured_figures, predict_released

    probes, rows, probe_ratio = _probes(runs), [], {}
    for r in runs:
        probe = _probe_for(r, probes)
        if not in_fit(r) or r.concurrency is not None or probe is None:
            continue
        if probe.key not in probe_ratio:
            probe_ratio[probe.key] = probe.measured["duration_s"] / predict_released(probe)["duration_s"]
        p, m = predict_released(r), measured_figures(r)
        rows.append({"run": r.key, "gpu": r.gpu, "model": r.model, "tp": r.tp, "dataset": r.dataset,
                     "prompts_per_step": r.max_num_batched_tokens / r.input_tokens,
                     **{f"{name}_ratio": m[f] / p[f] for name, f in ADMISSION_FIGS},
                     "kv_peak_share": p["kv_peak_share"], "preemptions": p["preemptions"],
                     "over_capacity": p["over_capacity"], "probe": probe.key,
                     "probe_ratio": probe_ratio[probe.key]})
    return pd.DataFrame(rows)


def admission_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Rank correlation (Spearman) over the bursts of the probe's ratio and of the prompts per step with each
    figure's measured / predicted ratio, per dataset and over all; bursts per row."""
    parts = [(g, sub) for g, sub in table.groupby("dataset")] + [("all", table)]
    return pd.DataFrame([{"bursts": g, "runs": len(sub), **{
        f"{x} ~ {name}": float(sub[x].corr(sub[f"{name}_ratio"], method="spearman")) if len(sub) > 2 else np.nan
        for x in ("probe_ratio", "prompts_per_step") for name, _ in ADMISSION_FIGS}} for g, sub in parts])
