"""``specsim validate serving``: the serving-model validation (:mod:`validate.serving`) as a command."""

from __future__ import annotations

import logging
import shlex
import sys
from pathlib import Path
from typing import Optional

import typer

from simulator.errors import InputError
from simulator.output_contract import writes


LOGGER = "validate.serving"


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (a test runner may swap it between calls)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _progress_to_stderr() -> None:
    """Show this package's progress lines (INFO) on stderr unless logging is already configured: a handler on the
    root logger or on ours is left alone (the repo has no process-wide logging set-up to follow)."""
    pkg = logging.getLogger(LOGGER)
    if logging.getLogger().handlers or pkg.handlers:
        return
    h = _StderrHandler()
    h.setFormatter(logging.Formatter("%(message)s"))
    pkg.addHandler(h)
    if pkg.level == logging.NOTSET:
        pkg.setLevel(logging.INFO)


@writes(report="folder")
def validate_serving_cmd(
    run_dirs: Optional[list[Path]] = typer.Argument(None, help="serve-run directories (specsim measure serve-run), `vllm bench serve` result JSONs (--save-result --save-detailed) or their imports"),
    profile: Optional[Path] = typer.Option(None, "--profile", help="cost profile YAML (fitted; its fit.setup names the models); required with run directories"),
    report: Path = typer.Option(..., "--out", "--report", help="report folder: report.md, CSVs and figures"),
    fit_levels: Optional[str] = typer.Option(None, "--fit-levels",
                                             help="re-fit the step-time parameters on these levels only, e.g. closed-1,closed-2"),
    acceptance_levels: Optional[str] = typer.Option(
        None, "--acceptance-levels", help="speculative runs whose per-position acceptance predicts every run of "
                                           "their gamma (e.g. specdecode-g2/closed-1); default: each request's own"),
    max_median_ape: Optional[float] = typer.Option(None, "--max-median-ape", help="exit 1 above this held-out latency median APE"),
    released: Optional[Path] = typer.Option(None, "--released", help="a released `vllm bench serve` table folder (e.g. ../shared/data/engine-measurements/gpustack-performance-lab): predict its runs held out instead"),
    holdout: str = typer.Option("gpu,version", "--holdout", help="with --released: gpu, version or both (comma-separated)"),
    fit_hosts: Optional[Path] = typer.Option(None, "--fit-hosts", help="with --released: also fit every run and write the host terms into this engine catalog (simulator/catalog/engine_hosts.yaml)"),
    as_labelled: bool = typer.Option(False, "--as-labelled", help="with --released: every run on the GPU its doc names, also the docs measured on another (docs/results.md \"Which H100\")"),
    workers: Optional[int] = typer.Option(None, "--workers", help="with --released: processes for the held-out folds' fits (default: one per CPU; the figures do not depend on it)"),
    allow_implausible: bool = typer.Option(False, "--allow-implausible", help="validate a profile with a parameter "
                                           "outside its physical range (an efficiency above 1) anyway, with a warning"),
) -> None:
    """Predict measured concurrent runs with the serving simulator (trace replay); report errors and figures.

    Example: specsim validate serving reports/serve-bench-cpu/quiet/closed-* --profile simulator/profiles/cost_cpu-epyc-vllm032.yaml --fit-levels closed-1 --out out/serve-bench-quiet-report"""
    from validate.serving.compare import validate_serving
    from validate.serving.report import pct, write_report

    if released is not None:
        _released(released, holdout, report, fit_hosts, as_labelled, workers)
        return
    if not run_dirs or profile is None:
        raise InputError(None, "RUN_DIRS", "give run directories and --profile, or --released DIR")
    if max_median_ape is not None and not max_median_ape > 0:
        raise InputError(None, "--max-median-ape", f"must be > 0 (got {max_median_ape})")
    levels = [x.strip() for x in fit_levels.split(",") if x.strip()] if fit_levels else None
    _progress_to_stderr()
    acc = [x.strip() for x in acceptance_levels.split(",") if x.strip()] if acceptance_levels else None
    v = validate_serving(run_dirs, profile, levels, acc, allow_implausible)
    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    path = write_report(v, report, command, profile, max_median_ape)
    h = _echo_headline(v, path)
    if max_median_ape is not None and h["latency_median_ape"] > max_median_ape:
        typer.echo(f"FAIL: held-out latency median APE {pct(h['latency_median_ape'])} > {pct(max_median_ape)}", err=True)
        raise typer.Exit(1)


