"""DeepSeek-R1 on InferenceX's serving rows predicted with catalog parameters: at low concurrency, and under load.

Data (read, never copied): the shared data's ``engine-measurements/inferencex-deepseek-r1/results_no_speculation.csv``
(README there). Rows used: aggregated single-node runs (``disagg`` and ``multinode`` false) on the GPUs of the hardware
catalog (H200, B200; the H100 has no such row), ``d_ep`` 1 or all the GPUs (the cost model's expert layouts). Three
sets (:func:`load_rows`):

- **low concurrency** (the MLA check): FP8 weights, concurrency <= ``MAX_CONC``, attention tensor-parallel
  (``d_dpa`` false);
- **under load**: FP8 and FP4 weights (FP4: NVIDIA's NVFP4 checkpoint, priced as NVFP4 experts and layers, the MoE
  terms fitted on bf16 / FP8 / MXFP4 kernels), concurrency <= ``UNDER_LOAD_MAX_CONC``, attention tensor-parallel;
- **DP attention**: the same, attention data-parallel over the GPUs (``d_dpa`` true: the cost model's ``dp``, one GPU
  per rank, experts over all of them).

Per row, with the catalog's parameters for the GPU (``prior_profile``; nothing fitted here; the host terms are the
newest vLLM entry's, less t_tp, the per-worker cost of vLLM's multiprocess executor, which these engines do not run)::

    TPOT = t_decode(B = conc, C = isl' + osl'/2) + (conc - 1) / dp t_prefill(isl') / osl'

the decode step of the ``conc`` sequences at their mean context, plus the prefills of the other users that stall a
request's decode (closed loop: each user starts one new request per ``osl'`` tokens; SGLang and TensorRT-LLM run a
prompt as its own step at these loads; under DP attention the ranks prefill their own users' prompts in the same
steps, dp at a time). isl', osl': the mean lengths of InferenceX's random prompts (uniform on [0.8 L, L]: 0.9 L).
Measured: ``median_tpot_ms``. No row is fitted: every figure is held out.

Held-out diagnostic (:func:`heldout_layer_cost`): the one term the low-concurrency rows say is short, an extra fixed
cost per decoder layer x, fitted (median of (measured - predicted) / L) on the other GPU's rows (or the other
engine's) and scored on the held-out ones. It is a diagnostic of the form (is the gap a per-layer constant that
transfers?), not written to the catalog.

    specsim validate inferencex [--data DIR] [--out DIR] [--without-t-mla]
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import InputError
from simulator.catalog.versions import folder_version
from simulator.paths import REPO, shared

DATA = shared("engine-measurements", "inferencex-deepseek-r1")
TABLE = "results_no_speculation.csv"
COLUMNS = ("hardware", "framework", "precision", "disagg", "multinode", "d_tp", "d_ep", "d_dpa", "isl", "osl", "conc",
           "date", "median_tpot_ms")
GPUS = {"h200": "h200", "b200": "b200", "h100": "h100-sxm"}  # InferenceX hardware -> catalog hardware
MAX_CONC = 8
UNDER_LOAD_MAX_CONC = 256  # every aggregated single-node row of these GPUs (their loads stop at 256 users)
PRECISIONS = {"fp8": "fp8", "fp4": "nvfp4"}  # InferenceX precision -> the catalog's weight dtype
BANDS = (0, 8, 32, 128, UNDER_LOAD_MAX_CONC)  # concurrency bands of the under-load tables
MEAN_LENGTH = 0.9  # random lengths uniform on [0.8 L, L] (README: range ratio 0.8)
MODEL = "deepseek-r1"


def load_rows(data: Path = DATA, max_conc: int = MAX_CONC, precisions: tuple[str, ...] = ("fp8",),
              dp_attention: bool = False) -> pd.DataFrame:
    """The rows of one set (module docstring): concurrency <= ``max_conc``, weights in ``precisions``, attention
    data-parallel or not; InputError naming the file and column when it is not the table."""
    path = Path(data) / TABLE
    if not path.is_file():
        raise InputError(str(path), None, f"no InferenceX table ({DATA})")
    try:
        d = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise InputError(str(path), None, f"not a readable CSV ({type(e).__name__}: {e})") from None
    missing = [c for c in COLUMNS if c not in d.columns]
    if missing:
        raise InputError(str(path), missing[0], "missing column (expected the InferenceX flattened results)")
    if d.empty:
        raise InputError(str(path), None, "no rows (a header only, or a truncated file)")
    for c in ("disagg", "multinode", "d_dpa"):
        d[c] = d[c].astype(str).str.lower().map({"true": True, "false": False})
        if d[c].isna().any():
            raise InputError(str(path), c, "expected true / false in every row")
        d[c] = d[c].astype(bool)
    keep = ((~d["disagg"]) & (~d["multinode"]) & (d["d_dpa"] == dp_attention) & d["precision"].isin(precisions)
            & (d["conc"] <= max_conc) & d["hardware"].isin(GPUS) & ((d["d_ep"] == 1) | (d["d_ep"] == d["d_tp"])))
    out = d[keep & d["median_tpot_ms"].notna()].reset_index(drop=True)
    if out.empty:
        raise InputError(str(path), None, f"no aggregated {'/'.join(precisions)} rows at concurrency <= {max_conc} "
                         f"({'data' if dp_attention else 'tensor'}-parallel attention) on H200 / B200 / H100")
    return out


def _deployment(r, t_mla: bool):
    """The cost model's deployment of row ``r``: its GPU, weights, TP / EP or data-parallel attention."""
    from dataclasses import replace
    from simulator.catalog import get_hardware, get_model
    from simulator.cost.cost_model import Deployment
    from simulator.cost.cost_profile import prior_profile

    hw = get_hardware(GPUS[r.hardware])
    # SGLang and TensorRT-LLM rows: the catalog's host terms are vLLM's, less the per-worker cost of vLLM's
    # multiprocess executor (t_tp), which these engines do not run
    c = replace(prior_profile(hw).params(hw), tp_step_overhead_s=0.0)
    c = c if t_mla else replace(c, mla_layer_overhead_s=0.0)
    m = get_model(MODEL).with_dtypes(PRECISIONS[r.precision])
    if r.d_dpa:  # one GPU per attention rank, the experts over all of them
        return Deployment(m, hw, 1, c, ep=int(r.d_ep), dp=int(r.d_tp))
    return Deployment(m, hw, int(r.d_tp), c, ep=int(r.d_ep))


