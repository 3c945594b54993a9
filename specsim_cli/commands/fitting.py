"""``specsim fit cost | workload | bench | workload-traces | accuracy | published-priors | drafter-curves |
front-end-cpu`` and
``import specreason``: thin entry points over :mod:`calibrate.fit.fit_cost`,
:mod:`calibrate.fit.fit_workload_runs`, :mod:`calibrate.fit.bench_fit`, :mod:`calibrate.fit.fit_workload`,
:mod:`calibrate.fit.import_specreason`, :mod:`calibrate.fit.accuracy_profile` and :mod:`calibrate.fit.published_priors`.

Named in the task groups' tables (``specsim_cli/commands/fit.py``, ``imports.py``).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from simulator.errors import InputError
from simulator.option_values import threshold_option
from simulator.output_contract import writes


def _setup_from(ms, hardware, tp, base_model, small_model, draft_model):
    from simulator.cost.setup import Setup

    h = ms.hint
    pick = {"hardware": hardware or h.get("hardware"), "base": base_model or h.get("base_model"),
            "small": small_model or h.get("small_model")}
    for k, v in pick.items():
        if not v:
            opt = "--hardware" if k == "hardware" else f"--{k}-model"
            raise InputError(None, opt, f"cannot tell the {k} from the inputs; give {opt} (a catalog name, see specsim list)")
    return Setup.from_names(pick["hardware"], tp or h.get("tp") or 1, pick["base"], pick["small"],
                            draft_model or h.get("draft_model"))


@writes(out="yaml")
def fit(
    inputs: list[Path] = typer.Argument(..., help="run directories or SpecReason trace files/directories"),
    out: Path = typer.Option(..., "--out", help="cost profile YAML to write"),
    runs: Optional[str] = typer.Option(None, "--runs", help="fit only these runs, e.g. 0-3 (default: all)"),
    hardware: Optional[str] = typer.Option(None, help="catalog hardware (default: from the inputs)"),
    tp: Optional[int] = typer.Option(None, help="tensor-parallel degree (default: from the inputs)"),
    base_model: Optional[str] = typer.Option(None, "--base-model", help="catalog name of the base model (default: from the runs)"),
    small_model: Optional[str] = typer.Option(None, "--small-model", help="catalog name of the small model (default: from the runs)"),
    draft_model: Optional[str] = typer.Option(None, "--draft-model", help="catalog name of the draft model (default: the small model)"),
    alternative: Optional[list[str]] = typer.Option(None, "--alternative-hardware",
                                                    help="also fit on this hardware and record the implied efficiencies"),
    name: Optional[str] = typer.Option(None, help="profile name"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
):
    """Fit the cost-model parameters to measured call times (robust least squares, stderrs, identifiability).

    Example: specsim fit cost RUN_DIR... --hardware cpu --base-model smollm2-135m --small-model smollm2-135m-cut6 --out cost.yaml"""
    from calibrate.fit.fit_cost import fit_measured
    from simulator.cost.cost_profile import profile_to_yaml
    from calibrate.fit.measured import load_measured, parse_run_rule
    from simulator.inputs.loading import write_atomic

    ms = load_measured([str(p) for p in inputs])
    if runs:
        ms = ms.select_runs(parse_run_rule(runs, ms.run_keys))
    setup = _setup_from(ms, hardware, tp, base_model, small_model, draft_model)
    if tp is not None and tp < 1:
        raise InputError(None, "--tp", "must be >= 1")
    command = "specsim fit cost " + " ".join(shlex.quote(a) for a in sys.argv[3:]) if len(sys.argv) > 3 else ""
    prof = fit_measured(ms, setup, engine=ms.hint.get("engine", "vllm"), hardware_note=ms.hint.get("hardware_note", ""),
                        command=command, name=name, alternatives=alternative or [], date=date)
    write_atomic(out, profile_to_yaml(prof, command))
    f = prof.fit
    print(f"wrote {out}: {f['calls']} calls of runs {', '.join(f['runs'])} on {setup.hardware.name} TP={setup.tp}")
    for n in ("mem_efficiency", "compute_efficiency", "step_overhead_s", "layer_overhead_s", "call_overhead_s",
              "allreduce_latency_s", "seq_overhead_s"):
        p = getattr(prof, n)
        se = f" ± {p.stderr:.3g}" if p.stderr is not None else ""
        pd_sd = f.get("prior_dominated", {}).get(n)
        why = ("" if p.kind == "calibrated" else
               f"  ({p.source})" if p.kind == "rejected" else
               f"  (prior-dominated: posterior relative sd {pd_sd:.2g})" if pd_sd is not None else
               f"  ({f['kept_at_prior'].get(n, '')})")
        print(f"  {n:20s} {p.value:.4g}{se}  [{p.kind}]{why}")
    print("  per op: " + "; ".join(f"{op} median APE {v['median_ape']:.3f} bias {v['bias']:+.3f} (n={v['calls']})"
                                   for op, v in f["per_op"].items()))
    if not f["physically_plausible"]:
        print("  WARNING: an efficiency above its physical maximum on this hardware ("
              + "; ".join(f"{n} {w}" for n, w in f["rejected"].items()) + "); the assumed hardware is wrong")
    for hw, a in f.get("hardware_alternatives", {}).items():
        print(f"  on {hw}: mem_efficiency {a['values']['mem_efficiency']:.3g}, compute_efficiency "
              f"{a['values']['compute_efficiency']:.3g} -> {'plausible' if a['physically_plausible'] else 'IMPOSSIBLE (above the physical maximum)'}")


@writes(out="yaml")
def fit_workload(
    inputs: list[Path] = typer.Argument(..., help="runner run directories (specsim measure run)"),
    out: Path = typer.Option(..., "--out", help="workload profile YAML to write"),
    prior: Optional[Path] = typer.Option(None, "--prior", help="workload profile supplying what the runs cannot identify"),
    form: str = typer.Option("empirical", "--form", help="empirical | parametric (lognormal step lengths, geometric N)"),
    name: Optional[str] = typer.Option(None, help="profile name"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
):
    """Fit the workload (step counts and lengths, scores, per-position acceptance) from run directories.

    Example: specsim fit workload RUN_DIR... --out workload.yaml"""
    from simulator.inputs.loading import write_atomic
    from calibrate.fit.fit_workload_runs import fit_workload_from_runs, workload_yaml
    from simulator.inputs.workload import load_workload

    w0 = load_workload(prior) if prior else None
    res = fit_workload_from_runs([str(p) for p in inputs], prior=w0, form=form, name=name, date=date)
    command = "specsim fit workload " + " ".join(shlex.quote(a) for a in sys.argv[3:])
    write_atomic(out, workload_yaml(res.profile, command))
    w = res.profile
    print(f"wrote {out}: {w.name} (budget {w.token_budget}, step cap {w.max_step_tokens})")
    for key, part in res.parts.items():
        print(f"  {'fitted' if part.fitted else 'PRIOR ':6s} {part.how}")
    print(f"  mean steps N_base {w.steps_pmf_base.mean:.2f}, step tokens small {w.step_pmf_small.mean:.1f} / base "
          f"{w.step_pmf_base.mean:.1f}, P(score>=7) {w.acceptance_probability(7):.3f}, a_1 {w.token_acceptance[0]:.3f}")


@writes(out="yaml", report="folder")
def fit_bench(
    run_dirs: list[Path] = typer.Argument(..., help="microbenchmark run directories (static-bench / microbench)"),
    out: Path = typer.Option(..., "--out", help="cost profile YAML to write (fitted on every record)"),
    report: Path = typer.Option(..., "--report", help="report folder: report.md, heldout.csv, heldout.png, summary.json"),
    holdout_arch: Optional[list[str]] = typer.Option(
        None, "--holdout-arch", help="fit on the other architectures, predict this one (repeatable; default: each in turn)"),
    holdout_rule: Optional[list[str]] = typer.Option(
        None, "--holdout-rule", help="hold out the records matching any condition, e.g. context>2048,gamma>2 (the "
                                     "default) or op=verify; fields context, new_tokens, batch, gamma, op (repeatable)"),
    hardware: Optional[str] = typer.Option(None, help="catalog hardware (default: from run.json)"),
    name: Optional[str] = typer.Option(None, help="profile name"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
):
    """Fit the cost model to microbenchmark records (static-bench) and validate it on held-out architectures/shapes.

    Example: specsim fit bench out/h100-qwq out/h100-r1 --out bench.yaml --report out/bench-report"""
    from validate.bench import run_fit_bench
    from validate.bench_report import write_report
    from simulator.cost.cost_profile import profile_to_yaml
    from simulator.inputs.loading import write_atomic
    from simulator.report.report_table import job

    # the command as parsed (sys.argv is not this command's when main(argv) is called in-process)
    opts = [("--out", out), ("--report", report), *[("--holdout-arch", a) for a in holdout_arch or []],
            *[("--holdout-rule", r) for r in holdout_rule or []], ("--hardware", hardware), ("--name", name), ("--date", date)]
    command = shlex.join(["specsim", "fit", "bench", *map(str, run_dirs),
                          *[str(x) for k, v in opts if v is not None for x in (k, v)]])
    with job("specsim fit bench: fitting every fold and the profile", after_s=3.0):
        res = run_fit_bench([str(p) for p in run_dirs], holdout_archs=holdout_arch, rules=holdout_rule,
                            hardware=hardware, command=command, name=name, date=date)
    # every input checked and every figure computed before anything is written
    write_atomic(out, profile_to_yaml(res.profile, command))
    files = write_report(res, report, command, str(out))
    print(f"wrote {out}: {len(res.bench.records)} records of {len(res.bench.runs)} runs ({', '.join(res.bench.archs)}) "
          f"on {res.bench.hardware.name}; report {report} ({', '.join(p.name for p in files)})")
    for n in ("mem_efficiency", "compute_efficiency", "step_overhead_s", "layer_overhead_s", "seq_overhead_s"):
        p = getattr(res.profile, n)
        print(f"  {n:20s} {p.value:.4g}" + (f" ± {p.stderr:.3g}" if p.stderr is not None else "") + f"  [{p.kind}]")
    for r in res.errors[res.errors["op"] == "all"].itertuples() if len(res.errors) else []:
        print(f"  held out, {r.fold}: median APE fitted {100 * r.fitted_median_ape:.1f}%, transferred prior "
              f"{100 * r.transferred_prior_median_ape:.1f}%, datasheet prior {100 * r.datasheet_prior_median_ape:.1f}% "
              f"(n={r.n})")
    for note in res.notes:
        print(f"  note: {note}")


@writes(out="yaml")
def fit_workload_traces(
    ctx: typer.Context,
    data: Path = typer.Argument(..., help="SpecReason per-step traces: a JSONL file or a folder of them"),
    out: Path = typer.Option(..., "--out", help="workload profile YAML to write"),
    finish_rule: str = typer.Option("first_answer", "--finish-rule", help="first_answer: a request ends at its first "
                                    "step with an answer (the reference code's rule) | recorded: at its recorded last step"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
):
    """Fit the workload (step counts and lengths, scores) from third-party SpecReason per-step traces.

    Example: specsim fit workload-traces ../shared/data/specreason-aime-traces --out W.yaml"""
    from calibrate.fit.fit_workload import fit_workload_from_trace, write_workload_yaml
    from calibrate.fit.import_specreason import import_specreason
    from simulator.command_line import command_line

    if finish_rule not in ("first_answer", "recorded"):
        raise InputError(None, "--finish-rule", f"expected first_answer or recorded (got {finish_rule!r})")
    profile = fit_workload_from_trace(import_specreason(data), finish_rule, date)
    print(f"wrote {write_workload_yaml(profile, out, command_line(ctx))}")


def import_specreason_cmd(
    data: Path = typer.Argument(..., help="SpecReason per-step traces: a JSONL file or a folder of them"),
    threshold: float = threshold_option(7.0, help="the runs' acceptance threshold, 0..10 (a step is kept at score >= it)"),
    summary: bool = typer.Option(False, "--summary", help="print figures, consistency issues and per-call timing fits"),
):
    """Read and check SpecReason per-step traces (every line validated); count them, or summarise them.

    Example: specsim import specreason ../shared/data/specreason-aime-traces --summary"""
    from calibrate.fit.import_specreason import import_specreason, summary_text

    trace = import_specreason(data, threshold)
    print(summary_text(trace) if summary else f"{len(trace.requests)} runs, {len(trace.steps)} steps")


@writes(out="yaml")
def fit_accuracy(
    ctx: typer.Context,
    source: str = typer.Argument(..., help="aggregates (the SpecReason per-problem aggregates JSON) | runs (run "
                                           "directories of specsim measure run)"),
    inputs: list[Path] = typer.Argument(..., help="the aggregates JSON file, or the run directories"),
    workload: str = typer.Option(..., help="workload profile name or YAML path (its models, budget and problems)"),
    out: Path = typer.Option(..., "--out", help="accuracy profile YAML to write"),
):
    """Build an accuracy profile (answer accuracy per system and threshold) from aggregates or graded runs.

    Example: specsim fit accuracy runs RUN_DIR... --workload cpu_gsm_smollm2 --out A.yaml"""
    from calibrate.fit.accuracy_profile import build
    from simulator.inputs.accuracy import profile_yaml
    from simulator.command_line import command_line
    from simulator.inputs.loading import write_atomic

    prof = build(source, [str(p) for p in inputs], workload)
    print(f"wrote {write_atomic(out, profile_yaml(prof, command_line(ctx)))}")


@writes(out="folder")
def published_priors(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", help="folder for the two workload profiles (simulator/profiles: the "
                                                "shipped ones)"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
):
    """Coarse MATH500 and GPQA-Diamond workload priors from the SpecReason paper's published latencies (~1 min).

    Example: specsim fit published-priors --out simulator/profiles --force (the shipped profiles: tracked)"""
    from calibrate.fit.published_priors import write_priors
    from simulator.command_line import command_line

    for path, facts in write_priors(out, command_line(ctx), date):
        print(f"{path}: " + ", ".join(f"{k} {v:.3g}" for k, v in facts.items()))


@writes(out="yaml", report="folder")
def fit_drafter_curves(
    folder: Path = typer.Argument(..., help="folder of AL(k) YAML files (../shared/data/engine-measurements/"
                                            "acceptance-length-vs-k)"),
    out: Optional[Path] = typer.Option(None, "--out", help="priors YAML to write (the shipped one: "
                                                           "simulator/catalog/drafter_priors.yaml)"),
    report: Optional[Path] = typer.Option(None, "--report", help="report folder: held-out.md (the printed tables) "
                                                                 "written there"),
    date: Optional[str] = typer.Option(None, help="provenance date (default: today)"),
):
    """Acceptance priors per drafter kind (MTP, EAGLE-3, block) from measured AL(k) curves, with the held-out error
    (leave one curve out within its kind) printed (docs/drafters.md; ~30 s).

    Example: specsim fit drafter-curves ../shared/data/engine-measurements/acceptance-length-vs-k --out simulator/catalog/drafter_priors.yaml"""
    import datetime

    import yaml

    from calibrate.fit.drafter_curves import fit_report
    from simulator.inputs.loading import write_atomic

    doc, text = fit_report(folder, date or datetime.date.today().isoformat())
    print(text, end="")
    if out is not None:
        write_atomic(out, "# Acceptance priors per drafter kind (docs/drafters.md). Written by specsim calibrate "
                     "fit-drafter-curves; derived\n# parameters only (the measured curves are third-party data, "
                     "not copied here).\n" + yaml.safe_dump(doc, sort_keys=False, width=120))
        print(f"wrote {out}")
    if report is not None:
        print(f"wrote {write_atomic(report / 'held-out.md', text)}")


@writes(out="folder")
def fit_front_end_cpu(
    ctx: typer.Context,
    levels: list[Path] = typer.Argument(..., help="serve-bench level folders (specsim measure serve-bench: each level's "
                                                  "run.json with the server's CPU seconds, its /metrics before and after)"),
    out: Optional[Path] = typer.Option(None, "--out", help="report folder: report.md (the printed table) and fit.json"),
):
    """The `vllm serve` API server's CPU per engine step, per streamed token and per request on the measuring host,
    fitted on serve-bench levels, each level held out in turn (docs/serve-bench.md; 1 s).

    Example: specsim fit front-end-cpu out/serve-bench/short/closed-8 out/serve-bench/long/closed-8 out/serve-bench/wide/closed-32 ..."""
    import json

    from calibrate.fit.front_end_cpu import report
    from simulator.command_line import command_line
    from simulator.inputs.loading import write_atomic

    doc, text = report(levels)
    print(text, end="")
    if out is not None:
        cmd = command_line(ctx)
        write_atomic(out / "fit.json", json.dumps({"command": cmd, **doc}, indent=1) + "\n")
        head = f"# The API server's CPU per engine step, streamed token and request\n\nCommand: `{cmd}`\n\n"
        print(f"wrote {write_atomic(out / 'report.md', head + text)}")