def _echo_headline(v, path) -> dict:
    """The held-out figures of a serving validation, one line each; returns its headline."""
    from validate.serving.report import pct, speed_drift, spct

    h = v.headline
    typer.echo(f"held out ({h['model']}, n={h['latency_n']}): latency median APE {pct(h['latency_median_ape'])} "
               f"p90 {pct(h['latency_p90_ape'])} bias {spct(h['latency_bias'])}; TTFT median APE "
               f"{pct(h['ttft_median_ape'])}; report {path}")
    for w in speed_drift(v):
        typer.echo(w)
    if "speculative" in h:
        sp = h["speculative"]
        typer.echo(f"speculative runs held out ({sp['model']}, n={sp['latency_n']}): latency median APE "
                   f"{pct(sp['latency_median_ape'])}, TPOT median APE {pct(sp['tpot_median_ape'])} bias "
                   f"{spct(sp['tpot_bias'])}, acceptance length median APE {pct(sp['accept_len_median_ape'])}")
    if "itl" in h:
        it = h["itl"]
        typer.echo(f"ITL of {it['runs']} held-out one-engine runs: mean median APE {pct(it['itl_mean_median_ape'])} "
                   f"(bias {spct(it['itl_mean_bias'])}), p99 median APE {pct(it['itl_p99_median_ape'])} "
                   f"(bias {spct(it['itl_p99_bias'])})")
    if "bench" in h:
        from validate.serving.compare import BENCH_FIGURES

        b = h["bench"]
        typer.echo(f"vllm bench serve runs held out ({b['model']}, {b['runs']} runs), median APE (bias): "
                   + ", ".join(f"{name} {pct(b[f'{k}_median_ape'])} ({spct(b[f'{k}_bias'])})" for k, name in BENCH_FIGURES))
    return h


def check_workers(workers: int | None) -> None:
    """``--workers``: None (the default) or >= 1, else a one-line input error."""
    if workers is not None and workers < 1:
        raise InputError(None, "--workers", f"expected >= 1 (got {workers})")


def _released(folder: Path, holdout: str, out: Path, catalog: Path | None, as_labelled: bool = False,
              workers: int | None = None) -> None:
    import datetime

    import typer

    from validate.serving.released import validate_released

    by = [x.strip() for x in holdout.split(",") if x.strip()]
    bad = [b for b in by if b not in ("gpu", "version")]
    if bad or not by:
        raise InputError(None, "--holdout", f"expected gpu, version or gpu,version (got {holdout!r})")
    check_workers(workers)
    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    head = validate_released(folder, by, out, command, catalog, datetime.date.today().isoformat(), as_labelled,
                             workers)
    for b, h in head.items():
        typer.echo(f"held out by {b} ({h['runs']} runs): median |error| TPOT {h['tpot_ms median |err| %']:.1f}% "
                   f"ITL {h['itl_ms median |err| %']:.1f}% TTFT {h['ttft_ms median |err| %']:.1f}% output throughput {h['out_tps median |err| %']:.1f}%; "
                   f"report {out / 'report.md'}")


@writes(out="folder")
def sharegpt_spread_cmd(
    out: Path = typer.Option(..., "--out", help="report folder: sharegpt-sigma.md and sharegpt-sigma.csv"),
    workers: int = typer.Option(2, "--workers", help="processes replaying the runs"),
) -> None:
    """Replay the released table's ShareGPT runs at several spreads of ShareGPT's lengths, the engine catalog's host
    terms held fixed: how much the predictions depend on the assumed spread (docs/serving-model.md, ShareGPT).

    Example: specsim validate sharegpt-spread --out reports/serving-released --force"""
    from validate.serving.sharegpt_sensitivity import write

    check_workers(workers)
    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    typer.echo(write(out, command, workers), nl=False)


@writes(out="folder")
def serving_screen_cmd(
    out: Path = typer.Option(..., "--out", help="report folder: screen.md and screen.csv"),
    against: Path | None = typer.Option(None, "--against", help="an earlier screen.csv to compare with (e.g. "
                                        "reports/serving-released/screen.csv, the catalog's own)"),
    workers: int = typer.Option(2, "--workers", help="processes replaying the runs"),
) -> None:
    """Every released run predicted with the catalog as it stands (host terms fixed, nothing refitted), beside an
    earlier screen: what a model change moves, in minutes, before the held-out validation (validate/serving/screen.py).

    Example: specsim validate serving-screen --out /tmp/screen --against reports/serving-released/screen.csv"""
    from validate.serving.screen import write

    check_workers(workers)
    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    typer.echo(write(out, command, against, workers), nl=False)