def predict_rows(rows: pd.DataFrame, t_mla: bool = True) -> pd.DataFrame:
    """Each row's predicted TPOT and its parts (ms), the catalog's parameters per GPU; ``error`` = pred / meas - 1.
    ``t_mla`` False: the MLA module's fixed cost set to 0 (the model without the MLA term, an ablation)."""
    deps, out = {}, []
    for r in rows.itertuples(index=False):
        key = (r.hardware, int(r.d_tp), int(r.d_ep), r.precision, bool(r.d_dpa))
        if key not in deps:
            deps[key] = _deployment(r, t_mla)
        dep, B = deps[key], int(r.conc)
        isl, osl = MEAN_LENGTH * r.isl, MEAN_LENGTH * r.osl
        ctx = isl + osl / 2.0
        dec = dep.batch_forward_time(np.ones(B), np.full(B, ctx))
        pre = float(dep.prefill_time(isl))
        stall = (B - 1) / dep.dp * pre / osl
        out.append({"gpu": r.hardware, "engine": r.framework, "precision": r.precision, "tp": int(r.d_tp),
                    "ep": int(r.d_ep), "dp_attention": bool(r.d_dpa), "isl": int(r.isl), "osl": int(r.osl), "conc": B,
                    "date": r.date, "measured_ms": float(r.median_tpot_ms), "decode_ms": dec * 1e3,
                    "prefill_stall_ms": stall * 1e3, "predicted_ms": (dec + stall) * 1e3})
    t = pd.DataFrame(out)
    t["error"] = t["predicted_ms"] / t["measured_ms"] - 1.0
    t["band"] = pd.cut(t["conc"], BANDS)  # ordered: the tables list the bands from low to high load
    return t


def summarize(t: pd.DataFrame, by: tuple[str, ...], err: str = "error") -> pd.DataFrame:
    g = t.assign(ae=t[err].abs()).groupby(list(by), observed=True)
    return g.agg(rows=("ae", "size"), median_ape=("ae", "median"), p90_ape=("ae", lambda x: float(np.quantile(x, 0.9))),
                 bias=(err, "median")).reset_index()


def heldout_layer_cost(t: pd.DataFrame, by: str) -> pd.DataFrame:
    """Leave each value of ``by`` (gpu | engine) out: x = median over the other rows of (measured - predicted) / L
    (seconds per decoder layer), added to every layer of the held-out rows' decode step; their error after it."""
    from simulator.catalog import get_model

    layers = get_model(MODEL).layers
    rows = []
    for v in sorted(set(t[by])):
        train, test = t[t[by] != v], t[t[by] == v].copy()
        x_ms = float(np.median((train["measured_ms"] - train["predicted_ms"]) / layers))
        test["x_us"] = x_ms * 1e3
        test["error_x"] = (test["predicted_ms"] + layers * x_ms) / test["measured_ms"] - 1.0
        test["fold"] = f"{by}-out:{v}"
        rows.append(test)
    return pd.concat(rows, ignore_index=True)


