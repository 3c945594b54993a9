"""``specsim validate runs``: thin entry point over :mod:`validate.validation` and :mod:`validate.report`; and
``validate drift`` (:mod:`validate.drift`), ``validate cpu`` (:mod:`validate.campaign`), ``validate inferencex``,
``validate moe-routing`` and ``validate gpu-summary`` (:mod:`validate.gpu_campaign_summary`).

Exit codes: 0 ok, 1 the median APE is above ``--max-median-ape``, 2 bad input (one line) or a case the
tool cannot judge: no uncensored held-out run for distribution mode, or (``--drift flag``, the
default) a held-out run outside the fit runs' speed range -- the report is written, the bar is not
judged; ``--drift exclude`` judges the remaining runs.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from simulator.errors import InputError
from simulator.output_contract import writes
from validate.campaign import DEFAULT_BAR  # stdlib only: the engines are imported when a campaign runs


@writes(report="folder")
def validate(
    inputs: list[Path] = typer.Argument(..., help="run directories or SpecReason trace files/directories"),
    profile: Path = typer.Option(..., "--profile", help="cost profile (specsim fit cost / fit bench), or prior | "
                                                        "datasheet: the runs' hardware before any calibration"),
    report: Path = typer.Option(..., "--out", "--report", help="report folder: report.md, PNGs and CSVs"),
    holdout: Optional[str] = typer.Option(None, "--holdout", help="profile (default) | runs:4-7 | config:KEY=VALUE | loro | "
                                           "batches:0-3/4-7 | requests:odd|even|kfold=K[,seed=S]"),
    workload: Optional[Path] = typer.Option(None, "--workload", help="workload profile for distribution mode "
                                            "(default: refitted per fold from SpecReason traces)"),
    max_median_ape: Optional[float] = typer.Option(None, "--max-median-ape", help="fail (exit 1) above this, e.g. 0.05"),
    bar_target: str = typer.Option("e2e", "--bar-target", help="e2e | calls | distribution"),
    no_distribution: bool = typer.Option(False, "--no-distribution", help="replay only"),
    des_requests: int = typer.Option(1000, "--des-requests", help="DES requests per configuration"),
    seed: int = typer.Option(0, help="seed of the DES and the interval bootstrap"),
    drift: str = typer.Option("flag", "--drift", help="flag: report runs outside the fit runs' speed range and exit 2; "
                              "exclude: leave them out of the figures and the bar"),
    allow_implausible: bool = typer.Option(False, "--allow-implausible", help="validate a profile with a parameter "
                                           "outside its physical range (efficiency > 1, kind rejected); refused "
                                           "(exit 2) otherwise"),
    level: float = typer.Option(0.90, "--level", help="prediction-interval level, e.g. 0.8 (coverage is also "
                                "reported at 50/80/90/95%)"),
    batch_spread: Optional[Path] = typer.Option(None, "--batch-spread", help="per-problem aggregates JSON whose "
                                                "problems are batches of the same setup: intervals for a run of a new "
                                                "batch (machine, load, day), not only a new run of the fit batch"),
):
    """Predict measured held-out runs (trace replay and distribution mode) and report the errors.

    Example: specsim validate runs RUN_DIR... --profile cost.yaml --holdout requests:kfold=2 --out out/validation"""
    from validate.report import write_report
    from validate.validation import NothingToValidate, run_validation

    _check_validate_options(bar_target, max_median_ape, des_requests, seed, level)

    try:
        res = run_validation([str(p) for p in inputs], str(profile), holdout, str(workload) if workload else None,
                             distribution=not no_distribution, des_requests=des_requests, seed=seed, drift=drift,
                             allow_implausible=allow_implausible, level=level,
                             between_batch=str(batch_spread) if batch_spread else None)
    except NothingToValidate as e:
        print(f"FAIL: {e}; nothing written", file=sys.stderr)
        sys.exit(1)
    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    path = write_report(res, report, command, max_median_ape, bar_target)
    print(f"wrote {path}")
    _print_figures(res, level)
    _judge(res, path, drift, bar_target, max_median_ape)


def _check_validate_options(bar_target: str, max_median_ape: float | None, des_requests: int, seed: int,
                            level: float) -> None:
    """``validate runs``' options checked before any work."""
    if bar_target not in ("e2e", "calls", "distribution"):
        raise InputError(None, "--bar-target", f"expected e2e, calls or distribution (got {bar_target!r})")
    if max_median_ape is not None and not max_median_ape > 0:
        raise InputError(None, "--max-median-ape", "must be > 0 (a fraction, e.g. 0.05)")
    if des_requests < 2:
        raise InputError(None, "--des-requests", "must be >= 2")
    if seed < 0:
        raise InputError(None, "--seed", f"must be >= 0 (got {seed})")
    if not 0.0 < level < 1.0:
        raise InputError(None, "--level", f"a fraction between 0 and 1, e.g. 0.9 (got {level})")


