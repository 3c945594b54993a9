"""The ``specsim`` command line (`specsim --help`): each command parses, calls one library function, prints.

Sub-command groups living in other packages (``calibrate``, ``validate``) are registered
here; their modules import heavy engines lazily, inside the commands.

Error contract (:func:`run_app`): exit 0 success, 1 a quality bar failed (``validate``), 2 bad
input, a usage mistake or a case the tool cannot judge -- always one line ``error: ...`` on
stderr, never a traceback (``SPECSIM_DEBUG=1`` re-raises unexpected errors).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from simulator.errors import InputError
from simulator.report_table import COLUMNS_HELP

APP_HELP = ("Simulate, fit and validate speculative reasoning (SpecReason) and speculative decoding on "
            "reasoning models: what-if grids, capacity planning, real runs, validation.")
app = typer.Typer(no_args_is_help=True, add_completion=False, help=APP_HELP)
_registered = False


def package_version() -> str:
    """The installed distribution's version (package metadata), ``unknown`` when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("specreason-sim")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _print_version(value: bool) -> None:
    if value:
        print(f"specsim {package_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                       help="print the version and exit"),
          verbose: bool = typer.Option(False, "--verbose", help="show the engines' own logs (vLLM INFO lines, "
                                       "weight loading); accepted anywhere on the line; also SPECSIM_VERBOSE=1")) -> None:
    """Simulate, fit and validate speculative reasoning and speculative decoding on reasoning models."""


def _check_seed(seed: int | None) -> None:
    if seed is not None and not 0 <= seed < 2**63:
        raise InputError(None, "--seed", f"must be an integer >= 0 (got {seed})")


def _int_range(text: str | None, field: str, lo: int, hi: int) -> list[int] | None:
    """'1-8', '3,5,7' or '4' -> a list of ints within [lo, hi]; errors name the option."""
    if text is None:
        return None
    out: list[int] = []
    try:
        for part in text.split(","):
            part = part.strip()
            if "-" in part[1:]:
                a, b = part.split("-", 1)
                out.extend(range(int(a), int(b) + 1))
            else:
                out.append(int(part))
    except ValueError:
        raise InputError(None, field, f"expected a number, a range like 1-8 or a list like 3,5,7 (got {text!r})") from None
    bad = [v for v in out if not lo <= v <= hi]
    if bad or not out:
        raise InputError(None, field, f"values must lie in {lo}..{hi} (got {text!r})")
    return out


@app.command()
def whatif(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    system: Optional[list[str]] = typer.Option(None, "--system", help="restrict to these systems (repeatable)"),
    gamma: Optional[str] = typer.Option(None, help="gamma values, e.g. 1-8 or 2,4"),
    threshold: Optional[str] = typer.Option(None, help="thresholds 0-10 (10: never keep), e.g. 0-9 or 5,7"),
    first_n: Optional[str] = typer.Option(None, "--first-n", help="first-n-base-steps values"),
    engine: Optional[str] = typer.Option(None, help="analytic | des (default: the scenario's)"),
    requests: Optional[int] = typer.Option(None, help="DES requests per grid point"),
    seed: Optional[int] = typer.Option(None, help="DES seed"),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    out: Optional[Path] = typer.Option(None, help="write the results here (every column; CSV for table format)"),
    columns: Optional[str] = typer.Option(None, "--columns", help=COLUMNS_HELP),
):
    """Predict latency, speedup, small-step fraction, acceptance length and breakdown over the grid.

    The breakdown (--columns breakdown) splits each latency into small and base decode, prefill, scoring,
    drafting, verification and call overhead, all in seconds per request; they sum to the latency.
    """
    from simulator.whatif import whatif_from_cli

    if fmt not in ("table", "csv", "json"):
        raise InputError(None, "--format", f"expected table, csv or json (got {fmt!r})")
    if engine is not None and engine not in ("analytic", "des"):
        raise InputError(None, "--engine", f"expected analytic or des (got {engine!r})")
    if requests is not None and requests < 2:
        raise InputError(None, "--requests", "must be >= 2")
    _check_seed(seed)
    from simulator.report_table import check_columns, job, write_output

    check_columns(columns, extra=("engine", "steps", "requests", "accuracy", "accuracy_lo", "accuracy_hi"))
    kwargs = dict(systems=system, gammas=_int_range(gamma, "--gamma", 1, 16),
                  thresholds=_int_range(threshold, "--threshold", 0, 10),
                  first_ns=_int_range(first_n, "--first-n", 0, 100000), engine=engine, requests=requests, seed=seed)
    with job(f"whatif {scenario}" + (f": {engine} engine" if engine else "") + (f", {requests} requests per point" if requests else "")):
        df, title, meta = whatif_from_cli(scenario, **kwargs)
    write_output(df, fmt, out, title, meta, columns)


