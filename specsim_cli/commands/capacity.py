"""``specsim simulate capacity``: the highest request rate one replica sustains under an SLO, per configuration.
The command checks its options, loads the scenario with the grid's overrides (``load_scenario``: a validated copy),
runs :func:`simulator.studies.capacity.capacity_study` and prints the table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from simulator.errors import InputError
from simulator.option_values import (GAMMA_MAX, check_capacity_requests, currency_option, gamma_list_option,
                                     gpu_hour_cost_option, rate_list, system_list_option, threshold_list_option,
                                     user_list)
from simulator.output_contract import ForceOpt, writes
from specsim_cli.commands.predict import (AccuracyFloorOpt, AccuracyMarginOpt, BenchServeOpt, CiTargetOpt, HardwareOpt,
                                          MaxReplicationsOpt, check_seed, grid_overrides, interval_spec, tp_option)

HELP = """Highest request rate one replica sustains under an SLO, per configuration; replicas and cost.

    Columns: max req/s = the highest Poisson rate one replica sustains: SLO met, and while requests arrive
    the replica keeps up (docs/capacity.md); thr req/s = requests completed per second in that window at the
    rate shown (a search: the mean over replications at their max rates); thr/offered = its ratio to the
    offered rate, which must stay within tol (2 sd of the Poisson count of the window's arrivals), so no max
    rate exceeds the throughput simulated at it by more than 1 / (1 - tol); queue growth = rise of the
    requests in the system over the window / the arrivals expected in it (also <= tol); the window must span
    4 of the run's own mean latencies (a shorter run is rerun longer); drift x = mean latency of the last
    quarter of arrivals / the second quarter (a rate counts as sustained only at <= 1.25 and without a
    significant latency trend, so SLO met can be "no" while p99 is under the bound); sims = serving simulations the search ran for that configuration; goodput req/s = requests
    within the SLO per second of the whole run, its fill and drain included (vLLM's --goodput), so below the
    max rate for a finite run even when nearly every request meets the SLO; cost at --gpu-hour-cost, in --currency; replicas and GPUs (CPU hosts for a CPU
    scenario) for --target-qps. --out files get every column. The last line names the best configuration
    and why (the same line opens `specsim simulate report`); under it, each GPU priced by the catalog's priors
    gets the model's own held-out error there (released vllm bench serve runs,
    simulator/catalog/serving_accuracy.yaml): the 95% interval is the simulation's noise only. SLO metrics: latency, ttft, queue_delay, tpot, itl
    (vllm bench serve's definitions).

    Example: specsim simulate capacity cpu-smollm2 --system specreason --threshold 5 --target-qps 2

    Example: specsim simulate capacity modern-h100-h200-qwen3 --slo p99_ttft<=2s --target-qps 20 --bench-serve
    "vllm bench serve --dataset-name random --random-input-len 2048 --random-output-len 256"
    """
Scenario = Annotated[str, typer.Argument(..., help="scenario YAML (path or name in scenarios/)")]
SloOpt = Annotated[Optional[str], typer.Option(help="SLO, e.g. 'p99_latency<=300s' or 'p90_latency<=60s,mean_ttft<=2s' "
                                               "(default: the scenario's slo, else p99 <= 3x vanilla-base's "
                                               "single-request latency)")]
QpsOpt = Annotated[Optional[str], typer.Option(help="check the SLO at these request rates (e.g. 0.5,1,2) instead of "
                                               "searching")]
UsersOpt = Annotated[Optional[str], typer.Option(help="check the SLO with these closed-loop user counts (e.g. 4,16)")]
ArrivalsOpt = Annotated[Optional[Path], typer.Option("--arrivals-file", help="check the SLO on arrival times replayed "
                                                     "from a CSV/JSONL file")]
ArrivalOpt = Annotated[str, typer.Option(help="poisson | bursty")]
CvOpt = Annotated[Optional[float], typer.Option(help="coefficient of variation of inter-arrival gaps, with "
                                                   "--arrival bursty (default 1)")]
RequestsOpt = Annotated[Optional[int], typer.Option(help="requests simulated per load level")]
SeedOpt = Annotated[Optional[int], typer.Option(help="base seed (default: the scenario's)")]
TargetQpsOpt = Annotated[Optional[float], typer.Option("--target-qps", help="request rate to provision for")]
WorkersOpt = Annotated[Optional[int], typer.Option(help="local worker processes (default: all cores; 1 = serial)")]
RayOpt = Annotated[Optional[str], typer.Option("--ray-address", help="run the sweep on this Ray cluster")]
FormatOpt = Annotated[str, typer.Option("--format", help="table | csv | json")]
OutOpt = Annotated[Optional[Path], typer.Option(help="write the results here, every column (table format: JSON for a "
                                                ".json name, parquet for .parquet, else CSV)")]
ColumnsOpt = Annotated[Optional[str], typer.Option("--columns", help="table columns: summary (default) | all | a comma "
                                                   "list of result columns, e.g. label,max_qps,latency_p99_s")]
GammaPolicyOpt = Annotated[str, typer.Option("--gamma-policy", help="fixed | goodput: with goodput every drafting "
                                             "configuration chooses gamma per engine iteration by the expected-goodput "
                                             "rule, up to its --gamma (serving simulator)")]
BestGammaOpt = Annotated[bool, typer.Option("--best-gamma", help="with --users: per user count the gamma with the "
                                            "highest output throughput (its TPOT and throughput, gammas within 5% as "
                                            "ties) and the per-iteration goodput rule's gamma at that load's mean "
                                            "batch, and the same system run with gamma chosen per engine iteration by "
                                            "that rule (up to the largest --gamma); --gamma may include 0 (plain "
                                            "decoding)")]
EXTRA_COLUMNS = ("offered_qps", "throughput_qps", "latency_p50_s", "latency_p90_s", "ttft_p99_s", "slo_attainment",
                 "gpus_per_replica", "fleet_cost_per_hour", "stationary", "sustained", "too_short")


def capacity_gamma_option():
    return gamma_list_option(None, lo=0, help="draft tokens per iteration, 1..16 (0, plain decoding, only with "
                             "--best-gamma)")


@writes(out="table")
def capacity(
    scenario: Scenario, slo: SloOpt = None, qps: QpsOpt = None, users: UsersOpt = None,
    arrivals_file: ArrivalsOpt = None, system: Optional[list[str]] = system_list_option(),
    gamma: Optional[list[int]] = capacity_gamma_option(),
    threshold: Optional[list[int]] = threshold_list_option(),
    arrival: ArrivalOpt = "poisson", cv: CvOpt = None, requests: RequestsOpt = None, seed: SeedOpt = None,
    gpu_hour_cost: Optional[float] = gpu_hour_cost_option(), currency: str = currency_option(),
    target_qps: TargetQpsOpt = None, workers: WorkersOpt = None, ray_address: RayOpt = None,
    fmt: FormatOpt = "table", out: OutOpt = None, columns: ColumnsOpt = None,
    accuracy_floor: AccuracyFloorOpt = None, accuracy_margin: AccuracyMarginOpt = None,
    ci_target: CiTargetOpt = None, max_replications: MaxReplicationsOpt = None,
    gamma_policy: GammaPolicyOpt = "fixed", bench_serve: BenchServeOpt = None, best_gamma: BestGammaOpt = False,
    hardware: HardwareOpt = None, tp: Optional[list[int]] = tp_option(), force: ForceOpt = False,
):
    from simulator.report.report_table import job
    from simulator.studies.capacity import CapacityRequest, Where, capacity_study

    _check(fmt, workers, seed, columns, gamma_policy, best_gamma, gamma)
    user_counts, rates = user_list(users), rate_list(qps)
    check_capacity_requests(requests)
    if best_gamma and not user_counts:
        raise InputError(None, "--best-gamma", "needs --users (the concurrency levels to compare gammas at)")
    grid = grid_overrides(hardware, tp)
    request = CapacityRequest(
        slo, rates, user_counts, str(arrivals_file) if arrivals_file else None, system, gamma, threshold, arrival, cv,
        requests, seed, gpu_hour_cost, target_qps, currency, interval_spec(ci_target, max_replications),
        accuracy_floor, accuracy_margin, adaptive_gamma=best_gamma, gamma_policy=gamma_policy, stop_below_best=True,
        bench_serve=bench_serve, trim_grid=True)
    what = "checking the SLO at the given load" if request.at_loads else "searching each configuration's capacity"
    with job(f"capacity {scenario}: {what} (serving simulations on {workers or 'all'} local worker(s))") as j:
        from simulator.inputs.scenario import load_scenario

        rs = load_scenario(scenario, grid)
        df, meta = capacity_study(rs, request, Where(workers, ray_address, j.progress,
                                                     lambda note: typer.echo(f"note: {note}", err=True)))
    _show(df, meta, rs, best_gamma, fmt, out, columns, currency)


capacity.__doc__ = HELP


def _check(fmt, workers, seed, columns, gamma_policy, best_gamma, gamma) -> None:
    """The options checked before any work, in the order their errors are reported."""
    from simulator.report.report_table import CAPACITY_COLUMNS, CAPACITY_PRESETS, check_columns

    if fmt not in ("table", "csv", "json"):
        raise InputError(None, "--format", f"expected table, csv or json (got {fmt!r})")
    if workers is not None and workers < 1:
        raise InputError(None, "--workers", "must be >= 1")
    check_seed(seed)
    check_columns(columns, CAPACITY_COLUMNS, extra=EXTRA_COLUMNS, presets=tuple(CAPACITY_PRESETS))
    if gamma_policy not in ("fixed", "goodput"):
        raise InputError(None, "--gamma-policy", f"expected fixed or goodput (got {gamma_policy!r})")
    if gamma_policy != "fixed" and best_gamma:
        raise InputError(None, "--gamma-policy", "--best-gamma already runs the goodput policy beside every fixed gamma")
    if gamma and gamma[0] == 0 and not best_gamma:
        raise InputError(None, "--gamma", f"must lie in 1..{GAMMA_MAX} (got 0): 0, plain decoding, is --best-gamma's "
                         "baseline only")


def _show(df, meta: dict, rs, best_gamma: bool, fmt: str, out: Path | None, columns, currency: str) -> None:
    """The table (or the best gamma per concurrency) on the terminal, and the file ``--out`` / ``--format`` ask for."""
    from simulator.report.report_table import render_best_gamma, render_capacity, write_output

    if best_gamma:
        from simulator.engines.gamma_choice import gamma_vs_concurrency

        if not df["gamma"].notna().any():
            raise InputError(None, "--best-gamma", "no configuration with a draft (specdecode, specreason-decode) selected")
        df = gamma_vs_concurrency(df[df["gamma"].notna()], rs)
        title = f"best gamma vs concurrency — {meta['scenario']}"
    else:
        title = f"capacity — {meta['scenario']} — SLO {meta['slo']}"
        for key in ("workload_note", "grid_note"):
            if meta.get(key):
                title = f"note: {meta[key]}\n{title}"
    if fmt == "table" and best_gamma:
        render_best_gamma(df, title)
    elif fmt == "table":
        render_capacity(df, title, columns, currency)
        if meta.get("scheduler_limits"):
            print(meta["scheduler_limits"])
        if meta.get("headline"):
            print(meta["headline"])
        if meta.get("model_error"):
            from simulator.catalog.serving_accuracy import error_block

            print(error_block(meta["model_error"]))
    if fmt != "table" or out is not None:
        from simulator.output_contract import file_format

        write_output(df, file_format(fmt, out) if out is not None else fmt, out, title, meta)
