"""What the engine-level step model's fit writes: the catalog's priors (``simulator/catalog/gpu_priors.yaml``:
each GPU's step parameters with their kind and source) and the report (``report.md``, ``heldout.csv``, ``params.yaml``);
:func:`fit_and_report` is ``specsim fit engine``'s whole job. The fit: :mod:`calibrate.gpu_priors.engine_fit`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.engine_data import (ENGINE, SHAPE, SHARED, Obs, campaign_provenance, data_commit,
                                             load_all)
from calibrate.gpu_priors.engine_fit import (SAME_CHIP, EngineFit, b200_baseline_check, engine_to_kernel_ratios, fit,
                                                   heldout, kernel_chip, kernel_compute_efficiency,
                                                   kernel_stream_efficiency, stream_efficiency_for, summarize)
from calibrate.gpu_priors.priors_chain import warn_later_fits

# ---- catalog priors, report ------------------------------------------------------------------------------
STEP_PARAMS = ("mem_efficiency", "compute_efficiency", "layer_overhead_s", "step_overhead_s", "seq_overhead_s",
               "draft_step_overhead_s", "roofline_p", "multi_token_penalty", "kv_mem_efficiency")
DRAFT_HEAD_FOR_PRIOR = "eagle1"  # a plain one-layer head's pass (EAGLE-3's mid-2025 vLLM pass cost several times more)


def prior_entry(value, kind, source, stderr=None) -> dict:
    """One catalog prior: its value (4 significant digits), kind, source and, where finite, its standard error."""
    out = {"value": float(f"{value:.4g}"), "kind": kind, "source": source}
    if stderr is not None and np.isfinite(stderr):
        out["stderr"] = float(f"{stderr:.3g}")
    return out


SOURCE_NAMES = {"lss": "LLMServingSim layer passes", "lib": "LLM-Inference-Bench vLLM runs", "v1": "vLLM V1 batch-1 steps",
                "ours": "our GPU campaign (reports/gpu-campaign-*: CUDA-graph decoder steps)"}


ENG = "engine-level fit (calibrate.gpu_priors.engine_fit, docs/gpu-cost-model.md)"


@dataclass
class _Fitted:
    """What every GPU's priors are drawn from: the fit (``fr``), the GPUs it fitted an eta_comp for, the kernel
    tables' weight-stream and GEMM fractions, the median engine/kernel compute ratio (with its list), the kernel-level
    priors already in the catalog and the sources per GPU."""
    fr: EngineFit
    fitted_gpus: list
    kernel: dict
    gemm: dict
    ratio: float | None
    ratio_list: str
    existing: dict
    gpu_sources: dict


def _mem_efficiency(g: str, kernel: dict) -> dict:
    e = stream_efficiency_for(g, kernel)
    if e is None:
        med = float(np.median([k["mem_efficiency"] for k in kernel.values()]))
        listed = ", ".join(f"{k} {x['mem_efficiency']:.3f}" for k, x in kernel.items())
        return prior_entry(med, "transferred", f"median of the kernel-table weight streams ({listed}) x this GPU's BW")
    return prior_entry(e[0], e[1], e[2])


def _compute_efficiency(g: str, c: _Fitted) -> dict:
    """Fitted on this GPU or its chip, else the catalog's calibrated kernel figure, else this GPU's GEMM kernels x the
    engine/kernel ratio, else the median of the fitted GPUs."""
    v, se, fitted_gpus = c.fr.values, c.fr.stderr, c.fitted_gpus
    own = g if g in fitted_gpus else SAME_CHIP.get(g) if SAME_CHIP.get(g) in fitted_gpus else None
    own = own or next((a for a, b in SAME_CHIP.items() if b == g and a in fitted_gpus), None)
    if own is not None:
        n = f"{own}.compute_efficiency"
        return prior_entry(v[n], "calibrated" if own == g else "transferred",
                           f"{ENG}: {'' if own == g else f'same chip as {own}: '}"
                           f"{' / '.join(SOURCE_NAMES[x] for x in c.gpu_sources.get(own, ['lss', 'lib']))}"
                           f", passes above the ridge", se.get(n))
    if c.existing.get(g, {}).get("compute_efficiency", {}).get("kind") == "calibrated":
        return c.existing[g]["compute_efficiency"]
    if (chip := kernel_chip(g, c.gemm)) and c.ratio is not None:
        k = c.gemm[chip]
        return prior_entry(k["compute_efficiency"] * c.ratio, "transferred",
                           f"{ENG}: this GPU's own GEMM kernels x the engine/kernel ratio: "
                           f"{k['source']}; x {c.ratio:.3f}, the median over the engine-fitted GPUs with a "
                           f"GEMM table ({c.ratio_list})")
    vals = [v[f"{x}.compute_efficiency"] for x in fitted_gpus]
    return prior_entry(float(np.median(vals)), "transferred",
                       f"{ENG}: median of the fitted GPUs ({', '.join(fitted_gpus)}) x this GPU's F")


def _host_terms(g: str, fr: EngineFit) -> dict:
    """The per-layer, per-step and draft-head costs (vLLM V1 on an H100: calibrated there, transferred elsewhere),
    the per-sequence cost and the shared shape parameters."""
    v, se = fr.values, fr.stderr
    here = g == "h100-sxm"
    src_v1 = ("vLLM V1 batch-1 decode and speculative iterations on an H100 (vllm-spec-decode-batch1, Llama-3.1-8B)"
              + ("" if here else "; transferred as measured (host-side and graph-replay costs, assumed the same on this GPU)"))
    p = {"layer_overhead_s": prior_entry(v["v1.layer_overhead_s"], "calibrated" if here else "transferred",
                                         f"{ENG}: per layer under CUDA graphs; {src_v1}", se.get("v1.layer_overhead_s")),
         "step_overhead_s": prior_entry(v["v1.step_overhead_s"], "calibrated" if here else "transferred",
                                        f"{ENG}: per engine step; {src_v1}", se.get("v1.step_overhead_s"))}
    n = f"v1-{DRAFT_HEAD_FOR_PRIOR}.draft_step_overhead_s"
    if n in v:
        p["draft_step_overhead_s"] = prior_entry(v[n], "calibrated" if here else "transferred",
                                                 f"{ENG}: one head pass inside a speculative step (the TPOT x acceptance slope "
                                                 f"in k of an EAGLE-1 head); EAGLE-3's pass: {v.get('v1-eagle3.draft_step_overhead_s', float('nan')) * 1e3:.2f} ms; "
                                                 f"{src_v1}", se.get(n))
    p["seq_overhead_s"] = prior_entry(v["lib.seq_overhead_s"], "transferred",
                                      f"{ENG}: per sequence per step, LLM-Inference-Bench vLLM ~0.5 offline runs (A100, H100, "
                                      f"GH200; batch 1-64); today's engines not measured per sequence here: an upper bound",
                                      se.get("lib.seq_overhead_s"))
    for n in SHAPE:
        p[n] = prior_entry(v[n], "calibrated" if n in fr.fitted else "prior",
                           f"{ENG}: shared by every GPU (LLMServingSim layer passes 1-2048 tokens, H100 and RTX A6000; "
                           f"LLM-Inference-Bench runs; vLLM V1 verification passes; our GPU campaign's CUDA-graph decode "
                           f"steps, H100 and H200, batch 1-256, context 1k-16k)", se.get(n))
    return p


def catalog_priors(fr: EngineFit, gpus: list[str], existing: dict, gpu_sources: dict | None = None) -> dict[str, dict]:
    """The step model's parameters for every catalog GPU: fitted where its data are, transferred where not (which,
    from what: in each ``source``). ``existing``: the kernel-level priors (all-reduce, eta_comp of profiled GPUs).
    ``gpu_sources``: per GPU, the sources with its rows (named in each calibrated parameter's source)."""
    kernel = kernel_stream_efficiency()
    v = fr.values
    fitted_gpus = sorted({n.split(".")[0] for n in fr.fitted if n.endswith(".compute_efficiency")})
    gemm = kernel_compute_efficiency()
    ratios = engine_to_kernel_ratios({x: v[f"{x}.compute_efficiency"] for x in fitted_gpus}, gemm)
    ratio = float(np.median(list(ratios.values()))) if ratios else None
    ratio_list = ", ".join(f"{x} {q:.3f}" for x, q in sorted(ratios.items()))
    c = _Fitted(fr, fitted_gpus, kernel, gemm, ratio, ratio_list, existing, gpu_sources or {})
    return {g: {"mem_efficiency": _mem_efficiency(g, kernel), "compute_efficiency": _compute_efficiency(g, c),
                **_host_terms(g, fr)} for g in gpus}


def merge_priors_file(path: Path, priors: dict[str, dict], command: str, *, evidence: str, says: str,
                      marks: tuple[str, ...]) -> None:
    """Merge ``priors`` (GPU -> parameter -> value, kind, source) into the catalog's priors file: those parameters
    replace the file's, every other stays; ``evidence.EVIDENCE.command`` records ``command``; the header keeps its
    comment lines but those naming a ``marks`` word (an earlier run of the same fit), then adds ``says`` and the
    command. Written atomically; a fit of the chain rerun before later ones it feeds warns
    (:func:`calibrate.gpu_priors.priors_chain.warn_later_fits`)."""
    import yaml

    from simulator.inputs.loading import write_atomic

    path = Path(path)
    raw = (yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else {}) or {}
    recorded = raw.get("evidence") if isinstance(raw.get("evidence"), dict) else {}
    recorded = dict(recorded)  # the fits that had written before this one
    pri = raw.get("priors", {})
    for g, p in priors.items():
        pri.setdefault(g, {}).update(p)
    raw["priors"] = pri
    raw.setdefault("evidence", {})[evidence] = {"command": command}
    old = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    head = [x for x in old if x.startswith("#") and not any(w in x for w in marks)]
    write_atomic(path, "\n".join(head + [says, f"#   {command}"]) + "\n" + yaml.safe_dump(raw, sort_keys=False, width=120))
    warn_later_fits(path, evidence, recorded)


def update_priors_file(path: Path, priors: dict[str, dict], command: str) -> None:
    """Merge the step model into the catalog's priors file: its parameters replace the kernel-level ones, the
    all-reduce figures and call overhead stay; the header names both commands."""
    merge_priors_file(path, priors, command, evidence="engine_step_model",
                      says="# Then the engine-level step model replaces the step terms (do not edit by hand):",
                      marks=("engine_fit", "fit-engine", "fit engine", "engine-level step model"))


def _provenance(obs: dict[str, Obs], fr: EngineFit, command: str, date: str) -> dict:
    """params.yaml: when, how, on which rows and data versions, and every parameter's value with its stderr (or why
    it is fixed)."""
    return {"date": date, "command": command, "method": "calibrate.fit.fit_cost.fit_log_times on log step / run times "
            "(posterior mode, soft-L1); eta_mem per GPU frozen at the kernel-table weight stream",
            "sources": {s: {"rows": len(o), "gpus": sorted(set(o.frame["gpu"]))} for s, o in obs.items()},
            "data": {"engine-measurements": data_commit(ENGINE / "llmservingsim-layer-profiles"),
                     "llm-inference-bench": data_commit(ENGINE / "llm-inference-bench"),
                     "aiconfigurator": data_commit(SHARED / "aiconfigurator-vllm-kernels"),
                     "vllm-spec-decode-batch1": "vLLM issue #20780 (transcribed)",
                     "gpu-campaign": campaign_provenance()},
            "params": {n: {"value": float(f"{x:.5g}"), **({"stderr": float(f"{fr.stderr[n]:.3g}")} if n in fr.stderr else
                                                          {"fixed": fr.fixed.get(n, "")})} for n, x in fr.values.items()}}


def _fit_lines(fr: EngineFit, summ: pd.DataFrame, command: str, date: str) -> list[str]:
    """The report's parameters and held-out error tables."""
    lines = [f"# Engine-level GPU step model: fit and held-out errors ({date})", "",
             f"Command: `{command}`", "", "## Parameters (fitted on every source)", "",
             "| parameter | value | stderr / why fixed |", "|---|---|---|"]
    for n, x in fr.values.items():
        lines.append(f"| {n} | {x:.4g} | {('±%.2g' % fr.stderr[n]) if n in fr.stderr else fr.fixed.get(n, '')} |")
    lines += ["", "## Held-out whole-step errors", "",
              "fold: `gpu-out:G` fit without GPU G (its per-GPU parameters transferred); `source-out:S` every shared "
              "parameter from the other sources, only S's own engine offsets fitted on S; `extrapolate:...` fit on the "
              "small cases, predict the rest. APE = |predicted / measured - 1|; bias = median signed error.", "",
              "| fold | source | points | median APE | p90 APE | bias |", "|---|---|---|---|---|---|"]
    for r in summ.itertuples():
        lines.append(f"| {r.fold} | {r.source} | {r.points} | {r.median_ape:.1%} | {r.p90_ape:.1%} | {r.bias:+.1%} |")
    return lines


def _b200_lines(out: Path, fr: EngineFit) -> list[str]:
    """The B200 check (a GPU no fit saw), written to ``b200_check.csv``, and its report section; none without its
    data."""
    from simulator.inputs.loading import write_atomic

    try:
        b2 = b200_baseline_check(fr.values)
    except FileNotFoundError:
        b2 = None
    if b2 is None:
        return []
    write_atomic(out / "b200_check.csv", b2.to_csv(index=False))
    lines = ["", "## A GPU no fit saw: B200, closed-loop decode without speculation (speculators sweep, vLLM 0.30)", "",
             "Median ITL measured vs the step model's decode step at that many sequences (the catalog's qwen3.8-27b: "
             "48 Gated DeltaNet layers keep an fp32 state per sequence; the growth with concurrency is the check; "
             "`b200_baseline_check`).", "",
             "| concurrency | measured ITL ms | predicted step ms | growth measured | growth predicted | growth error |",
             "|---|---|---|---|---|---|"]
    for r in b2.itertuples():
        lines.append(f"| {r.concurrency} | {r.measured_itl_ms:.2f} | {r.predicted_step_ms:.2f} | {r.measured_growth:.2f} | "
                     f"{r.predicted_growth:.2f} | {r.growth_error:+.1%} |")
    return lines


def _heldout_plot(h: pd.DataFrame, path: Path) -> None:
    from simulator.inputs.loading import save_figure_atomic
    from simulator.report.plots import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 6))
    for (fold, src), d in h.groupby(["fold", "source"]):
        ax.loglog(d["time_s"], d["predicted_s"], ".", ms=3, label=f"{fold} ({src})")
    lo, hi = h[["time_s", "predicted_s"]].min().min(), h[["time_s", "predicted_s"]].max().max()
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.5)
    ax.set_xlabel("measured (s)")
    ax.set_ylabel("predicted, held out (s)")
    ax.legend(fontsize=5)
    save_figure_atomic(fig, path)
    plt.close(fig)