@app.command("list")
def list_cmd(what: str = typer.Argument(..., help="hardware | models | scenarios")):
    """List the hardware catalog, the model catalog or the shipped scenarios: `specsim list hardware`."""
    from simulator.listing import listing

    if what not in ("hardware", "models", "scenarios"):
        raise InputError(None, "what", f"expected hardware, models or scenarios (got {what!r})")
    listing(what)


@app.command()
def show(scenario: str = typer.Argument(..., help="scenario YAML (path or name)"),
         section: Optional[str] = typer.Option(None, "--section",
                                               help="print only this top-level section (e.g. hardware, workload); "
                                               "without it, the whole scenario and a list of its sections")):
    """Print the resolved scenario with every default filled in (YAML)."""
    import yaml

    from simulator.scenario import load_scenario

    d = load_scenario(scenario).to_dict()
    if section is not None:
        if section not in d:
            raise InputError(None, "--section", f"unknown section {section!r}; choose from {', '.join(d)}")
        d = {section: d[section]}
    print(yaml.safe_dump(d, sort_keys=False, width=120), end="")
    if section is None:
        print(f"# sections: {', '.join(d)} (specsim show {scenario} --section NAME prints one)", file=sys.stderr)


def _float_list(text: str | None, field: str) -> list[float] | None:
    """'0.5,1,2' -> positive floats; errors name the option."""
    if text is None:
        return None
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(None, field, f"expected positive numbers like 0.5,1,2 (got {text!r})") from None
    if not vals or any(not (v > 0 and v < float("inf")) for v in vals):
        raise InputError(None, field, f"expected positive numbers like 0.5,1,2 (got {text!r})")
    return vals


# Options shared by `capacity` and `report` (declared once).
AccuracyFloorOpt = Annotated[Optional[str], typer.Option(
    "--accuracy-floor", help="recommend only configurations at least this accurate: vanilla-base (default: within "
    "--accuracy-margin of it), a number in [0, 1], or none")]
AccuracyMarginOpt = Annotated[Optional[float], typer.Option(
    "--accuracy-margin", help="allowed accuracy loss vs the reference system, within its 95% interval (default 0.05)")]
CiTargetOpt = Annotated[Optional[float], typer.Option(
    "--ci-target", help="replicate until the 95% interval half-width is at most this fraction of the capacity (default 0.10)")]
MaxReplicationsOpt = Annotated[Optional[int], typer.Option("--max-replications", help="replications per configuration at most")]