def _print_figures(res, level: float) -> None:
    """The parameters' kinds, the errors per mode, the coverage per level and the notes of a validation."""
    from validate.metrics import summary_text

    f = res.figures
    one = len({id(fd.profile) for fd in res.folds}) == 1
    for fold in res.folds[:1] if one else res.folds:
        print(f"  parameters ({'profile' if one else f'fold {fold.name}'}): {param_kinds(fold.profile)}")
    for key, label in (("replay_e2e", "replay e2e"), ("replay_calls", "replay calls"), ("distribution", "distribution")):
        if key in f:
            a = f[key].iloc[0]
            print(f"  {label:13s} {summary_text(a, level)}")
    cov = f.get("coverage_levels")
    if cov is not None and len(cov):
        for scope, g in cov.groupby("scope", sort=False):
            print(f"  coverage {scope:12s} " + ", ".join(f"{100 * r.nominal:g}%: {r.inside}/{r.n}"
                                                          for r in g.itertuples()))
    for n in res.notes:  # never skip a mode silently
        if n.startswith(("distribution mode skipped", "WARNING")) or "left out" in n:
            print(f"  note: {n}")


def _judge(res, path: Path, drift: str, bar_target: str, max_median_ape: float | None) -> None:
    """Drifted runs (exit 2 with ``--drift flag``: the bar is not judged), then the bar (exit 1 above it)."""
    from validate.validation import headline

    flagged = res.flagged_runs
    if flagged:
        d = res.drift_runs.set_index("run_key")
        print(f"  drift: {len(flagged)} held-out run(s) outside the fit runs' speed range: "
              + "; ".join(f"{k} ({d.loc[k, 'drift_scope']})" for k in flagged[:6]) + (" ..." if len(flagged) > 6 else ""))
    if flagged and drift == "flag":
        print(f"error: --drift: {len(flagged)} held-out run(s) unlike the fit runs (another machine, period or load): "
              f"{', '.join(flagged[:4])}{' ...' if len(flagged) > 4 else ''}; the bar was not judged (see {path}; "
              "--drift exclude judges the other runs)", file=sys.stderr)
        sys.exit(2)
    value = headline(res, bar_target)
    if max_median_ape is not None and value > max_median_ape:
        print(f"FAIL: median APE ({bar_target}) {100 * value:.2f}% > {100 * max_median_ape:.2f}%", file=sys.stderr)
        sys.exit(1)  # not typer.Exit: specsim_cli.main.main drops click's returned exit code


def param_kinds(profile) -> str:
    """``mem_efficiency 0.855 [calibrated], ...``: each cost parameter with its kind (``rejected``: outside its
    physical range)."""
    from calibrate.fit.log_time_fit import PARAM_NAMES

    out = []
    for n in PARAM_NAMES:
        p = getattr(profile, n, None)
        out.append(f"{n} catalog prior" if p is None else f"{n} {p.value:.4g} [{p.kind}]")
    return ", ".join(out)


def validate_drift(
    aggregates: Path = typer.Option(..., help="per-problem aggregates JSON (SpecReason experiment_summary layout)"),
    profile: Path = typer.Option(..., help="cost profile whose fit range the aggregates are judged against"),
    traces: Optional[Path] = typer.Option(None, help="per-step traces of some of the runs: measure the aggregate "
                                                     "method's error on them first"),
    lobo: bool = typer.Option(False, "--lobo", help="also the between-batch spread and the leave-one-batch-out "
                                                    "coverage over the aggregates' problems; with --traces, the traced "
                                                    "problem's other runs as a held-out batch (validate.batch)"),
):
    """Drift of runs seen only as aggregates: speed factors against a profile's fit range, and what would explain them.

    Example: specsim validate drift --aggregates ../shared/data/specreason-aime-traces/per-problem-aggregates.json
    --profile simulator/profiles/cost_a100-80gb-vllm082-specreason-runs0-3.yaml"""
    from validate.drift import drift_report

    print(drift_report(str(aggregates), str(profile), str(traces) if traces else None))
    if lobo:
        from validate.batch import lobo_report

        print("\n" + lobo_report(str(aggregates), str(profile)))
        if traces:
            from validate.batch import unseen_batch_check

            print("\n" + unseen_batch_check(str(aggregates), str(traces), str(profile)))


