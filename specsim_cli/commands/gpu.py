"""The GPU evidence pipeline's commands: ``import vidur | aiconfigurator | llmservingsim | llm-inference-bench``,
``fit gpu | engine | moe | mla | quant | transfer-priors``, ``validate priors | spec-sweep | step-summary``,
``measure step-plan | step-predict`` (thin: parse, call :mod:`calibrate.gpu_priors`, print). Bad input: one line
``error: FILE: ...`` on stderr, exit 2 (the ``specsim`` error contract); tables an importer skipped: one ``warning:``
line on stderr naming them and why."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from simulator.errors import InputError
from simulator.output_contract import writes
from simulator.paths import shared


def _warn_skipped(skipped: dict[str, str], modules: dict[str, int] | None = None) -> None:
    """One stderr line naming what an importer skipped (files it cannot interpret, modules it does not map)."""
    items = [f"{f} ({why})" for f, why in skipped.items()]
    items += [f"module {m!r} ({n} rows: not one the importer maps)" for m, n in (modules or {}).items()]
    if items:
        what = f"{len(skipped)} table(s) whose layout cannot be interpreted" if skipped else ""
        what += (" and " if skipped and modules else "") + (f"{len(modules)} unknown module(s)" if modules else "")
        typer.echo(f"warning: skipped {what}: " + "; ".join(items), err=True)


def _some(df, source: Path, what: str = "records") -> None:
    """An import that finds nothing is bad input (a header without rows, the wrong folder), not an empty output."""
    if not len(df):
        raise InputError(str(source), None, f"no {what} to import: it holds none this importer reads (a header "
                         "without rows, or another source's layout)")


def _wrote(df, out: Path) -> None:
    typer.echo(f"wrote {len(df)} records to {out} ({', '.join(f'{k} {v}' for k, v in df['op'].value_counts().items())})")


@writes(out="csv")
def import_vidur_cmd(
    folder: Path = typer.Argument(..., help="Vidur data/profiling-style folder (compute/, network/)"),
    out: Path = typer.Option(..., help="records CSV to write (+ OUT.provenance.yaml)"),
) -> None:
    """Vidur's per-layer op and all-reduce profiles -> measured op records (our contract).

    Example: specsim import vidur ../shared/data/vidur-gpu-profiles --out out/gpu-records/vidur.csv"""
    from calibrate.gpu_priors.import_vidur import import_vidur
    from calibrate.contracts.op_records import write_records

    df, prov = import_vidur(folder)
    _some(df, folder)
    write_records(df, out, prov)
    _wrote(df, out)


@writes(out="csv")
def import_aic_cmd(
    folder: Path = typer.Argument(..., help="AIConfigurator systems/data-style folder (<gpu>/{gemm,attention,comm}/...)"),
    out: Path = typer.Option(..., help="records CSV to write (+ OUT.provenance.yaml)"),
) -> None:
    """AIConfigurator's collected vLLM kernel tables -> measured op records (our contract).

    Example: specsim import aiconfigurator ../shared/data/aiconfigurator-vllm-kernels --out out/gpu-records/aiconfigurator.csv"""
    from calibrate.gpu_priors.import_aiconfigurator import import_aiconfigurator
    from calibrate.contracts.op_records import write_records

    df, prov = import_aiconfigurator(folder)
    _some(df, folder)
    write_records(df, out, prov)
    _warn_skipped(prov.get("files_skipped", {}))
    _wrote(df, out)


@writes(out="csv")
def import_lss_cmd(
    folder: Path = typer.Argument(..., help="LLMServingSim perf_models-style folder (<GPU>/<org>/<model>/tp<N>/)"),
    out: Path = typer.Option(..., help="records CSV to write (+ OUT.provenance.yaml)"),
) -> None:
    """LLMServingSim's per-module layer and attention profiles -> measured op records (our contract).

    Example: specsim import llmservingsim FOLDER --out out/gpu-records/llmservingsim.csv"""
    from calibrate.gpu_priors.import_llmservingsim import import_llmservingsim
    from calibrate.contracts.op_records import write_records

    df, prov = import_llmservingsim(folder)
    _some(df, folder)
    write_records(df, out, prov)
    _warn_skipped(prov.get("files_skipped", {}), prov.get("modules_unknown", {}))
    _wrote(df, out)


@writes(out="csv")
def import_lib_cmd(
    file: Path = typer.Argument(..., help="LLM-Inference-Bench All_results.csv"),
    out: Path = typer.Option(..., help="runs CSV to write (+ OUT.provenance.yaml)"),
) -> None:
    """LLM-Inference-Bench's whole offline-batch runs -> one row per consistent run (our names and units).

    Example: specsim import llm-inference-bench All_results.csv --out out/gpu-records/lib-runs.csv"""
    import datetime as dt

    from calibrate.gpu_priors.import_llm_inference_bench import BENCH_COLUMNS, import_llm_inference_bench
    from calibrate.contracts.op_records import write_table

    df, prov = import_llm_inference_bench(file)
    _some(df, file, "runs")
    meta = {"date": dt.date.today().isoformat(), **prov, "rows": int(len(df)),
            "columns": {c: f"{t}: {u}" for c, (t, u) in BENCH_COLUMNS.items()}}
    write_table(df[list(BENCH_COLUMNS)], out, meta)
    typer.echo(f"wrote {len(df)} runs to {out} ({sum(prov['rows_dropped'].values())} inconsistent rows dropped)")


@writes(out="yaml")
def fit_gpu_cmd(
    records: list[Path] = typer.Argument(..., help="records CSVs (import-vidur / import-aiconfigurator output)"),
    gpu: str = typer.Option(..., help="catalog hardware name, e.g. a100-80gb"),
    out: Path = typer.Option(..., help="profile YAML to write, e.g. calibrate/gpu_priors/profiles/gpu_a100-80gb.yaml"),
    date: str = typer.Option(None, help="date recorded in the provenance (default: today)"),
) -> None:
    """Fit the GPU kernel model's named parameters for one GPU and write the profile with provenance.

    Example: specsim fit gpu out/gpu-records/vidur.csv out/gpu-records/aiconfigurator.csv --gpu a100-80gb --out out/gpu_a100-80gb.yaml"""
    import sys

    import pandas as pd
    import yaml

    from calibrate.gpu_priors.profile import build_gpu_profile, write_gpu_profile
    from calibrate.contracts.op_records import read_records, sidecar_path

    frames, inputs = [], {}
    for r in records:
        frames.append(read_records(r))
        side = sidecar_path(r)
        if side.is_file():
            meta = yaml.safe_load(side.read_text(encoding="utf-8")) or {}
            inputs[meta.get("source", str(r))] = (f"{meta.get('source_path', r)} (repo {meta.get('source_repo', '?')}"
                                                  f" @ {str(meta.get('source_commit', '?'))[:12]})")
    command = "specsim fit gpu " + " ".join(sys.argv[3:]) if sys.argv[1:3] in (["fit", "gpu"], ["calibrate", "fit-gpu"]) \
        else "specsim fit gpu"
    prof = build_gpu_profile(pd.concat(frames, ignore_index=True), gpu, inputs, command, date)
    write_gpu_profile(prof, out, command)
    typer.echo(f"wrote {out}: " + ", ".join(f"{k}={v['value']:.4g} ({v['kind']})" for k, v in prof["params"].items()))


@writes(report="folder", priors="yaml")
def fit_engine_cmd(
    ctx: typer.Context,
    report: Path = typer.Option(..., "--report", help="report folder (report.md, heldout.csv, params.yaml), written "
                                "beside the --priors catalog update"),
    priors: Optional[Path] = typer.Option(None, help="catalog priors YAML to update (simulator/catalog/gpu_priors.yaml)"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
    heldout: bool = typer.Option(True, help="run the held-out folds (~2 min); --no-heldout skips them"),
) -> None:
    """Fit the engine-level GPU step model on ../shared/data/engine-measurements and our GPU campaign (~4 min).

    Example: specsim fit engine --report out/gpu-step-model --no-heldout"""
    from calibrate.gpu_priors.engine_fit import summarize
    from calibrate.gpu_priors.engine_report import fit_and_report
    from simulator.command_line import command_line

    h = fit_and_report(report, priors, date, heldout, command_line(ctx))
    if len(h):
        typer.echo(summarize(h).to_string(index=False))
    typer.echo(f"wrote {report}" + (f" and {priors}" if priors else ""))


@writes(report="folder", priors="yaml")
def fit_moe_cmd(
    ctx: typer.Context,
    report: Path = typer.Option(..., "--report", help="report folder (report.md, heldout.csv, params.yaml), written "
                                "beside the --priors catalog update"),
    records: Path = typer.Option(Path("out/gpu-records/aiconfigurator.csv"),
                                 help="op records CSV with AIConfigurator's moe rows (specsim import aiconfigurator)"),
    priors: Optional[Path] = typer.Option(None, help="catalog priors YAML to update (simulator/catalog/gpu_priors.yaml)"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
) -> None:
    """Fit the cost model's MoE terms on AIConfigurator / LLMServingSim MoE rows, held out by GPU (~15 min).

    Example: specsim fit moe --report out/moe-layer"""
    from calibrate.gpu_priors.moe_report import fit_and_report
    from simulator.command_line import command_line

    typer.echo(fit_and_report(records, report, priors, date, command_line(ctx)).to_string(index=False))


@writes(report="folder", priors="yaml")
def fit_mla_cmd(
    ctx: typer.Context,
    report: Path = typer.Option(..., "--report", help="report folder (report.md, heldout.csv)"),
    priors: Optional[Path] = typer.Option(None, help="catalog priors YAML to update (simulator/catalog/gpu_priors.yaml)"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: undated)"),
    data: Optional[Path] = typer.Option(None, help="AIConfigurator's kernel tables (the MLA module rows; default: "
                                        "../shared/data/aiconfigurator-vllm-kernels beside the repository)"),
) -> None:
    """Fit the MLA module's fixed cost per layer (t_mla) per GPU on AIConfigurator's MLA tables, held out by GPU.

    Example: specsim fit mla --report reports/mla-layer --priors simulator/catalog/gpu_priors.yaml"""
    from calibrate.gpu_priors.mla_fit import ROOT, fit_and_report
    from simulator.command_line import command_line

    typer.echo(fit_and_report(data or ROOT, report, priors, date, command_line(ctx)))


@writes(out="yaml")
def fit_attention_cmd(
    ctx: typer.Context,
    out: Optional[Path] = typer.Option(None, help="attention kernels YAML to write (simulator/catalog/attention_kernels.yaml)"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: undated)"),
    data: Optional[Path] = typer.Option(None, help="AIConfigurator's kernel tables (the context-attention rows; default: "
                                        "../shared/data/aiconfigurator-vllm-kernels beside the repository)"),
) -> None:
    """Fit the Triton / FlashAttention prefill ratio (the attention vLLM runs for gpt-oss before Hopper) on
    AIConfigurator's context-attention tables (seconds).

    Example: specsim fit attention --out simulator/catalog/attention_kernels.yaml"""
    from calibrate.gpu_priors.attention_fit import ROOT, fit_and_write
    from simulator.command_line import command_line

    typer.echo(fit_and_write(data or ROOT, out, command_line(ctx), date))


@writes(out="yaml")
def fit_allreduce_cmd(
    ctx: typer.Context,
    out: Optional[Path] = typer.Option(None, help="all-reduce YAML to write (simulator/catalog/allreduce.yaml)"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: undated)"),
    data: Optional[Path] = typer.Option(None, help="AIConfigurator's kernel tables (the all-reduce rows; default: "
                                        "../shared/data/aiconfigurator-vllm-kernels beside the repository)"),
) -> None:
    """Fit the large-message all-reduce (NCCL, eager: a prefill chunk's) per GPU and TP degree on AIConfigurator's
    all-reduce tables, with its transfer to unmeasured NVLink GPUs (seconds).

    Example: specsim fit allreduce --out simulator/catalog/allreduce.yaml"""
    from calibrate.gpu_priors.allreduce_fit import ROOT, fit_and_write
    from simulator.command_line import command_line

    typer.echo(fit_and_write(data or ROOT, out, command_line(ctx), date))


@writes(report="folder", out="yaml")
def fit_quant_cmd(
    ctx: typer.Context,
    report: Path = typer.Option(..., "--report", help="report folder (report.md, heldout.csv, kernel_ratios.csv, bursts.csv)"),
    out: Optional[Path] = typer.Option(None, help="quantised GEMM kinds YAML to write (simulator/catalog/quant_gemm.yaml)"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
) -> None:
    """Fit the quantised GEMM kinds (FP8, FP8 block, NVFP4 on AIConfigurator's GEMM tables; weight-only FP8 / AWQ on
    GPUStack's A100 bursts), held out by GPU and by model (~1 min).

    Example: specsim fit quant --report reports/quant-gemm --out simulator/catalog/quant_gemm.yaml"""
    from calibrate.gpu_priors.quant_report import fit_and_report
    from simulator.command_line import command_line

    typer.echo(fit_and_report(report, out, date, command_line(ctx)).round(1).to_string(index=False))


@writes(out="yaml")
def transfer_priors_cmd(
    ctx: typer.Context,
    out: Path = typer.Option(..., help="GPU priors YAML to write (simulator/catalog/gpu_priors.yaml: the catalog's)"),
    records: Optional[list[Path]] = typer.Option(
        None, help="records CSV of specsim import vidur / aiconfigurator (repeatable; default: "
                   "out/gpu-records/vidur.csv and out/gpu-records/aiconfigurator.csv)"),
) -> None:
    """Whole-pass cost priors for every catalog GPU, from the measured kernel profiles (transferred where unprofiled).

    Example: specsim fit transfer-priors --records out/gpu-records/vidur.csv --out out/gpu_priors.yaml"""
    from calibrate.gpu_priors.transfer import STEP_PRIORS, write_priors
    from simulator.command_line import command_line

    paths = [str(r) for r in records] if records else ["out/gpu-records/vidur.csv", "out/gpu-records/aiconfigurator.csv"]
    res = write_priors(paths, out, command_line(ctx))
    for g, p in res["priors"].items():
        typer.echo(f"{g:10s} " + "  ".join(f"{n}={v['value']:.4g}({v['kind'][0]})" for n, v in p.items()
                                           if n not in STEP_PRIORS))
    typer.echo(f"wrote {out}")


@writes(out="folder")
def check_priors_cmd(
    ctx: typer.Context,
    out: Path = typer.Option(..., help="folder for report.md"),
    traces: str = typer.Option(str(shared("specreason-aime-traces")),
                               help="the SpecReason traces folder (problem60-runs0-7.jsonl, per-problem-aggregates.json)"),
) -> None:
    """The GPU priors end to end, before (datasheet era) and after: decode time per token of the SpecReason traces.

    Example: specsim validate priors --out out/gpu-e2e"""
    from validate.gpu_priors_endtoend import write_report
    from simulator.command_line import command_line

    typer.echo(write_report(traces, out, command_line(ctx)))
    typer.echo(f"\nwrote {out / 'report.md'}")


@writes(out="folder")
def spec_sweep_cmd(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", "--report", help="folder for report.md and itl.csv"),
    fit_hosts: Optional[Path] = typer.Option(None, "--fit-hosts", help="engine catalog (simulator/catalog/"
                                             "engine_hosts.yaml) to write vLLM 0.30's host terms into, fitted on "
                                             "the baseline arm, before the predictions"),
) -> None:
    """Speculation under load on a GPU no fit saw: the B200 closed-loop sweep, predicted per arm and concurrency.

    Example: specsim validate spec-sweep --out reports/b200-speculation"""
    from calibrate.gpu_priors.spec_sweep import SWEEP, write_sweep_version
    from validate.spec_sweep import run
    from simulator.errors import InputError

    if not SWEEP.is_dir():
        raise InputError(str(SWEEP), None, f"the B200 sweep is not here ({shared()})")
    if fit_hosts is not None:
        import datetime

        from simulator.catalog.engine_hosts import engine_hosts
        from simulator.command_line import command_line

        t = write_sweep_version(fit_hosts, command_line(ctx), datetime.date.today().isoformat())
        engine_hosts.cache_clear()
        typer.echo("vLLM 0.30 host terms: " + ", ".join(f"{k} {v:.4g}" for k, v in t.items() if not isinstance(v, str)))
    res = run(out)
    for key in ("catalog", "mtp_fitted"):
        typer.echo(f"-- {key}")
        typer.echo(res[key].to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    typer.echo("eta_comp fitted on the MTP arm: %.3f ± %.3f" % res["eta_comp_mtp"])


@writes(out="json")
def step_plan_cmd(
    out: Path = typer.Option(..., help="plan JSON to write (the points calibrate/measure/gpu_step_bench.py times)"),
    models: Optional[str] = typer.Option(None, "--model", "--models",
                                         help="catalog models, comma-separated (default: the campaign's)"),
    max_seconds: float = typer.Option(330.0, help="time bound of the bench's whole call, in seconds"),
    grid: str = typer.Option("campaign", help="campaign (the points the engine fit uses) | heldout (verification "
                             "at batch 16-256 and models no fit has seen: a check, never fitted) | probe | prefill "
                             "(causal prefills of 512-16k tokens and 2k chunks over a growing context, 8B / 32B) | sustained (a 32B "
                             "prefill replayed for 75 s, clocks and power sampled)"),
) -> None:
    """The GPU step campaign's plan: decode, verification, draft-head and prefill points per catalog model.

    Example: specsim measure step-plan --out plan.json"""
    import json

    from calibrate.gpu_priors.step_plan import GRIDS, make_plan
    from simulator.errors import InputError
    from simulator.inputs.loading import write_atomic

    if grid not in GRIDS:
        raise InputError(None, "--grid", f"one of {', '.join(GRIDS)} (got {grid!r})")
    names = [m.strip() for m in models.split(",") if m.strip()] if models else None
    unknown = [m for m in names or [] if m not in GRIDS[grid]]
    if unknown:
        raise InputError(None, "--model", f"no {grid} grid for {', '.join(unknown)} (known: {', '.join(GRIDS[grid])})")
    typer.echo(f"wrote {write_atomic(out, json.dumps(make_plan(names, max_seconds, grid=grid), indent=1))}")


@writes(out="csv")
def step_predict_cmd(
    plan: Path = typer.Argument(..., help="plan JSON (specsim measure step-plan)"),
    hardware: str = typer.Option(..., help="catalog hardware whose priors predict, e.g. h200"),
    out: Path = typer.Option(..., help="predictions CSV to write (predicted-before-fit.csv)"),
    engine_fit: Optional[Path] = typer.Option(None, "--engine-fit", help="an engine fit's params.yaml: adds "
                                              "fitted_ms, the bench step with the fit's values (its own fixed costs)"),
) -> None:
    """The step model's prediction of every planned point, written before the run so the comparison is held out.

    Example: specsim measure step-predict plan.json --hardware h200 --out predicted-before-fit.csv"""
    import json

    from calibrate.gpu_priors.step_plan import load_fitted_values, predict
    from simulator.inputs.loading import write_atomic

    fitted = load_fitted_values(engine_fit) if engine_fit is not None else None
    df = predict(json.loads(plan.read_text(encoding="utf-8")), hardware, fitted=fitted)
    write_atomic(out, df.to_csv(index=False, float_format="%.6g"))
    typer.echo(f"{len(df)} points predicted with {df.attrs['profile']} -> {out}")


@writes(out="folder")
def kernel_plan_cmd(
    hardware: str = typer.Option(..., help="catalog hardware whose priors predict, e.g. h200"),
    out: Path = typer.Option(..., help="folder for plan.json and predicted-before-fit.csv"),
    tiny: bool = typer.Option(False, "--tiny", help="small shapes a CPU dry run times in seconds (the plan allows it)"),
    date: Optional[str] = typer.Option(None, help="date recorded in the plan (default: today, UTC)"),
    grid: str = typer.Option("round2", help="round2 (GEMMs, grouped MoE, memory) | moe-fp8 (grouped MoE layers with "
                             "FP8 experts beside their bf16 twins)"),
) -> None:
    """The round-two kernel campaign's plan (bf16 / FP8 GEMMs, grouped-GEMM MoE, memory) and the model's prediction
    of every point, written before the device call; the device runs calibrate/measure/gpu_kernel_bench.py on it.

    Example: specsim measure kernel-plan --hardware h200 --out reports/gpu-campaign-2-h200"""
    import datetime as dt
    import json

    from calibrate.gpu_priors.kernel_plan import make_plan, predict
    from simulator.catalog import get_hardware
    from simulator.inputs.loading import write_atomic

    from calibrate.gpu_priors.kernel_plan import GRIDS
    from simulator.errors import InputError

    get_hardware(hardware)  # an unknown name: the catalog's error
    if grid not in GRIDS:
        raise InputError(None, "--grid", f"one of {', '.join(GRIDS)} (got {grid!r})")
    plan = make_plan(tiny=tiny, grid=grid)
    plan["predicted"] = {"hardware": hardware, "date": date or dt.datetime.now(dt.timezone.utc).date().isoformat(),
                         "source": "catalog priors (prior_profile), quantised GEMM kinds, MoE terms; "
                                   "calibrate/gpu_priors/kernel_plan.py"}
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "plan.json", json.dumps(plan, indent=1))
    df = predict(plan, hardware)
    write_atomic(out / "predicted-before-fit.csv", df.to_csv(index=False, float_format="%.6g"))
    typer.echo(f"{len(df)} points planned and predicted for {hardware} -> {out}")


@writes(out="csv")
def kernel_summary_cmd(
    folder: Path = typer.Argument(..., help="a kernel campaign folder: predicted-before-fit.csv and run folders "
                                  "(records.jsonl) under it"),
    out: Path = typer.Option(..., help="CSV of every measured point beside its prediction"),
) -> None:
    """The round-two kernel campaign's points measured against the predictions committed before the device call:
    per op, median and p90 |error| and the median signed error.

    Example: specsim validate kernel-summary reports/gpu-campaign-2-h200 --out reports/gpu-campaign-2-h200/before-fit.csv"""
    import pandas as pd

    from calibrate.gpu_priors.kernel_plan import compare, fp8_ratios, level_by_size, read_records, summary
    from simulator.errors import InputError
    from simulator.inputs.loading import write_atomic

    pred = folder / "predicted-before-fit.csv"
    if not pred.is_file():
        raise InputError(str(pred), None, "no predictions (specsim measure kernel-plan writes them before the run)")
    t = compare(pd.read_csv(pred), read_records(folder))
    write_atomic(out, t.to_csv(index=False, float_format="%.6g"))
    if not len(t):
        typer.echo("no measured points")
        return
    typer.echo(summary(t).to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    lv = level_by_size(t)
    if len(lv):
        typer.echo("Measured / predicted time by size (m for GEMMs, tokens for MoE layers; median over shapes):")
        typer.echo(lv.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    r = fp8_ratios(t)
    if len(r):
        typer.echo("FP8 / bf16 time at the same shapes (GEMMs: median over the linear shapes; moe: one layer each):")
        typer.echo(r.to_string(index=False, float_format=lambda x: f"{x:.2f}"))


def step_summary_cmd(
    folders: list[Path] = typer.Argument(..., help="campaign folders (run-*/ records, predicted-before-fit.csv)"),
    heldout: Optional[Path] = typer.Option(None, help="the engine fit's heldout.csv (after-fit rows for this GPU)"),
    force: bool = typer.Option(False, "--force", help="rewrite a folder's summary.md, before-fit.csv or profile-*.yaml "
                               "that git tracks (a committed campaign's)"),
) -> None:
    """Per campaign folder: summary.md, before-fit.csv and the GPU's profile (before- and after-fit errors), written
    into the folder.

    Example: specsim validate step-summary reports/gpu-campaign-h200 --heldout reports/gpu-step-model/heldout.csv"""
    from simulator.output_contract import check_rewrite
    from validate.gpu_step_summary import summarize

    for f in folders:  # before any work: a committed campaign's files are rewritten only on purpose
        check_rewrite([f / "summary.md", f / "before-fit.csv", *f.glob("profile-*.yaml")], force, "FOLDERS")
    for f in folders:
        summarize(f, heldout)
        typer.echo(f"wrote {f}/summary.md and {f}/before-fit.csv")