@app.command()
def capacity(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    slo: Optional[str] = typer.Option(None, help="SLO, e.g. 'p99_latency<=300s' or 'p90_latency<=60s,mean_ttft<=2s' "
                                      "(default: the scenario's slo, else p99 <= 3x vanilla-base's single-request latency)"),
    qps: Optional[str] = typer.Option(None, help="check the SLO at these request rates (e.g. 0.5,1,2) instead of searching"),
    users: Optional[str] = typer.Option(None, help="check the SLO with these closed-loop user counts (e.g. 4,16)"),
    arrivals_file: Optional[Path] = typer.Option(None, "--arrivals-file",
                                                 help="check the SLO on arrival times replayed from a CSV/JSONL file"),
    system: Optional[list[str]] = typer.Option(None, "--system", help="restrict to these systems (repeatable)"),
    gamma: Optional[str] = typer.Option(None, help="gamma values, e.g. 1-8 or 2,4"),
    threshold: Optional[str] = typer.Option(None, help="thresholds, e.g. 3,5,7"),
    arrival: str = typer.Option("poisson", help="poisson | bursty"),
    cv: float = typer.Option(1.0, help="coefficient of variation of inter-arrival gaps (bursty)"),
    requests: Optional[int] = typer.Option(None, help="requests simulated per load level"),
    seed: Optional[int] = typer.Option(None, help="base seed (default: the scenario's)"),
    gpu_hour_cost: Optional[float] = typer.Option(None, "--gpu-hour-cost", help="price of one GPU-hour"),
    target_qps: Optional[float] = typer.Option(None, "--target-qps", help="request rate to provision for"),
    workers: Optional[int] = typer.Option(None, help="local worker processes (default: all cores; 1 = serial)"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="run the sweep on this Ray cluster"),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    out: Optional[Path] = typer.Option(None, help="write the results here (every column)"),
    columns: Optional[str] = typer.Option(None, "--columns", help="table columns: summary (default) | all | a comma "
                                          "list of result columns, e.g. label,max_qps,latency_p99_s"),
    accuracy_floor: AccuracyFloorOpt = None,
    accuracy_margin: AccuracyMarginOpt = None,
    ci_target: CiTargetOpt = None,
    max_replications: MaxReplicationsOpt = None,
):
    """Highest request rate one replica sustains under an SLO, per configuration; replicas and cost.

    Columns: max req/s = the highest Poisson rate one replica sustains (SLO met and no upward latency
    drift); drift x = mean latency of the last quarter of arrivals / the second quarter (a rate counts as
    sustained only at <= 1.25 and without a significant latency trend, so SLO met can be "no" while p99 is under the bound: the queue was still
    growing); sims = serving simulations the search ran for that configuration; goodput req/s = requests
    per second finishing within the SLO; cost at --gpu-hour-cost; replicas and GPUs (CPU hosts for a CPU
    scenario) for --target-qps. --out files get every column.
    """
    from simulator.capacity import capacity_from_cli
    from simulator.report_table import job, write_output

    if fmt not in ("table", "csv", "json"):
        raise InputError(None, "--format", f"expected table, csv or json (got {fmt!r})")
    if workers is not None and workers < 1:
        raise InputError(None, "--workers", "must be >= 1")
    _check_seed(seed)
    from simulator.report_table import CAPACITY_COLUMNS, CAPACITY_PRESETS, check_columns

    check_columns(columns, CAPACITY_COLUMNS, extra=("offered_qps", "throughput_qps", "latency_p50_s", "latency_p90_s",
                                                    "ttft_p99_s", "slo_attainment", "gpus_per_replica",
                                                    "fleet_cost_per_hour", "stationary"), presets=tuple(CAPACITY_PRESETS))
    user_counts = [int(u) for u in _float_list(users, "--users")] if users else None
    what = "checking the SLO at the given load" if qps or users or arrivals_file else "searching each configuration's capacity"
    with job(f"capacity {scenario}: {what} (serving simulations on {workers or 'all'} local worker(s))"):
        df, meta = capacity_from_cli(
            scenario, slo, qps=_float_list(qps, "--qps"), users=user_counts, systems=system,
            gammas=_int_range(gamma, "--gamma", 1, 16), thresholds=_int_range(threshold, "--threshold", 0, 10),
            arrival=arrival, cv=cv, requests=requests, seed=seed, gpu_hour_cost=gpu_hour_cost, target_qps=target_qps,
            workers=workers, ray_address=ray_address, arrivals_file=str(arrivals_file) if arrivals_file else None,
            interval=_interval(ci_target, max_replications), accuracy_floor=accuracy_floor, accuracy_margin=accuracy_margin,
        )
    from simulator.report_table import render_capacity

    title = f"capacity — {meta['scenario']} — SLO {meta['slo']}"
    if fmt == "table":
        render_capacity(df, title, columns)
    if fmt != "table" or out is not None:
        write_output(df, "csv" if fmt == "table" else fmt, out, title, meta)