def moe_kernel_check(root: Path | None = None, max_tokens: int = 128) -> pd.DataFrame:
    """The catalog's MoE layer terms (``calibrate.gpu_priors.moe_fit.predict``, the catalog's values) against
    AIConfigurator's fused-MoE table at DeepSeek-R1's shape on one TP-8 GPU (EP 1, 128-block FP8; ``power_law_1.01``
    routing with the MoE fit's skew from reports/moe-layer/params.yaml, and ``balanced``: min(E, N k) experts;
    1..``max_tokens`` tokens), newest vLLM table of the H100 and B200; ``stream_us``: the touched experts' bytes at the
    datasheet bandwidth (a floor no kernel beats). Empty when the tables are absent."""
    from calibrate.gpu_priors import moe_fit
    from calibrate.gpu_priors.engine_data import SHARED
    from simulator.catalog import get_hardware

    import yaml

    root = Path(root) if root is not None else SHARED / "aiconfigurator-vllm-kernels"
    fitted = yaml.safe_load((REPO / "reports" / "moe-layer" / "params.yaml").read_text(encoding="utf-8"))["params"]
    skew = float(fitted["power_law_1.01.routing_skew"]["value"])  # the MoE fit's skew of this routing
    out = []
    for folder, gpu in (("h100_sxm", "h100-sxm"), ("b200_sxm", "b200")):
        paths = sorted((root / folder / "moe" / "vllm").glob("*/moe_perf.parquet"), key=folder_version)
        if not paths:
            continue
        d = pd.read_parquet(paths[-1])
        d = d[(d["hidden_size"] == 7168) & (d["inter_size"] == 2048) & (d["num_experts"] == 256) & (d["topk"] == 8)
              & (d["moe_dtype"] == "fp8_block") & (d["moe_tp_size"] == 8) & (d["moe_ep_size"] == 1)
              & d["distribution"].isin(["power_law_1.01", "balanced"]) & (d["num_tokens"] <= max_tokens)]
        f = pd.DataFrame({"gpu": gpu, "tokens": d["num_tokens"], "hidden": 7168, "inter": 2048, "experts": 256, "topk": 8,
                          "tp": 8, "ep": 1, "distribution": d["distribution"].to_numpy(str), "dtype": "fp8_block", "mats": 3.0,
                          "bytes_per_weight": 1.0, "rate": "fp8", "source": "aic",
                          "time_s": d["latency"].to_numpy(float) * 1e-3}).reset_index(drop=True)
        f = moe_fit.with_layer_shape(f)
        hw = get_hardware(gpu)
        vals = moe_fit.catalog_values(gpu) | {"power_law_1.01.routing_skew": skew}
        f["predicted_s"] = moe_fit.predict(f, vals)
        f["stream_us"] = f["bytes_gpu"] / hw.memory_bandwidth_bytes_per_s * 1e6
        out.append(f[["gpu", "distribution", "tokens", "n_gpu", "stream_us", "time_s", "predicted_s"]])
    if not out:
        return pd.DataFrame(columns=["gpu", "distribution", "tokens", "n_gpu", "stream_us", "measured_us", "predicted_us",
                                     "error"])
    t = pd.concat(out, ignore_index=True).sort_values(["gpu", "distribution", "tokens"])
    t = t.assign(measured_us=t["time_s"] * 1e6, predicted_us=t["predicted_s"] * 1e6)
    t["error"] = t["predicted_us"] / t["measured_us"] - 1.0
    return t[["gpu", "distribution", "tokens", "n_gpu", "stream_us", "measured_us", "predicted_us", "error"]].reset_index(drop=True)


def gpustack_vllm_rows() -> pd.DataFrame:
    """GPUStack's DeepSeek-R1 runs of ``vllm serve`` at <= ``MAX_CONC`` users (``calibrate.fit.gpustack_import``),
    predicted by the serving simulator with the catalog's parameters (``calibrate.fit.released_predict``): mean TPOT.
    Empty when the table is absent."""
    from calibrate.fit.gpustack_import import released_runs
    from calibrate.fit.released_predict import measured_figures, predict_released

    try:
        runs, _ = released_runs()
    except (FileNotFoundError, InputError):
        return pd.DataFrame(columns=["gpu", "vllm", "tp", "conc", "measured_ms", "predicted_ms", "error"])
    out = []
    for r in runs:
        if r.model == MODEL and r.concurrency is not None and r.concurrency <= MAX_CONC:
            p, m = predict_released(r)["tpot_ms"], measured_figures(r)["tpot_ms"]
            out.append({"gpu": r.gpu, "vllm": r.version, "tp": r.tp, "conc": r.concurrency, "measured_ms": m,
                        "predicted_ms": p, "error": p / m - 1.0})
    return pd.DataFrame(out, columns=["gpu", "vllm", "tp", "conc", "measured_ms", "predicted_ms", "error"])