def write_report(out: Path, obs: dict[str, Obs], fr: EngineFit, h: pd.DataFrame, command: str, date: str) -> None:
    """report.md, heldout.csv, summary.csv, params.yaml, heldout.png under ``out`` (each written atomically)."""
    import yaml

    from simulator.inputs.loading import write_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summ = summarize(h)
    write_atomic(out / "heldout.csv", h.to_csv(index=False))
    write_atomic(out / "summary.csv", summ.to_csv(index=False))
    write_atomic(out / "params.yaml", yaml.safe_dump(_provenance(obs, fr, command, date), sort_keys=False, width=120))
    lines = _fit_lines(fr, summ, command, date) + _b200_lines(out, fr)
    write_atomic(out / "report.md", "\n".join(lines) + "\n")
    _heldout_plot(h, out / "heldout.png")


def fit_and_report(report: Path, priors: Path | None, date: str | None, with_heldout: bool, command: str) -> pd.DataFrame:
    """The fit on every engine measurement in the shared data (+ our GPU campaign's records), its held-out folds
    (unless ``with_heldout`` is false) and ``REPORT/{report.md, heldout.csv, params.yaml}``; with ``priors``, the catalog
    priors file updated. Returns the held-out rows."""
    import datetime as _dt

    import yaml

    from simulator.catalog import hardware_catalog
    from simulator.errors import InputError

    obs = load_all()
    if not obs:
        raise InputError(str(ENGINE), None, "no engine measurements found")
    fr = fit(obs)
    h = heldout(obs) if with_heldout else pd.DataFrame(columns=["fold", "source", "time_s", "predicted_s", "error"])
    write_report(Path(report), obs, fr, h, command, date or _dt.date.today().isoformat())
    if priors:
        priors = Path(priors)
        gpus = [g for g, hw in hardware_catalog().items() if hw.interconnect != "none"]
        existing = (yaml.safe_load(priors.read_text(encoding="utf-8")) or {}).get("priors", {}) if priors.is_file() else {}
        gpu_sources = {}
        for s, o in obs.items():
            for g in sorted(set(o.frame["gpu"])):
                gpu_sources.setdefault(g, []).append(s)
        update_priors_file(priors, catalog_priors(fr, gpus, existing, gpu_sources), command)
    return h