@app.command()
def report(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    out: Path = typer.Option(..., help="output folder (created)"),
    slo: Optional[str] = typer.Option(None, help="SLO (default: p99 latency <= 3x vanilla-base's single-request latency)"),
    requests: Optional[int] = typer.Option(None, help="requests simulated per load level"),
    seed: Optional[int] = typer.Option(None, help="base seed (default: the scenario's)"),
    gpu_hour_cost: Optional[float] = typer.Option(None, "--gpu-hour-cost", help="price of one GPU-hour"),
    target_qps: Optional[float] = typer.Option(None, "--target-qps", help="request rate to provision for"),
    workers: Optional[int] = typer.Option(None, help="local worker processes (default: all cores)"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="run the sweep on this Ray cluster"),
    accuracy_floor: AccuracyFloorOpt = None,
    accuracy_margin: AccuracyMarginOpt = None,
    ci_target: CiTargetOpt = None,
    max_replications: MaxReplicationsOpt = None,
):
    """Capacity-planning report (markdown + PNGs): latency vs load, SLO frontier, cost, assumptions."""
    from simulator.capacity_report import build_report

    for name, v in (("--gpu-hour-cost", gpu_hour_cost), ("--target-qps", target_qps)):
        if v is not None and not v > 0:
            raise InputError(None, name, f"must be a positive number (got {v})")
    if requests is not None and requests < 20:
        raise InputError(None, "--requests", "must be >= 20")
    _check_seed(seed)
    from simulator.report_table import job, wrote

    with job(f"report {scenario}: capacity search, then latency-vs-load curves (serving simulations)"):
        path = build_report(scenario, out, slo, requests, seed, gpu_hour_cost, target_qps, workers, ray_address,
                            accuracy_floor=accuracy_floor, accuracy_margin=accuracy_margin,
                            interval=_interval(ci_target, max_replications))
    wrote(path, f"markdown; PNGs and CSVs beside it in {out}")


def _interval(ci_target: float | None, max_replications: int | None):
    """The capacity search's replication rule from --ci-target / --max-replications (None: the defaults)."""
    from dataclasses import replace

    from simulator.capacity import IntervalSpec

    spec = IntervalSpec()
    if ci_target is not None:
        if not 0 < ci_target < 1:
            raise InputError(None, "--ci-target", f"must be in (0, 1) (got {ci_target})")
        spec = replace(spec, target=ci_target)
    if max_replications is not None:
        if max_replications < spec.min_reps:
            raise InputError(None, "--max-replications", f"must be >= {spec.min_reps} (got {max_replications})")
        spec = replace(spec, max_reps=max_replications)
    return spec


def _register_subapps() -> None:
    from calibrate.cli import app as calibrate_app

    app.add_typer(calibrate_app, name="calibrate", help="Run the real systems, microbenchmark, fit profiles.")
    # calibrate fit + validate (calibrate/fit_cli.py, validate/cli.py); both import heavy parts lazily
    from calibrate.fit_cli import register as _register_fit
    from validate.cli import register as _register_validate

    _register_fit(calibrate_app)
    _register_validate(app)
    # study (calibrate/study/cli.py): torch and the models are imported only when a study runs
    from calibrate.study.cli import app as study_app

    app.add_typer(study_app, name="study", help="Speculative decoding study on real small models (torch, CPU) "
                  "against the simulator's predictions.")
    # calibrate serve-run + validate-serving (calibrate/serving_run.py, validate/serving.py): concurrent requests
    from calibrate.serving_run import register as _register_serve_run
    from validate.serving import register as _register_validate_serving

    _register_serve_run(calibrate_app)
    _register_validate_serving(app)
    from calibrate.serving_systems import register as _register_serve_systems

    _register_serve_systems(calibrate_app)
    for typer_app, name, what in (
            (app, "validate", "validate: fitting and predicting the held-out runs (trace replay, then distribution mode)"),
            (app, "validate-serving", "validate-serving: fitting step times and replaying the measured levels"),
            (calibrate_app, "fit", "calibrate fit: robust least squares over the measured calls"),
            (calibrate_app, "fit-workload", "calibrate fit-workload: fitting the workload distributions")):
        _announce_when_long(typer_app, name, what)