@writes(out="runs", fit_all_out="yaml")
def validate_cpu(
    ctx: typer.Context,
    out: Path = typer.Option(..., help="campaign folder (OUT/runs resumed if present; profile_fit.yaml, report/, "
                                       "summary.json)"),
    requests: int = typer.Option(3, help="measured requests per configuration"),
    budget: int = typer.Option(48, help="thinking-token budget"),
    step_max: int = typer.Option(24, help="max tokens per step"),
    warmup: int = typer.Option(1, help="discarded warm-up requests per configuration"),
    seed: int = typer.Option(0, help="run seed (request i samples with seed + i)"),
    engine: str = typer.Option("vllm", help="vllm | torch"),
    model_cache: Path = typer.Option(Path(".cache/models"), help="model cache folder (specsim measure prepare-models)"),
    max_median_ape: float = typer.Option(DEFAULT_BAR, help="bar on the held-out median APE of end-to-end latency "
                                                           "(exit 1 above)"),
    sanity: bool = typer.Option(False, "--sanity", help="judge CI's load-tolerant sanity bound (max(35%, 2 x the "
                                "within-configuration spread)) instead of --max-median-ape"),
    fit_all_out: Optional[Path] = typer.Option(None, help="also fit on every configuration into this cost profile"),
    date: Optional[str] = typer.Option(None, help="provenance date of the profiles (default: today)"),
    configs: str = typer.Option("all", help="comma list of the campaign's configurations to run (vanilla-base, "
                                "specdecode-g1..g4, specreason-t0/t6/t7/t10), at least one fit and one held-out; "
                                "default all nine"),
):
    """A small real campaign on this CPU (vLLM, SmolLM2-135M + its 6-layer cut) -> fit -> held-out validation (~4 min).

    Example: specsim validate cpu --out out/validate-cpu"""
    from simulator.command_line import command_line
    from validate.campaign import run_all

    rc = run_all(out, requests=requests, budget=budget, step_max=step_max, warmup=warmup, seed=seed, engine=engine,
                 model_cache=model_cache, max_median_ape=max_median_ape, sanity=sanity, fit_all_out=fit_all_out,
                 date=date, command=command_line(ctx), configs=configs)
    if rc:
        sys.exit(rc)


def validate_gpu_summary(
    analysis: Path = typer.Argument(..., help="the analysis folder of scripts/gpu_campaign.sh analyze (RES/analysis)"),
):
    """One table of the GPU campaign's held-out figures -> ANALYSIS/summary.md (and printed).

    Example: specsim validate gpu-summary RES/analysis"""
    from simulator.inputs.loading import write_atomic
    from validate.gpu_campaign_summary import summarize

    if not analysis.is_dir():
        raise InputError(str(analysis), None, "expected the analysis folder of scripts/gpu_campaign.sh analyze")
    text = summarize(analysis)
    write_atomic(analysis / "summary.md", text)
    print(text, end="")


@writes(out="folder")
def validate_inferencex(
    data: Optional[Path] = typer.Option(None, help="the inferencex-deepseek-r1 folder (results_no_speculation.csv; "
                                        "default: ../shared/data/engine-measurements/ beside the repository)"),
    out: Optional[Path] = typer.Option(None, help="folder for rows.csv and summary.md"),
    without_t_mla: bool = typer.Option(False, "--without-t-mla", help="ablation: the MLA module's fixed cost set to 0"),
):
    """DeepSeek-R1 FP8 TP 8 per-token time at 1-8 users on H200 / B200 (InferenceX, SGLang and TensorRT-LLM) with
    catalog parameters only, held out by GPU and by engine (docs/moe.md).

    Example: specsim validate inferencex --out reports/deepseek-low-concurrency"""
    from validate.inferencex import DATA, write_report

    print(write_report(data or DATA, out, not without_t_mla))


@writes(out="folder")
def validate_moe_shapes(
    data: Optional[Path] = typer.Option(None, help="AIConfigurator's kernel tables (the moe rows; default: "
                                        "../shared/data/aiconfigurator-vllm-kernels beside the repository)"),
    out: Optional[Path] = typer.Option(None, help="folder for ratios.csv and summary.md"),
):
    """The catalog's MoE terms against AIConfigurator's measured fused-MoE layers at the served models' own shapes,
    by token count (a check, the catalog untouched; docs/moe.md; seconds).

    Example: specsim validate moe-shapes --out reports/moe-shapes"""
    from validate.moe_shapes import ROOT, write_report

    print(write_report(data or ROOT, out))


@writes(out="folder")
def validate_moe_routing(
    records: Path = typer.Option(Path("out/gpu-records/aiconfigurator.csv"),
                                 help="op records CSV with AIConfigurator's moe rows (specsim import aiconfigurator)"),
    out: Optional[Path] = typer.Option(None, help="folder for summary.csv"),
):
    """The MoE layer held out by GPU without AIConfigurator's balanced-routing rows (they run faster than reading the
    experts they touch): a check, the catalog untouched (docs/moe.md).

    Example: specsim validate moe-routing --out reports/moe-layer-power-law"""
    from validate.moe_routing import write_summary

    print(write_summary(records, out))