def _md(df: pd.DataFrame) -> str:
    """A markdown table: APE columns as percentages, bias / error signed, other floats with 2 decimals."""
    signed = {"bias", "error", "error_x"}

    def cell(c, v):
        if c in signed:
            return f"{v:+.1%}"
        if c.endswith("ape"):
            return f"{v:.1%}"
        return f"{v:.2f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(cell(c, v) for c, v in zip(df.columns, r)) + " |" for r in df.itertuples(index=False)]
    return "\n".join(lines)


def report(data: Path = DATA, t_mla: bool = True) -> dict[str, pd.DataFrame]:
    """Every table, by name; the per-row frames are named ``rows*`` (low concurrency, under load, DP attention)."""
    # the low-concurrency set is a slice of the under-load one: one load, one prediction per row
    u = predict_rows(load_rows(data, UNDER_LOAD_MAX_CONC, tuple(PRECISIONS)), t_mla)
    t = u[(u["conc"] <= MAX_CONC) & (u["precision"] == "fp8")].reset_index(drop=True)
    if t.empty:
        raise InputError(str(Path(data) / TABLE), None, f"no aggregated fp8 rows at concurrency <= {MAX_CONC} "
                         "(tensor-parallel attention) on H200 / B200 / H100")
    out = {"rows": t, "by_gpu_engine_ep": summarize(t, ("gpu", "engine", "ep")), "by_gpu": summarize(t, ("gpu",)),
           "by_engine": summarize(t, ("engine",))}
    for by in ("gpu", "engine"):
        h = heldout_layer_cost(t, by)
        s = summarize(h, ("fold",), "error_x").merge(h.groupby("fold", as_index=False)["x_us"].first(), on="fold")
        out[f"heldout_{by}"] = s
    out["moe_kernel_check"] = moe_kernel_check()
    out["gpustack_vllm"] = gpustack_vllm_rows()
    out.update({"rows_under_load": u, "under_load_by_gpu_precision": summarize(u, ("gpu", "precision")),
                "under_load_by_band": summarize(u, ("gpu", "precision", "band")),
                "under_load_by_engine": summarize(u, ("engine", "precision"))})
    try:
        dp = predict_rows(load_rows(data, UNDER_LOAD_MAX_CONC, tuple(PRECISIONS), dp_attention=True), t_mla)
    except InputError:  # a table without DP-attention rows: that section is empty
        dp = pd.DataFrame(columns=list(u.columns))
    out.update({"rows_dp_attention": dp, "dp_attention": summarize(dp, ("gpu", "precision", "engine", "conc"))})
    return out


def write_report(data: Path, out: Path | None, with_t_mla: bool = True) -> str:
    """The tables as markdown (printed by ``specsim validate inferencex``); with ``out``: OUT/rows.csv (low
    concurrency), OUT/rows-under-load.csv, OUT/rows-dp-attention.csv and OUT/summary.md."""
    import datetime as _dt

    from simulator.inputs.loading import write_atomic

    res = report(data, with_t_mla)
    text = "\n\n".join(f"### {k}\n\n" + _md(v.round(4)) for k, v in res.items() if not k.startswith("rows"))
    if out is not None:
        text = "\n".join([
            "# DeepSeek-R1 on InferenceX's serving rows, catalog parameters only (validate/inferencex.py)", "",
            f"Command: `specsim validate inferencex --out {out}{'' if with_t_mla else ' --without-t-mla'}`; date "
            f"{_dt.date.today().isoformat()}; data: {TABLE} of {Path(data).name} (its provenance: the README beside "
            "it); SGLang and TensorRT-LLM on H200 / B200, DeepSeek-R1 FP8 and FP4 (NVFP4); no row is fitted.", "",
            text])
        out.mkdir(parents=True, exist_ok=True)
        for key, name in (("rows", "rows.csv"), ("rows_under_load", "rows-under-load.csv"),
                          ("rows_dp_attention", "rows-dp-attention.csv")):
            write_atomic(out / name, res[key].round(4).to_csv(index=False))
        write_atomic(out / "summary.md", text + "\n")
    return text