def _announce_when_long(typer_app: typer.Typer, name: str, what: str) -> None:
    """Wrap a registered command so that, past a few seconds, it says what it is doing and when it is done
    (``report_table.job``); the command's own code (in other packages) stays as it is."""
    import functools

    from simulator.report_table import job

    for info in typer_app.registered_commands:
        if (info.name or getattr(info.callback, "__name__", None)) == name and info.callback is not None \
                and not getattr(info.callback, "_announced", False):
            inner = info.callback

            @functools.wraps(inner)
            def wrapper(*args, __inner=inner, **kwargs):
                with job(what, after_s=3.0):
                    return __inner(*args, **kwargs)

            wrapper._announced = True
            info.callback = wrapper


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def run_app(typer_app: typer.Typer, argv: list[str] | None, prog_name: str) -> int:
    """Run ``typer_app`` under the error contract (module docstring): InputError and every usage
    mistake (unknown command or option -- with typer's "did you mean" --, missing argument, bad
    value) -> one line ``error: ...`` and 2; an unexpected exception -> one line and 2 as well
    (the tool cannot judge this input), re-raised with ``SPECSIM_DEBUG=1``."""
    import os

    try:
        rc = typer_app(args=argv, standalone_mode=False, prog_name=prog_name)
    except InputError as e:
        print(f"error: {_one_line(e.one_line())}", file=sys.stderr)
        return 2
    except typer.Exit as e:
        return e.exit_code
    except SystemExit as e:  # a command's sys.exit(code) (validate: 1 above the bar, 2 cannot judge)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except (typer.Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        return 130
    except typer.TyperException as e:  # typer's (vendored click) usage errors
        if type(e).__name__ == "NoArgsIsHelpError":  # a bare group: its help was printed; not a mistake
            return 0
        ctx = getattr(e, "ctx", None)
        where = f"{ctx.command_path}: " if ctx is not None and ctx.command_path else ""
        print(f"error: {where}{_one_line(e.format_message())}", file=sys.stderr)
        return 2 if getattr(e, "exit_code", 1) in (1, 2) else e.exit_code
    except Exception as e:  # noqa: BLE001 - the contract: no traceback for any input
        if os.environ.get("SPECSIM_DEBUG"):
            raise
        print(f"error: cannot handle this input ({type(e).__name__}: {_one_line(e) or 'no message'}); "
              "rerun with SPECSIM_DEBUG=1 for the traceback", file=sys.stderr)
        return 2
    return rc if isinstance(rc, int) else 0


def ensure_registered() -> None:
    """Register the sub-command groups once (also for ``python -m calibrate``)."""
    global _registered
    if not _registered:
        _register_subapps()
        _registered = True


def quiet_engines(argv: list[str] | None) -> list[str]:
    """Engine logs (vLLM INFO lines, config dumps, weight-loading bars) off unless ``--verbose`` (anywhere
    on the command line; taken out of it here) or ``SPECSIM_VERBOSE=1``; set before any engine is imported
    (engine subprocesses inherit it). Returns the arguments without ``--verbose``."""
    import os

    args = list(sys.argv[1:] if argv is None else argv)
    if "--verbose" in args:
        os.environ["SPECSIM_VERBOSE"] = "1"
        args = [a for a in args if a != "--verbose"]
    if os.environ.get("SPECSIM_VERBOSE"):
        return args
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return args


def _hide_flag_types() -> None:
    """Help lists a flag as ``--gemma / --no-gemma``, without typer's ``<bool>`` type column."""
    from typer.core import TyperOption

    if getattr(TyperOption, "_specsim_flags_plain", False):
        return
    orig = TyperOption.display_type_rich

    def display_type_rich(self, ctx):
        return None if getattr(self, "is_flag", False) else orig(self, ctx)

    TyperOption.display_type_rich = display_type_rich
    TyperOption._specsim_flags_plain = True


def main(argv: list[str] | None = None) -> int:
    """Console-script entry point (:func:`run_app` over the whole ``specsim`` command tree)."""
    argv = quiet_engines(argv)
    _hide_flag_types()
    ensure_registered()
    return run_app(app, argv, "specsim")


if __name__ == "__main__":
    sys.exit(main())
