"""The prediction commands (``simulate whatif | capacity | report | pass-time | serve-workload``): each parses, calls
one library function, prints. Commands raise :class:`~simulator.errors.InputError` for bad input;
``specsim_cli.main.run_app`` prints it (exit 2, one line ``error: ...``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from simulator.errors import InputError
from simulator.option_values import (FIRST_N_MAX, GAMMA_MAX, check_capacity_requests, check_requests, currency_option,
                                     gamma_list_option, gpu_hour_cost_option, int_list_option, rate_list,
                                     threshold_list_option, user_list)
from simulator.output_contract import ForceOpt, writes
from simulator.report.report_table import COLUMNS_HELP


def _check_seed(seed: int | None) -> None:
    if seed is not None and not 0 <= seed < 2**63:
        raise InputError(None, "--seed", f"must be an integer >= 0 (got {seed})")


# Options shared by several commands (declared once).
# --force: simulator.output_contract (the one output contract; @writes adds it where a command lacks it)
AccuracyFloorOpt = Annotated[Optional[str], typer.Option(
    "--accuracy-floor", help="recommend only configurations at least this accurate: vanilla-base (default: within "
    "--accuracy-margin of it), a number in [0, 1], or none")]
AccuracyMarginOpt = Annotated[Optional[float], typer.Option(
    "--accuracy-margin", help="allowed accuracy loss vs the reference system, within its 95% interval (default 0.05)")]
# the grid's hardware and TP instead of the scenario's (whatif, capacity, report): _grid_overrides reads them
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", help="run on this catalog hardware instead of the "
                                                    "scenario's (specsim list hardware), e.g. h100-sxm or h100-sxm,h200")]


def tp_option():
    return int_list_option(None, "--tp", concept="tp", lo=1, hi=1024, help="tensor-parallel degrees instead of the "
                           "scenario's", example="1,2")


@writes(out="table")
def whatif(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    system: Optional[list[str]] = typer.Option(None, "--system", help="restrict to these systems (repeatable)"),
    gamma: Optional[list[int]] = gamma_list_option(),
    threshold: Optional[list[int]] = threshold_list_option(),
    first_n: Optional[list[int]] = int_list_option(None, "--first-n", concept="first_n", lo=0, hi=FIRST_N_MAX,
                                                   help="steps the base model writes first", example="0,2"),
    engine: Optional[str] = typer.Option(None, help="analytic | des (default: the scenario's)"),
    requests: Optional[int] = typer.Option(None, help="DES requests per grid point"),
    seed: Optional[int] = typer.Option(None, help="DES seed"),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    out: Optional[Path] = typer.Option(None, help="write the results here, every column (table format: JSON for a "
                                       ".json name, parquet for .parquet, else CSV)"),
    columns: Optional[str] = typer.Option(None, "--columns", help=COLUMNS_HELP),
    hardware: HardwareOpt = None,
    tp: Optional[list[int]] = tp_option(),
    accuracy_floor: AccuracyFloorOpt = None,
    accuracy_margin: AccuracyMarginOpt = None,
    force: ForceOpt = False,
):
    """Predict latency, speedup, small-step fraction, acceptance length and breakdown over the grid.

    The breakdown (--columns breakdown) splits each latency into small and base decode, prefill, scoring,
    drafting, verification and call overhead, all in seconds per request; they sum to the latency. The DES
    engine adds p50/p90/p99 latency and a 99% interval of the mean. The last line names the fastest
    configuration shown to meet the accuracy floor, and any faster one left out and why (accuracy unknown
    or below the floor).

    Example: specsim simulate whatif reference-a6000-qwq32b --system specreason-decode --gamma 3-6 --threshold 5,7
    """
    from simulator.studies.whatif import whatif_from_cli

    if fmt not in ("table", "csv", "json"):
        raise InputError(None, "--format", f"expected table, csv or json (got {fmt!r})")
    if engine is not None and engine not in ("analytic", "des"):
        raise InputError(None, "--engine", f"expected analytic or des (got {engine!r})")
    check_requests(requests, 2)
    _check_seed(seed)
    from simulator.report.report_table import check_columns, job, write_output

    check_columns(columns, extra=("engine", "steps", "requests", "accuracy", "accuracy_lo", "accuracy_hi"))
    kwargs = dict(systems=system, gammas=gamma, thresholds=threshold, first_ns=first_n, engine=engine, requests=requests, seed=seed,
                  grid_overrides=_grid_overrides(hardware, tp), accuracy_floor=accuracy_floor, accuracy_margin=accuracy_margin)
    with job(f"whatif {scenario}" + (f": {engine} engine" if engine else "") + (f", {requests} requests per point" if requests else "")):
        df, title, meta = whatif_from_cli(scenario, **kwargs)
    write_output(df, fmt, out, title, meta, columns)
    if fmt == "table":
        from simulator.report.report_table import print_line

        print_line(meta["best"])


def _grid_overrides(hardware: str | None, tp: list[int] | None) -> dict | None:
    """--hardware / --tp -> the scenario grid's hardware / tp lists (names checked against the catalog here, so
    an error names the option)."""
    if hardware is None and tp is None:
        return None
    hw = None
    if hardware is not None:
        from simulator.catalog import get_hardware

        hw = [h.strip() for h in hardware.split(",") if h.strip()]
        if not hw:
            raise InputError(None, "--hardware", "expected a catalog name, e.g. h100-sxm (specsim list hardware)")
        for h in hw:
            get_hardware(h, None, "--hardware")
    return {"hardware": hw, "tp": tp}


# Options shared by `capacity` and `report` (declared once).
CiTargetOpt = Annotated[Optional[float], typer.Option(
    "--ci-target", help="replicate until the 95% interval half-width is at most this fraction of the capacity (default 0.10)")]
MaxReplicationsOpt = Annotated[Optional[int], typer.Option("--max-replications", help="replications per configuration at most")]
BenchServeOpt = Annotated[Optional[str], typer.Option("--bench-serve", help=(
    "plan for this `vllm bench serve ...` line's traffic (random dataset: lengths, --random-prefix-len, --burstiness) "
    "instead of the reasoning workload (default: the scenario's serving_workload, if any); vanilla-base and "
    "specdecode only; the search sets the rate: the line's --request-rate, --max-concurrency and --num-prompts are "
    "ignored, and the title says so"))]


@writes(out="table")
def capacity(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    slo: Optional[str] = typer.Option(None, help="SLO, e.g. 'p99_latency<=300s' or 'p90_latency<=60s,mean_ttft<=2s' "
                                      "(default: the scenario's slo, else p99 <= 3x vanilla-base's single-request latency)"),
    qps: Optional[str] = typer.Option(None, help="check the SLO at these request rates (e.g. 0.5,1,2) instead of searching"),
    users: Optional[str] = typer.Option(None, help="check the SLO with these closed-loop user counts (e.g. 4,16)"),
    arrivals_file: Optional[Path] = typer.Option(None, "--arrivals-file",
                                                 help="check the SLO on arrival times replayed from a CSV/JSONL file"),
    system: Optional[list[str]] = typer.Option(None, "--system", help="restrict to these systems (repeatable)"),
    gamma: Optional[list[int]] = gamma_list_option(None, lo=0, help="draft tokens per iteration, 1..16 (0, plain "
                                                   "decoding, only with --best-gamma)"),
    threshold: Optional[list[int]] = threshold_list_option(),
    arrival: str = typer.Option("poisson", help="poisson | bursty"),
    cv: float = typer.Option(1.0, help="coefficient of variation of inter-arrival gaps (bursty)"),
    requests: Optional[int] = typer.Option(None, help="requests simulated per load level"),
    seed: Optional[int] = typer.Option(None, help="base seed (default: the scenario's)"),
    gpu_hour_cost: Optional[float] = gpu_hour_cost_option(),
    currency: str = currency_option(),
    target_qps: Optional[float] = typer.Option(None, "--target-qps", help="request rate to provision for"),
    workers: Optional[int] = typer.Option(None, help="local worker processes (default: all cores; 1 = serial)"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="run the sweep on this Ray cluster"),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    out: Optional[Path] = typer.Option(None, help="write the results here, every column (table format: JSON for a "
                                       ".json name, parquet for .parquet, else CSV)"),
    columns: Optional[str] = typer.Option(None, "--columns", help="table columns: summary (default) | all | a comma "
                                          "list of result columns, e.g. label,max_qps,latency_p99_s"),
    accuracy_floor: AccuracyFloorOpt = None,
    accuracy_margin: AccuracyMarginOpt = None,
    ci_target: CiTargetOpt = None,
    max_replications: MaxReplicationsOpt = None,
    gamma_policy: str = typer.Option("fixed", "--gamma-policy", help="fixed | goodput: with goodput every drafting "
                                     "configuration chooses gamma per engine iteration by the expected-goodput rule, "
                                     "up to its --gamma (serving simulator)"),
    bench_serve: BenchServeOpt = None,
    best_gamma: bool = typer.Option(False, "--best-gamma", help="with --users: per user count the gamma with the "
                                    "highest output throughput (its TPOT and throughput, gammas within 5% as ties) "
                                    "and the per-iteration goodput rule's gamma at that load's mean batch, and the "
                                    "same system run with gamma chosen per engine iteration by that rule (up to the "
                                    "largest --gamma); --gamma may include 0 (plain decoding)"),
    hardware: HardwareOpt = None,
    tp: Optional[list[int]] = tp_option(),
    force: ForceOpt = False,
):
    """Highest request rate one replica sustains under an SLO, per configuration; replicas and cost.

    Columns: max req/s = the highest Poisson rate one replica sustains: SLO met, and while requests arrive
    the replica keeps up (docs/capacity.md); thr req/s = requests completed per second in that window at the
    rate shown (a search: the mean over replications at their max rates); thr/offered = its ratio to the
    offered rate, which must stay within tol (2 sd of the Poisson count of the window's arrivals), so no max
    rate exceeds the throughput simulated at it by more than 1 / (1 - tol); queue growth = rise of the
    requests in the system over the window / the arrivals expected in it (also <= tol); the window must span
    4 of the run's own mean latencies (a shorter run is rerun longer); drift x = mean latency of the last
    quarter of arrivals / the second quarter (a rate counts as sustained only at <= 1.25 and without a
    significant latency trend, so SLO met can be "no" while p99 is under the bound); sims = serving simulations the search ran for that configuration; goodput req/s = requests
    per second finishing within the SLO; cost at --gpu-hour-cost, in --currency; replicas and GPUs (CPU hosts for a CPU
    scenario) for --target-qps. --out files get every column. The last line names the best configuration
    and why (the same line opens `specsim simulate report`). SLO metrics: latency, ttft, queue_delay, tpot, itl
    (vllm bench serve's definitions).

    Example: specsim simulate capacity cpu-smollm2 --system specreason --threshold 5 --target-qps 2

    Example: specsim simulate capacity modern-h100-h200-qwen3 --slo p99_ttft<=2s --target-qps 20 --bench-serve
    "vllm bench serve --dataset-name random --random-input-len 2048 --random-output-len 256"
    """
    from simulator.studies.capacity import capacity_from_cli
    from simulator.report.report_table import job, write_output

    if fmt not in ("table", "csv", "json"):
        raise InputError(None, "--format", f"expected table, csv or json (got {fmt!r})")
    if workers is not None and workers < 1:
        raise InputError(None, "--workers", "must be >= 1")
    _check_seed(seed)
    from simulator.report.report_table import CAPACITY_COLUMNS, CAPACITY_PRESETS, check_columns

    check_columns(columns, CAPACITY_COLUMNS, extra=("offered_qps", "throughput_qps", "latency_p50_s", "latency_p90_s",
                                                    "ttft_p99_s", "slo_attainment", "gpus_per_replica",
                                                    "fleet_cost_per_hour", "stationary", "sustained", "too_short"),
                  presets=tuple(CAPACITY_PRESETS))
    if gamma_policy not in ("fixed", "goodput"):
        raise InputError(None, "--gamma-policy", f"expected fixed or goodput (got {gamma_policy!r})")
    if gamma_policy != "fixed" and best_gamma:
        raise InputError(None, "--gamma-policy", "--best-gamma already runs the goodput policy beside every fixed gamma")
    if gamma and gamma[0] == 0 and not best_gamma:
        raise InputError(None, "--gamma", f"must lie in 1..{GAMMA_MAX} (got 0): 0, plain decoding, is --best-gamma's "
                         "baseline only")
    user_counts = user_list(users)
    rates = rate_list(qps)
    check_capacity_requests(requests)
    if best_gamma and not user_counts:
        raise InputError(None, "--best-gamma", "needs --users (the concurrency levels to compare gammas at)")
    grid = _grid_overrides(hardware, tp)
    what = "checking the SLO at the given load" if qps or users or arrivals_file else "searching each configuration's capacity"
    with job(f"capacity {scenario}: {what} (serving simulations on {workers or 'all'} local worker(s))") as j:
        df, meta = capacity_from_cli(
            scenario, slo, qps=rates, users=user_counts, systems=system,
            gammas=gamma, thresholds=threshold,
            arrival=arrival, cv=cv, requests=requests, seed=seed, gpu_hour_cost=gpu_hour_cost, currency=currency, target_qps=target_qps,
            workers=workers, ray_address=ray_address, arrivals_file=str(arrivals_file) if arrivals_file else None,
            interval=_interval(ci_target, max_replications), accuracy_floor=accuracy_floor, accuracy_margin=accuracy_margin,
            adaptive_gamma=best_gamma, gamma_policy=gamma_policy, progress=j.progress, stop_below_best=True,
            bench_serve=bench_serve, grid_overrides=grid, trim_grid=True,
            announce=lambda note: typer.echo(f"note: {note}", err=True),
        )
    from simulator.report.report_table import render_best_gamma, render_capacity

    if best_gamma:
        from simulator.engines.gamma_choice import gamma_vs_concurrency
        from simulator.inputs.scenario import load_scenario

        if not df["gamma"].notna().any():
            raise InputError(None, "--best-gamma", "no configuration with a draft (specdecode, specreason-decode) selected")
        df = gamma_vs_concurrency(df[df["gamma"].notna()], load_scenario(scenario, grid))
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
        if meta.get("headline"):
            print(meta["headline"])
    if fmt != "table" or out is not None:
        from simulator.output_contract import file_format

        write_output(df, file_format(fmt, out) if out is not None else fmt, out, title, meta)


@writes(out="folder")
def report(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    out: Path = typer.Option(..., help="output folder (created; an existing non-empty one needs --force)"),
    slo: Optional[str] = typer.Option(None, help="SLO, e.g. 'p99_latency<=300s' (default: the scenario's slo, else "
                                      "p99 latency <= 3x vanilla-base's single-request latency)"),
    system: Optional[list[str]] = typer.Option(None, "--system", help="restrict to these systems (repeatable)"),
    gamma: Optional[list[int]] = gamma_list_option(),
    threshold: Optional[list[int]] = threshold_list_option(),
    requests: Optional[int] = typer.Option(None, help="requests simulated per load level"),
    seed: Optional[int] = typer.Option(None, help="base seed (default: the scenario's)"),
    gpu_hour_cost: Optional[float] = gpu_hour_cost_option(),
    currency: str = currency_option(),
    target_qps: Optional[float] = typer.Option(None, "--target-qps", help="request rate to provision for"),
    workers: Optional[int] = typer.Option(None, help="local worker processes (default: all cores)"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="run the sweep on this Ray cluster"),
    accuracy_floor: AccuracyFloorOpt = None,
    accuracy_margin: AccuracyMarginOpt = None,
    ci_target: CiTargetOpt = None,
    max_replications: MaxReplicationsOpt = None,
    bench_serve: BenchServeOpt = None,
    hardware: HardwareOpt = None,
    tp: Optional[list[int]] = tp_option(),
    force: ForceOpt = False,
):
    """Capacity-planning report (markdown + PNGs): latency vs load, SLO frontier, cost, assumptions.

    The capacities, intervals and ranks are those of `specsim simulate capacity` (the same search, seeds and run length);
    configurations below the accuracy floor, or without accuracy data of their own, are listed (here and in the
    report) with the reason, not searched; one with measured accuracy whose floor cannot be judged (the
    reference's accuracy unknown) is searched and plotted, never recommended. The report's first line (also
    printed here) names the best configuration and why.

    Example: specsim simulate report cpu-smollm2 --out out/report-cpu --target-qps 2 --gpu-hour-cost 0.05
    """
    from simulator.report.capacity_report import build_report
    for name, v in (("--gpu-hour-cost", gpu_hour_cost), ("--target-qps", target_qps)):
        if v is not None and not v > 0:
            raise InputError(None, name, f"must be a positive number (got {v})")
    check_capacity_requests(requests)
    _check_seed(seed)
    from simulator.report.report_table import job, wrote

    if system:
        from simulator.inputs.systems import SYSTEMS

        for sname in system:
            if sname not in SYSTEMS:
                raise InputError(None, "--system", f"unknown system {sname!r}; known: {', '.join(SYSTEMS)}")
    with job(f"report {scenario}: capacity search, then latency-vs-load curves (serving simulations)") as j:
        path, line, excluded = build_report(scenario, out, slo, requests, seed, gpu_hour_cost, target_qps, workers, ray_address,
                                            currency=currency,
                                  accuracy_floor=accuracy_floor, accuracy_margin=accuracy_margin,
                                  interval=_interval(ci_target, max_replications), systems=system,
                                  gammas=gamma, thresholds=threshold, progress=j.progress, bench_serve=bench_serve,
                                  grid_overrides=_grid_overrides(hardware, tp))
    print(line)
    for text in excluded:  # never leave a configuration out in silence
        print(f"Excluded: {text}.")
    wrote(path, f"markdown; PNGs and CSVs beside it in {out}")


def _interval(ci_target: float | None, max_replications: int | None):
    """The capacity search's replication rule from --ci-target / --max-replications (None: the defaults)."""
    from dataclasses import replace

    from simulator.studies.capacity import IntervalSpec

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


@writes(out="table")
def pass_time(
    model: str = typer.Option(..., "--model", help="catalog model name (specsim list models) or a path to a HF config.json"),
    hardware: str = typer.Option(..., "--hardware", help="catalog hardware name, e.g. h100-sxm"),
    tp: int = typer.Option(1, "--tp", help="tensor-parallel degree"),
    batch: list[int] = int_list_option("1", "--batch", concept="batch", lo=1, hi=65536,
                                       help="sequences in the step", example="1,8,64 or 1-4"),
    new_tokens: list[int] = int_list_option("1", "--new-tokens", concept="new_tokens", lo=1, hi=1_000_000,
                                            help="new tokens per sequence (1: decode)", example="1,5,512"),
    context: list[int] = int_list_option("0", "--context", concept="context", lo=0, hi=10_000_000,
                                         help="cached tokens per sequence", example="0,4096"),
    dtype: str = typer.Option("bf16", "--dtype", help="weight dtype: bf16 | fp8 | int4"),
    draft: Optional[str] = typer.Option(None, "--draft", help="draft: a catalog model, head[:LAYERS] (EAGLE-style), eagle3[:LAYERS] (EAGLE-3 as built), block[:LAYERS] (gamma drafts in one pass) or mtp (the model's own MTP module, one per drafted token)"),
    ep: int = typer.Option(1, "--ep", help="expert parallelism of a mixture of experts: 1 (experts sharded by TP) or TP (whole experts per GPU)"),
    pp: int = typer.Option(1, "--pp", help="pipeline-parallel stages (layers split over pp stages of --tp GPUs each)"),
    dp: int = typer.Option(1, "--dp", help="data-parallel attention ranks of a mixture of experts (--ep = tp x dp); --batch is the replica's"),
    gamma: Optional[int] = typer.Option(None, "--gamma", help="draft tokens per speculative iteration (with --draft)"),
    profile: Optional[Path] = typer.Option(None, "--profile", help="cost profile YAML (default: the catalog's priors)"),
    fmt: str = typer.Option("table", "--format", help="table | csv | json"),
    out: Optional[Path] = typer.Option(None, help="write the rows here (table format: JSON for a .json name, "
                                       "parquet for .parquet, else CSV)"),
    force: ForceOpt = False,
):
    """Predicted time of one engine step (pass_ms) with its breakdown; with --draft/--gamma also iteration_ms.

    A step runs B sequences with T new tokens each on C cached tokens each; the parts (weights, kv, compute,
    allreduce, step, layers, sequences, sendrecv: pipeline stages) sum to pass_ms; with --pp the step is one
    pipeline cycle (every sequence advances once). An iteration is gamma draft passes plus one
    verification of gamma+1 tokens per sequence at context C.

    Example: specsim simulate pass-time --model qwq-32b --hardware h100-sxm --tp 2 --batch 1,8,64 --context 4096
    """
    from simulator.cost.pass_time import pass_time_table, render
    from simulator.output_contract import file_format
    from simulator.report.report_table import write_output

    if fmt not in ("table", "csv", "json"):
        raise InputError(None, "--format", f"expected table, csv or json (got {fmt!r})")
    prof = None
    if profile is not None:
        from simulator.cost.cost_profile import CostProfile
        from simulator.inputs.loading import load_yaml_model

        prof = load_yaml_model(profile, CostProfile)
    df, meta = pass_time_table(model, hardware, tp, batch, new_tokens, context, dtype, draft, gamma, prof, ep, pp, dp)
    if fmt == "table":
        render(df, meta)
        if out is not None:
            write_output(df, file_format(fmt, out), out, "", meta)
        return
    write_output(df, fmt, out, "", meta)


def serve_workload(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    bench_serve: Optional[str] = typer.Option(None, "--bench-serve", help="a `vllm bench serve ...` command line "
                                              "(random dataset) instead of the scenario's serving_workload"),
    hardware: Optional[str] = typer.Option(None, "--hardware", help="catalog hardware (default: the scenario's)"),
    tp: Optional[int] = typer.Option(None, "--tp", help="tensor parallelism (default: the scenario's)"),
    requests: Optional[int] = typer.Option(None, help="requests (sessions) to send (default: the workload's num_prompts)"),
    seed: Optional[int] = typer.Option(None, help="seed (default: the scenario's)"),
    prefix_caching: Optional[bool] = typer.Option(None, "--prefix-caching/--no-prefix-caching",
                                                  help="override the scenario's execution.prefix_caching"),
    fmt: str = typer.Option("table", "--format", help="table | json"),
):
    """Plain serving of one workload by one replica of the base model, as `vllm bench serve` reports it.

    Example: specsim simulate serve-workload cpu-smollm2 --bench-serve "vllm bench serve --random-input-len 512
    --random-output-len 64 --random-prefix-len 256 --request-rate 1 --num-prompts 200"
    """
    import json

    from simulator.engines.serving.bench_workload import serve_scenario

    if fmt not in ("table", "json"):
        raise InputError(None, "--format", f"expected table or json (got {fmt!r})")
    check_requests(requests, 2)
    _check_seed(seed)
    out = serve_scenario(scenario, bench_serve, hardware, tp, requests, seed, prefix_caching)
    if fmt == "json":
        typer.echo(json.dumps(out, indent=1, default=float))
        return
    for k, v in out.items():
        typer.echo(f"{k:<28} {v:.4g}" if isinstance(v, float) else f"{k:<28} {v}")
