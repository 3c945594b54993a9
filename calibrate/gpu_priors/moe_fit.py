"""The MoE layer's expert GEMMs: the cost model's MoE terms fitted on kernel tables, held out by GPU.

What the cost model says one MoE layer's routed experts cost on one GPU (``Deployment._moe_breakdown``'s terms,
restricted to the experts of one layer; docs/moe.md)::

    T = t_moe + [EP > 1] t_ep + n_gpu t_expert + N k pi H b / BW
        + softmax_p(n_gpu W_e / (r_m eta_moe BW) (1 + j [N >= 2]),  2 N k W_e' / (TP EP F r_c eta_moe_comp))

n_gpu: the experts this GPU runs = (distinct experts hit) / EP; W_e: one expert's bytes on this GPU (gated: 3 H I,
plain: 2 H I, over the TP shards, in the expert dtype); W_e': its weights; F the dtype's tensor-core rate (FP8 where
the GPU has FP8 cores, else bf16); p and j the catalog's engine-level step shape (frozen). Per GPU six parameters:
``moe_mem_efficiency``, ``moe_compute_efficiency``, ``moe_layer_overhead_s`` (routing and the fused kernels' fixed
cost), ``expert_overhead_s`` (per expert a GPU runs), ``moe_ep_overhead_s`` (the expert map's extra kernels under
EP), ``moe_token_passes`` pi: the routed pairs' alignment, permutation and scatter as passes over a token's hidden
state (H activations of b = 2 bytes) at the memory bandwidth (:func:`simulator.cost.roofline.moe_token_time`). Per
kernel kind (:data:`TABLE_KINDS`; bf16 the reference) and parameter set (a GPU's table: ``GPU|kind.ratio``) two
ratios, fitted only where that table times the kind: r_c and r_m, its compute and streaming efficiencies relative to
the same table's bf16 fused-MoE ones. They belong to a kernel generation, not to a kind: on the H100, vLLM 0.24's
FP8 block kernels reach about half their FP8 peak's share where its bf16 kernels reach theirs, vLLM 0.14's as much as
its bf16 ones (one ratio over every GPU and version mispriced vLLM 0.11's serving runs, docs/moe.md). A GPU held out
takes the median of the other GPUs' ratios for a kind (:func:`transferred`). Passes are counts, not seconds, because
that is what transfers between GPUs of different bandwidths (docs/moe.md). Fitted with the one fitter
(:func:`calibrate.fit.fit_cost.fit_log_times`, grouped names ``GPU.kind``).

Data (read, never copied):

``aic``  AIConfigurator's vLLM ``moe`` tables (records ``op == moe`` of ``specsim import aiconfigurator``;
         A100, L40S, H100, B200; CUDA-graph replays of vLLM's fused MoE kernels): the newest vLLM version per GPU
         (the catalog's fit; older versions' tables, each its own parameter set ``GPU@version``, only for the
         same-version held-out design), dtypes bf16, FP8 (per-tensor and 128-block), INT4 and MXFP4 weight-only. Distinct experts hit: ``balanced``
         routing assigns the N k (token, expert) pairs round-robin, min(E, N k) experts; ``power_law_*`` rows use the
         uniform-routing expectation E [1 - (1 - k/E)^N] (the cost model's own; at E = 128, k = 8 the power-law rows'
         times match it within a few experts for N = 4-32, read off the H100 table). Left out, with the reason in the
         report: NVFP4 and MXFP4 x MXFP8 rows (FP4 tensor-core kernels: the B200's only) and working sets under twice the
         GPU's L2 (the table replays one layer's experts, which stay in cache: the L40S serves 8 experts of 9.4 MB at
         N = 1 faster than its DRAM can; a model's layers evict each other). Nemotron-3 shapes (hidden 2688, top-22) are
         squared-ReLU experts of two matrices (their published configs; counted as gated they would beat the datasheet
         bandwidth). At most ``MAX_ROWS`` rows per (table, dtype, routing), seed 0.
``lss``  LLMServingSim's layer profiles of Mixtral-8x7B (H100) and Phi-mini-MoE (RTX A6000): one expert's three linears
         on all N tokens (N on the engine fit's grid, 1-2048), timed one by one in eager PyTorch (``import_llmservingsim``). Predicted as one expert (E = k =
         1); their eager launch cost is this source's own nuisance (``lss-<gpu>.moe_layer_overhead_s``), never
         transferred.

Held out (:func:`heldout`): each GPU in turn; its parameters transferred by the catalog's own rule (:func:`transfer_value`:
the median of the other GPUs' fused-kernel fits, a parameter held at its bound left out), its LSS
launch cost (a nuisance) fitted on its own rows with everything else frozen. Two designs (:data:`DESIGNS`): the
other GPUs' newest tables, or their tables of the held-out table's own vLLM version. The tables' kernels changed
between versions (the A100's only table is vLLM 0.14's ``fused_moe``; the others' newest are 0.24's Triton, CUTLASS
and TRT-LLM experts), so the first design transfers a kernel generation as well as a GPU; on the same 0.14 kernels
the A100 / H100 time ratio is flat across EP and tokens and near their bandwidth ratio (:func:`pair_ratios`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.engine_data import ENGINE, LSS_TOKENS
from simulator.catalog import get_hardware, hardware_catalog
from simulator.catalog.models import WEIGHT_DTYPE_BYTES
from simulator.catalog.moe_kernels import KINDS  # the MoE terms, one list for the fit and the catalog
from simulator.catalog.versions import version_key
from simulator.cost.roofline import moe_token_time, soft_roofline
from simulator.cost.cost_profile import prior_profile
from simulator.errors import InputError
from simulator.paths import shared

RECORDS = Path("out/gpu-records/aiconfigurator.csv")
PRIORS = {"moe_mem_efficiency": 0.8, "moe_compute_efficiency": 0.5, "moe_layer_overhead_s": 15e-6,
          "expert_overhead_s": 0.5e-6, "moe_token_passes": 4.0, "moe_ep_overhead_s": 10e-6, "routing_skew": 0.5,
          "compute_ratio": 1.0, "mem_ratio": 1.0}
# eta_moe up to 1.1: the fused kernels stream at the datasheet rate (the B200's ~1.02 of the 7.7 TB/s the catalog
# takes, NVIDIA's headline being 8), and the multi-token penalty (1 + j) divides it at N >= 2
BOUNDS = {"moe_mem_efficiency": (1e-3, 1.1), "moe_compute_efficiency": (1e-3, 1.0),
          "moe_layer_overhead_s": (1e-9, 1e-2), "expert_overhead_s": (1e-10, 1e-3),
          "moe_token_passes": (1e-3, 1e3), "moe_ep_overhead_s": (1e-9, 1e-2), "routing_skew": (1e-3, 4.0),
          "compute_ratio": (0.05, 5.0), "mem_ratio": (0.05, 5.0)}
# dtypes the fit uses (those of the shipped MoE scenarios' kernels: bf16, DeepSeek's 128-block FP8, gpt-oss's MXFP4);
# the other tables are scored with the fitted parameters, a check of one efficiency per GPU across kernels
FIT_DTYPES = ("bfloat16", "fp8_block", "w4a16_mxfp4")
# AIConfigurator moe_dtype -> (bytes per weight, tensor-core rate: fp8 | bf16)
DTYPES = {"bfloat16": (2.0, "bf16"), "fp8": (1.0, "fp8"), "fp8_block": (1.0, "fp8"),
          "int4_wo": (WEIGHT_DTYPE_BYTES["int4"], "bf16"), "w4a16_mxfp4": (WEIGHT_DTYPE_BYTES["mxfp4"], "bf16")}
# AIConfigurator moe_dtype -> the fused-MoE kernel kind it runs (simulator.catalog.moe_kernels.MOE_KINDS): each kind
# but bf16 has a compute and a streaming ratio to the same table's bf16 efficiencies, per parameter set
# (``<unit>|<kind>.compute_ratio`` / ``.mem_ratio``, unit a GPU or GPU@version: a kernel generation's)
TABLE_KINDS = {"bfloat16": "bf16", "float16": "bf16", "fp8": "w8a8-fp8", "fp8_block": "w8a8-fp8-block",
               "int4_wo": "w4a16", "w4a16_mxfp4": "w4a16"}
RATIOS = ("compute_ratio", "mem_ratio")
SKIPPED_DTYPES = {"nvfp4": "FP4 tensor-core kernels, measured on the B200 only (no other GPU to transfer from)",
                  "w4a8_mxfp4_mxfp8": "FP4 tensor-core kernels, measured on the B200 only (no other GPU to transfer from)"}
# L2 cache per GPU (datasheets): working sets below twice this stay cache-resident in a replayed table
L2_BYTES = {n: h.l2_bytes for n, h in hardware_catalog().items() if h.l2_bytes}  # hardware.yaml l2_bytes
FIT_GPUS = ("a100-80gb", "l40s", "h100-sxm", "b200")
MAX_ROWS = 400
LSS_MODELS = {"mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b", "microsoft/Phi-mini-MoE-instruct": "phi-mini-moe"}


def gated(hidden, topk) -> np.ndarray:
    """Gated (SwiGLU: 3 matrices) unless a Nemotron-3 shape (squared ReLU: 2 matrices)."""
    return ~((np.asarray(hidden) == 2688) | (np.asarray(topk) == 22))


def load_aic(path: Path = RECORDS) -> tuple[pd.DataFrame, dict]:
    """Every AIConfigurator MoE row the fit may use (module docstring; :func:`subsample` draws the fit's share) and
    the counts of what was left out and why. Every numbered vLLM version's table is kept: ``unit`` names the parameter set a row belongs to, the GPU itself for its
    newest table (the catalog's fit) and ``GPU@version`` for an older one (read only by the same-version held-out
    design, :func:`heldout`)."""
    cols = ["source_file", "source_row", "gpu", "op", "tokens", "hidden", "expert_intermediate", "experts", "topk",
            "tp", "ep", "distribution", "dtype", "version", "backend", "time_s"]
    if not Path(path).is_file():
        raise InputError(str(path), None, "no records file (run: specsim import aiconfigurator "
                         f"{shared('aiconfigurator-vllm-kernels')} --out out/gpu-records/aiconfigurator.csv)")
    d = pd.read_csv(path, usecols=cols, low_memory=False)
    d = d[d["op"] == "moe"].copy()
    if d.empty:
        raise InputError(str(path), "op", "no moe records (records schema >= 2)")
    d["version"] = d["version"].astype(str)
    released = d["version"].str.fullmatch(r"\d+\.\d+\.\d+")
    left = {"rows of a development build (no released vLLM version)": int((~released).sum())}
    d = d[released]
    newest = d.groupby("gpu")["version"].agg(lambda v: max(set(v), key=version_key))
    d["unit"] = np.where(d["version"] == d["gpu"].map(newest), d["gpu"], d["gpu"] + "@" + d["version"])
    older = d.loc[d["unit"] != d["gpu"]].groupby("gpu")["version"].agg(lambda v: sorted(set(v), key=version_key))
    for k in SKIPPED_DTYPES:
        if n := int((d["dtype"] == k).sum()):
            left[f"{k} rows: {SKIPPED_DTYPES[k]}"] = n
    d = d[d["dtype"].isin(DTYPES)].copy()
    d["mats"] = np.where(gated(d["hidden"], d["topk"]), 3.0, 2.0)
    d["bytes_per_weight"] = d["dtype"].map(lambda x: DTYPES[x][0])
    d["rate"] = d["dtype"].map(lambda x: DTYPES[x][1])
    d["source"] = "aic"
    d = d.rename(columns={"expert_intermediate": "inter"})
    d = with_layer_shape(d)
    small = d["bytes_gpu"] < 2 * d["gpu"].map(L2_BYTES)
    left["working set under 2x the GPU's L2 (cache-resident in a replayed table)"] = int(small.sum())
    d = d[~small]
    return d.reset_index(drop=True), {"versions": {g: str(v) for g, v in newest.items()},
                                      "older": {g: [str(x) for x in v] for g, v in older.items()}, "left_out": left}


def subsample(d: pd.DataFrame, meta: dict, max_rows: int = MAX_ROWS) -> tuple[pd.DataFrame, dict]:
    """At most ``max_rows`` of :func:`load_aic`'s rows per (table, dtype, routing), seed 0, and the meta counting
    what was drawn away."""
    parts = [g.sample(min(len(g), max_rows), random_state=0) for _, g in d.groupby(["unit", "dtype", "distribution"])]
    out = pd.concat(parts, ignore_index=True)
    left = {**meta["left_out"], "subsampled away (at most %d rows per table, dtype, routing; seed 0)" % max_rows:
            int(len(d) - len(out))}
    return out, {**meta, "left_out": left}


def load_rows(records: Path = RECORDS, keep=None, aic: tuple | None = None) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """(every row: AIConfigurator's of ``records`` (:func:`subsample` of :func:`load_aic`; ``aic``: that pair, already
    drawn) + LLMServingSim's where the shared data has them; the rows the fit uses: ``FIT_DTYPES`` and
    LLMServingSim's; the meta). ``keep``: a row filter applied first."""
    aic, meta = aic or subsample(*load_aic(Path(records)))
    try:
        lss = load_lss()
    except FileNotFoundError:
        lss = pd.DataFrame()
    every = pd.concat([aic, lss], ignore_index=True) if len(lss) else aic
    if keep is not None:
        every = every[keep(every)].reset_index(drop=True)
    return every, every[every["dtype"].isin(FIT_DTYPES) | (every["source"] == "lss")].reset_index(drop=True), meta


def load_lss(root: Path | None = None) -> pd.DataFrame:
    """LLMServingSim's MoE expert linears: per (GPU, model, tokens) the median of w1, w3 and w2, summed."""
    from calibrate.gpu_priors.import_llmservingsim import MODELS, load_llmservingsim_layers

    d = load_llmservingsim_layers(root or ENGINE / "llmservingsim-layer-profiles")
    d = d[d["model"].isin(LSS_MODELS) & d["module"].isin(["expert.w1", "expert.w2", "expert.w3"]) & (d["tp"] == 1)
          & d["tokens"].isin(LSS_TOKENS)]
    med = d.groupby(["gpu", "model", "tokens", "module"], as_index=False)["time_s"].median()
    out = med.groupby(["gpu", "model", "tokens"], as_index=False)["time_s"].sum()
    shape = out["model"].map(MODELS)
    out["hidden"] = shape.map(lambda s: s["hidden"]).astype(float)
    out["inter"] = shape.map(lambda s: s["intermediate"]).astype(float)
    out["experts"], out["topk"], out["tp"], out["ep"], out["mats"] = 1.0, 1.0, 1.0, 1.0, 3.0
    out["bytes_per_weight"], out["rate"], out["dtype"] = 2.0, "bf16", "float16"
    out["distribution"], out["source"] = "one expert", "lss"
    out["model"] = out["model"].map(LSS_MODELS)
    out["unit"] = out["gpu"]
    return with_layer_shape(out)


def with_layer_shape(d: pd.DataFrame) -> pd.DataFrame:
    """Per row: its expert weights, bytes per weight, FLOPs on this GPU (module docstring); the experts it hits
    depend on the routing skew, a parameter (:func:`experts_hit`)."""
    N, k = d["tokens"].to_numpy(float), d["topk"].to_numpy(float)
    tp, ep = d["tp"].to_numpy(float), d["ep"].to_numpy(float)
    w = d["mats"].to_numpy(float) * d["hidden"].to_numpy(float) * d["inter"].to_numpy(float)
    d = d.copy()
    d["expert_bytes_gpu"] = w / tp * d["bytes_per_weight"].to_numpy(float)
    d["flops_gpu"] = 2.0 * N * k * w / (tp * ep)
    d["n_gpu"] = experts_hit(d, {}) / ep
    d["bytes_gpu"] = d["n_gpu"] * d["expert_bytes_gpu"]
    return d


def units_of(d: pd.DataFrame) -> np.ndarray:
    """Each row's parameter set (:func:`load_aic`): its ``unit`` where the frame has one, else its GPU."""
    return (d["unit"] if "unit" in d else d["gpu"]).to_numpy(str)


def gpu_of(unit: str) -> str:
    return unit.split("@")[0]


def routing_of(d: pd.DataFrame) -> np.ndarray:
    return d["distribution"].to_numpy(str)


def experts_hit(d: pd.DataFrame, values: dict) -> np.ndarray:
    """Distinct experts a row's N tokens hit: ``balanced`` min(E, N k) (round-robin); one expert 1; a skewed routing
    (``power_law_*``) with the skew s of :func:`simulator.catalog.models.skewed_experts_hit` (fitted per label,
    ``<label>.routing_skew``; s = 0 is uniform routing)."""
    from simulator.catalog.models import skewed_experts_hit

    N, E, k = (d[c].to_numpy(float) for c in ("tokens", "experts", "topk"))
    lab = routing_of(d)
    out = np.where(lab == "balanced", np.minimum(E, N * k), 1.0)
    for label in sorted(set(lab) - {"balanced", "one expert"}):
        m = lab == label
        s = values.get(f"{label}.routing_skew", 0.0)
        keys = np.stack([E[m], k[m], N[m]], axis=1)
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        vals = np.array([skewed_experts_hit(int(e), int(kk), n, s) for e, kk, n in uniq])
        out[m] = vals[inv.ravel()]
    return out


class Arrays:
    """A frame's per-row constants, computed once (the fitter evaluates the prediction thousands of times)."""

    def __init__(self, f: pd.DataFrame):
        self.f = f
        units = units_of(f)
        self.gpus = sorted(set(units))  # parameter sets: a GPU (its newest table) or GPU@version
        gi = pd.Series(units).map({g: i for i, g in enumerate(self.gpus)}).to_numpy(int)
        self.gi = gi
        hw = [get_hardware(gpu_of(g)) for g in self.gpus]
        pri = [prior_profile(h).params(h) for h in hw]
        fp8 = f["rate"].to_numpy(str) == "fp8"
        bf = np.array([h.dense_bf16_flops_per_s for h in hw])[gi]
        f8 = np.array([h.dense_fp8_flops_per_s or h.dense_bf16_flops_per_s for h in hw])[gi]
        self.F = np.where(fp8, f8, bf)
        self.BW = np.array([h.memory_bandwidth_bytes_per_s for h in hw])[gi]
        self.p = np.array([c.roofline_p for c in pri])[gi]
        self.j = np.array([c.multi_token_penalty for c in pri])[gi]
        self.N = f["tokens"].to_numpy(float)
        self.k = f["topk"].to_numpy(float)
        self.hidden = f["hidden"].to_numpy(float)
        self.inter = f["inter"].to_numpy(float) / f["tp"].to_numpy(float)
        self.ep = f["ep"].to_numpy(float)
        self.eb = f["expert_bytes_gpu"].to_numpy(float)
        self.flops = f["flops_gpu"].to_numpy(float)
        self.lss = f["source"].to_numpy(str) == "lss"
        self.labels = sorted(set(routing_of(f)) - {"balanced", "one expert"})
        self.kind = f["dtype"].map(TABLE_KINDS).fillna("bf16").to_numpy(str)
        self.unit_kind = np.char.add(np.char.add(units, "|"), self.kind)
        self._hit_key, self._hit = None, None

    def ratio(self, values: dict, name: str) -> np.ndarray:
        """Each row's kernel kind's ``name`` in its parameter set (:data:`RATIOS`, ``<unit>|<kind>.<name>``; bf16 and
        a kind without a value: 1)."""
        out = np.ones(len(self.kind))
        for uk in set(self.unit_kind[self.kind != "bf16"]):
            out[self.unit_kind == uk] = values.get(f"{uk}.{name}", 1.0)
        return out

    def hit(self, values: dict) -> np.ndarray:
        key = tuple(values.get(f"{lab}.routing_skew", 0.0) for lab in self.labels)
        if key != self._hit_key:
            self._hit_key, self._hit = key, experts_hit(self.f, values)
        return self._hit


def predict(f, values: dict) -> np.ndarray:
    """Seconds per row from a grouped parameter dict (``GPU.kind``; LSS rows: ``lss-GPU.moe_layer_overhead_s``;
    ``<routing label>.routing_skew``). ``f``: a frame or its :class:`Arrays`."""
    a = f if isinstance(f, Arrays) else Arrays(f)
    par = lambda k: np.array([values.get(f"{g}.{k}", PRIORS[k]) for g in a.gpus])[a.gi]  # noqa: E731
    lss_fixed = np.array([values.get(f"lss-{g}.moe_layer_overhead_s", 100e-6) for g in a.gpus])[a.gi]
    n = a.hit(values) / a.ep
    t_mem = n * a.eb / (par("moe_mem_efficiency") * a.ratio(values, "mem_ratio") * a.BW) * (1.0 + a.j * (a.N >= 2))
    t_comp = a.flops / (a.F * par("moe_compute_efficiency") * a.ratio(values, "compute_ratio"))
    gpu = np.empty(len(t_mem))
    for p in np.unique(a.p):  # the cost model's own soft roofline, per GPU's p (one shared value today)
        m = a.p == p
        gpu[m] = soft_roofline(t_mem[m], t_comp[m], float(p))
    fixed = np.where(a.lss, lss_fixed, par("moe_layer_overhead_s") + n * par("expert_overhead_s")
                     + a.N * a.k * moe_token_time(par("moe_token_passes"), a.hidden, a.BW)
                     + (a.ep > 1) * par("moe_ep_overhead_s"))
    return fixed + gpu


def catalog_values(gpu: str) -> dict:
    """The MoE terms and kernel kinds the catalog gives ``gpu`` (its prior profile, the newest engine version), named as
    :func:`predict` reads them."""
    hw = get_hardware(gpu)
    c = prior_profile(hw).params(hw)
    own = {"moe_mem_efficiency": "expert_mem_efficiency", "moe_compute_efficiency": "expert_compute_efficiency"}
    return {f"{gpu}.{k}": getattr(c, own.get(k, k)) for k in KINDS} | {f"{gpu}|{n}": v for n, v in c.moe_kind_ratios}


def names_for(f: pd.DataFrame) -> tuple[str, ...]:
    names = [f"{lab}.routing_skew" for lab in sorted(set(routing_of(f)) - {"balanced", "one expert"})]
    aic = f[f["source"] == "aic"]
    for u in sorted(set(units_of(aic))):
        kinds = set(aic.loc[units_of(aic) == u, "dtype"].map(TABLE_KINDS)) - {"bf16"}
        names += [f"{u}|{k}.{r}" for k in sorted(kinds) for r in RATIOS]
    units = units_of(f)
    for g in sorted(set(units)):
        src = set(f.loc[units == g, "source"])
        if "aic" in src:
            names += [f"{g}.{k}" for k in KINDS]
        else:  # one expert's linears only: the streaming and compute rates, no fused-kernel costs
            names += [f"{g}.moe_mem_efficiency", f"{g}.moe_compute_efficiency"]
        if "lss" in src:
            names.append(f"lss-{g}.moe_layer_overhead_s")
    return tuple(names)


def prior_of(name: str) -> float:
    return 100e-6 if name.startswith("lss-") else PRIORS[name.rsplit(".", 1)[-1]]


def kind_ratio_names(fr, unit: str) -> list[str]:
    """The ``<kind>.<ratio>`` names the fit ``fr`` fitted (not held at a bound) for ``unit``."""
    return sorted(n.split("|", 1)[1] for n in fr.fitted if n.startswith(f"{unit}|"))


def fitted_kind_ratios(fr) -> list[str]:
    """Every ``<kind>.<ratio>`` some parameter set of the fit ``fr`` fitted."""
    return sorted({n.split("|", 1)[1] for n in fr.fitted if "|" in n})


def transfer_ratio(fr, kind_ratio: str, units) -> float | None:
    """A kernel kind's ratio (``<kind>.<ratio>``) for a GPU without a table of its own: the median over ``units``
    whose tables fitted it (None where none did). The one rule of the catalog (:func:`calibrate.gpu_priors.moe_catalog.kind_ratios`) and the held-out
    folds (:func:`transferred`)."""
    vals = [fr.values[f"{u}|{kind_ratio}"] for u in units if f"{u}|{kind_ratio}" in fr.fitted]
    return float(np.median(vals)) if vals else None


def fit(f: pd.DataFrame, frozen: dict | None = None):
    from calibrate.fit.log_time_fit import fit_log_times

    frozen = dict(frozen or {})
    names = names_for(f)
    prior = {n: frozen.get(n, prior_of(n)) for n in names}
    cand = tuple(n for n in names if n not in frozen)
    y = np.log(f["time_s"].to_numpy(float))
    a = Arrays(f)
    return fit_log_times(lambda v: predict(a, v), y, prior, cand, names=names, build=lambda v: v, bounds=BOUNDS)


def fused(fr, unit: str, kind: str) -> bool:
    """Whether ``unit``'s ``kind`` was fitted (not held at a bound) on fused-kernel (AIConfigurator) rows: what a GPU
    without a fit may take its MoE terms from. LLMServingSim's eager one-expert linears (the RTX A6000's) time dense
    GEMMs, not the fused kernel, and a parameter that ran to its bound says nothing of its value."""
    return f"{unit}.{kind}" in fr.fitted and unit in fused_units(fr, [unit])


def fused_units(fr, units) -> list[str]:
    """The ``units`` whose fused-kernel (AIConfigurator) terms the fit ``fr`` carries."""
    return [u for u in units if f"{u}.moe_layer_overhead_s" in fr.values]


def transfer_value(fr, kind: str, units) -> float | None:
    """The value of ``kind`` a GPU without a fit takes: the median over ``units`` fitted on fused kernels (:func:`fused`;
    None where none is). The one rule of both the catalog (:func:`calibrate.gpu_priors.moe_catalog.catalog_priors`) and the held-out folds."""
    vals = [fr.values[f"{u}.{kind}"] for u in units if fused(fr, u, kind)]
    return float(np.median(vals)) if vals else None


def transferred(fr, gpu: str, from_units: list[str]) -> dict:
    """A GPU held out of the fit ``fr``: its values of each kind :func:`transfer_value` over ``from_units``."""
    out = dict(fr.values)
    for k in KINDS:
        v = transfer_value(fr, k, from_units)
        if v is not None:
            out[f"{gpu}.{k}"] = v
    for kr in fitted_kind_ratios(fr):
        if (v := transfer_ratio(fr, kr, from_units)) is not None:
            out[f"{gpu}|{kr}"] = v
    return out


DESIGNS = {
    "newest": "each GPU's newest table; the held-out GPU's parameters are the median of the other GPUs' fits",
    "same-version": "the held-out GPU's newest table, its parameters the median of the other GPUs' fits on tables of "
                    "the same vLLM version (the same kernels and collector; at least two other GPUs, else as newest)",
}


def heldout(f: pd.DataFrame, score: pd.DataFrame | None = None, design: str = "newest") -> pd.DataFrame:
    """Leave each GPU out: fit the others' rows of ``f``, transfer, score the GPU's newest-table rows of ``score``
    (default ``f``; e.g. every dtype while the fit uses ``FIT_DTYPES``); an LSS launch cost is fitted on the GPU's own
    LSS rows. ``design`` (:data:`DESIGNS`): "newest" fits the other GPUs' newest tables; "same-version" fits the other
    GPUs' tables of the held-out table's vLLM version, so what transfers is a GPU, not also a kernel generation."""
    if design not in DESIGNS:
        raise ValueError(f"design {design!r}: expected one of {', '.join(DESIGNS)}")
    newest = lambda d: d[units_of(d) == d["gpu"].to_numpy(str)]  # noqa: E731  (LSS rows: unit = GPU)
    score = newest(f if score is None else score)
    rows = []
    for g in sorted(set(score["gpu"])):
        train = newest(f)
        train = train[train["gpu"] != g]
        own = f.loc[(units_of(f) == g) & (f["source"] == "aic").to_numpy(), "version"] if "version" in f else []
        if design == "same-version" and len(set(own)) == 1:
            same = f[(f["gpu"] != g) & (f["source"] == "aic") & (f["version"] == next(iter(set(own))))]
            if len(set(same["gpu"])) >= 2:
                train = same
        train, test = train.reset_index(drop=True), score[score["gpu"] == g].reset_index(drop=True)
        fr = fit(train)
        vals = transferred(fr, g, sorted(set(units_of(train))))
        lss = test[test["source"] == "lss"].reset_index(drop=True)
        if len(lss):
            frozen = {n: vals[n] for n in names_for(lss) if not n.startswith("lss-") and n in vals}
            vals.update(fit(lss, frozen=frozen).values)
        p = predict(test, vals)
        out = test.copy()
        out["fold"], out["predicted_s"], out["design"] = f"gpu-out:{g}", p, design
        out["transferred_from"] = ", ".join(fused_units(fr, sorted(set(units_of(train)))))
        out["error"] = p / out["time_s"].to_numpy(float) - 1.0
        rows.append(out)
    return pd.concat(rows, ignore_index=True)


def pair_ratios(f: pd.DataFrame) -> pd.DataFrame:
    """For every two tables of one vLLM version on different GPUs, the median log time ratio over the rows they share
    (same shape, dtype, TP / EP, routing), by tokens and EP band: what a GPU changes when the kernels do not."""
    keys = ["dtype", "tokens", "hidden", "inter", "topk", "experts", "tp", "ep", "distribution"]
    a = f[f["source"] == "aic"]
    out = []
    for v, d in a.groupby("version"):
        units = sorted(set(units_of(d)))
        for i, u in enumerate(units):
            for w in units[i + 1:]:
                m = d[units_of(d) == u].merge(d[units_of(d) == w], on=keys, suffixes=("_a", "_b"))
                if len(m) < 20:
                    continue
                m = m.assign(r=np.log(m["time_s_a"] / m["time_s_b"]),
                             tokens_band=pd.cut(m["tokens"], [0, 8, 64, 512, 4096, np.inf],
                                                labels=["1-8", "9-64", "65-512", "513-4096", "> 4096"]),
                             ep_band=np.where(m["ep"] <= 1, "1", np.where(m["ep"] <= 16, "2-16", ">= 32")))
                g = m.groupby(["tokens_band", "ep_band"], observed=True)["r"].agg(["median", "size"]).reset_index()
                bw = [get_hardware(gpu_of(x)).memory_bandwidth_bytes_per_s for x in (u, w)]
                out.append(g.assign(version=v, a=u, b=w, bandwidth=np.log(bw[1] / bw[0])))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def summarize(h: pd.DataFrame, by=("fold", "source")) -> pd.DataFrame:
    g = h.assign(ae=h["error"].abs()).groupby(list(by))
    return g.agg(points=("ae", "size"), median_ape=("ae", "median"), p90_ape=("ae", lambda x: float(np.quantile(x, 0.9))),
                 bias=("error", "median")).reset_index()