@writes(out="folder")
def serving_regimes_cmd(
    report: Path = typer.Argument(..., help="a released serving report folder (heldout-gpu.csv, heldout-version.csv)"),
    out: Path = typer.Option(..., "--out", help="folder for regimes.md and regimes.csv (the report folder itself "
                             "with --force)"),
) -> None:
    """The released runs' held-out errors by regime (closed loops, ShareGPT bursts, long-prompt bursts, short
    bursts) per GPU and per version -> OUT/regimes.md and regimes.csv. Nothing is refitted.

    Example: specsim validate serving-regimes reports/serving-released --out reports/serving-released --force"""
    from validate.serving.regimes import write

    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    typer.echo(write(report, out, command), nl=False)


@writes(out="yaml")
def serving_accuracy_cmd(
    report: Path = typer.Argument(..., help="a released serving report folder (heldout-gpu.csv)"),
    out: Path = typer.Option(..., "--out", help="the catalog file (simulator/catalog/serving_accuracy.yaml, with "
                             "--force: git tracks it)"),
    date: Optional[str] = typer.Option(None, "--date", help="the date recorded in its provenance (default: today)"),
) -> None:
    """The released runs' held-out errors by GPU and regime -> OUT, the catalog file every capacity table and report
    quotes as the model's error on the scenario's GPU. Nothing is refitted.

    Example: specsim validate serving-accuracy reports/serving-released --out simulator/catalog/serving_accuracy.yaml --force"""
    import datetime as dt

    from validate.serving.accuracy import write

    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    write(report, out, command, date or dt.date.today().isoformat())
    typer.echo(f"wrote {out}")


@writes(out="folder")
def kv_waves_cmd(
    out: Path = typer.Option(..., "--out", help="report folder: README.md, bursts.csv, requests.csv (records.json "
                             "when measured here)"),
    records: Optional[Path] = typer.Option(None, "--records", help="measured bursts to compare (a records.json of an "
                                           "earlier run); without it, measure them now on vLLM (needs `make engines`)"),
    model_dir: Optional[Path] = typer.Option(None, "--model-dir", help="model folder for the measurement (default: "
                                             "SmolLM2-135M-Instruct from the model cache, built from its PyPI package)"),
    draft_dir: Optional[Path] = typer.Option(None, "--draft-dir", help="draft model of the speculative bursts "
                                             "(default: the model cache's 6-layer cut of the default model)"),
) -> None:
    """KV-bound bursts on vLLM's own scheduler against the serving simulator's engine, counted in engine steps:
    each request's first-token and finish step, the steps in all, the preemptions (docs/serving-model.md).

    Example: specsim validate kv-waves --records reports/kv-waves/records.json --out reports/kv-waves --force"""
    import json

    from simulator.inputs.loading import write_atomic
    from validate.kv_waves import compare, load_records, write_report

    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if records is not None:
        doc = load_records(records)
    else:
        from calibrate.measure.kv_waves import measure_campaign
        from calibrate.measure.model_cache import SMOLLM2, default_draft_name, prepare_models

        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise InputError(None, "--records", "vLLM is not installed here (`make engines`); give measured "
                             "records instead, e.g. --records reports/kv-waves/records.json")
        if model_dir is None or draft_dir is None:
            cache = prepare_models(models=(SMOLLM2,), log=lambda *a: None)
            model_dir = model_dir or cache[SMOLLM2]
            draft_dir = draft_dir or cache[default_draft_name()]
        doc = measure_campaign(model_dir, draft_dir, log=typer.echo)
        doc["command"] = command
    bursts, reqs = compare(doc)
    out.mkdir(parents=True, exist_ok=True)
    if records is None or records.resolve() != (out / "records.json").resolve():
        write_atomic(out / "records.json", json.dumps(doc, indent=1) + "\n")
    typer.echo(write_report(out, doc, bursts, reqs, command).read_text(encoding="utf-8"), nl=False)
