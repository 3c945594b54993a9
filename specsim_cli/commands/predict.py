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
                                     system_list_option, threshold_list_option, user_list)
from simulator.output_contract import ForceOpt, writes
from simulator.report.report_table import COLUMNS_HELP


def check_seed(seed: int | None) -> None:
    if seed is not None and not 0 <= seed < 2**63:
        raise InputError(None, "--seed", f"must be an integer >= 0 (got {seed})")


# Options shared by several commands (declared once).
# --force: simulator.output_contract (the one output contract; @writes adds it where a command lacks it)
AccuracyFloorOpt = Annotated[Optional[str], typer.Option(
    "--accuracy-floor", help="recommend only configurations at least this accurate: vanilla-base (default: within "
    "--accuracy-margin of it), a number in [0, 1], or none")]
AccuracyMarginOpt = Annotated[Optional[float], typer.Option(
    "--accuracy-margin", help="allowed accuracy loss vs the reference system, within its 95% interval (default 0.05)")]
# the grid's hardware and TP instead of the scenario's (whatif, capacity, report): grid_overrides reads them
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", help="run on this catalog hardware instead of the "
                                                    "scenario's (specsim list hardware), e.g. h100-sxm or h100-sxm,h200")]


def tp_option():
    return int_list_option(None, "--tp", concept="tp", lo=1, hi=1024, help="tensor-parallel degrees instead of the "
                           "scenario's", example="1,2")


@writes(out="table")
def whatif(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    system: Optional[list[str]] = system_list_option(),
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
    check_seed(seed)
    from simulator.report.report_table import check_columns, job, write_output

    check_columns(columns, extra=("engine", "steps", "requests", "accuracy", "accuracy_lo", "accuracy_hi"))
    kwargs = dict(systems=system, gammas=gamma, thresholds=threshold, first_ns=first_n, engine=engine, requests=requests, seed=seed,
                  grid_overrides=grid_overrides(hardware, tp), accuracy_floor=accuracy_floor, accuracy_margin=accuracy_margin)
    with job(f"whatif {scenario}" + (f": {engine} engine" if engine else "") + (f", {requests} requests per point" if requests else "")):
        df, title, meta = whatif_from_cli(scenario, **kwargs)
    write_output(df, fmt, out, title, meta, columns)
    if fmt == "table":
        from simulator.report.report_table import print_line

        print_line(meta["best"])


def grid_overrides(hardware: str | None, tp: list[int] | None) -> dict | None:
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


@writes(out="folder")
def report(
    scenario: str = typer.Argument(..., help="scenario YAML (path or name in scenarios/)"),
    out: Path = typer.Option(..., help="output folder (created; an existing non-empty one needs --force)"),
    slo: Optional[str] = typer.Option(None, help="SLO, e.g. 'p99_latency<=300s' (default: the scenario's slo, else "
                                      "p99 latency <= 3x vanilla-base's single-request latency)"),
    system: Optional[list[str]] = system_list_option(),
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
    check_seed(seed)
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
                                  interval=interval_spec(ci_target, max_replications), systems=system,
                                  gammas=gamma, thresholds=threshold, progress=j.progress, bench_serve=bench_serve,
                                  grid_overrides=grid_overrides(hardware, tp))
    print(line)
    for text in excluded:  # never leave a configuration out in silence
        print(f"Excluded: {text}.")
    wrote(path, f"markdown; PNGs and CSVs beside it in {out}")


def interval_spec(ci_target: float | None, max_replications: int | None):
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
    dtype: Optional[str] = typer.Option(None, "--dtype", help="weight dtype: bf16 | fp8 | int4 (default: the model's "
                                        "own: a config.json's quantization_config, else bf16)"),
    draft: Optional[str] = typer.Option(None, "--draft", help="draft: a catalog model, head[:LAYERS] (EAGLE-style), eagle3[:LAYERS] (EAGLE-3 as built), block[:LAYERS] (gamma drafts in one pass) or mtp (the model's own MTP module, one per drafted token)"),
    ep: int = typer.Option(1, "--ep", help="expert parallelism of a mixture of experts: 1 (experts sharded by TP) or TP (whole experts per GPU)"),
    pp: int = typer.Option(1, "--pp", help="pipeline-parallel stages (layers split over pp stages of --tp GPUs each)"),
    dp: int = typer.Option(1, "--dp", help="data-parallel attention ranks of a mixture of experts (--ep = tp x dp); --batch is the replica's"),
    gamma: Optional[int] = typer.Option(None, "--gamma", help="draft tokens per speculative iteration (with --draft)"),
    profile: Optional[Path] = typer.Option(None, "--profile", help="cost profile YAML (default: the catalog's priors)"),
    engine_version: Optional[str] = typer.Option(None, "--engine-version", help="the vLLM version whose host terms "
                                                 "and start-up memory accounting price the step, e.g. 0.11 (default: "
                                                 "the newest fitted; specsim list engines)"),
    async_scheduling: Optional[bool] = typer.Option(None, "--async-scheduling/--no-async-scheduling",
                                                    help="vLLM --async-scheduling (default: the version's own)"),
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
        from simulator.cost.cost_profile import load_profile

        prof = load_profile(profile)
    from simulator.catalog.engine_hosts import ServingEngine

    stated = engine_version is not None or async_scheduling is not None
    serving = ServingEngine(version=engine_version, async_scheduling=async_scheduling) if stated else None
    df, meta = pass_time_table(model, hardware, tp, batch, new_tokens, context, dtype, draft, gamma, prof, ep, pp, dp,
                               serving)
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

    from simulator.studies.serve_workload import serve_scenario

    if fmt not in ("table", "json"):
        raise InputError(None, "--format", f"expected table or json (got {fmt!r})")
    check_requests(requests, 2)
    check_seed(seed)
    out = serve_scenario(scenario, bench_serve, hardware, tp, requests, seed, prefix_caching)
    if fmt == "json":
        typer.echo(json.dumps(out, indent=1, default=float))
        return
    errors = out.pop("model_error")
    for k, v in out.items():
        typer.echo(f"{k:<28} {v:.4g}" if isinstance(v, float) else f"{k:<28} {v}")
    if errors:
        from simulator.catalog.serving_accuracy import error_block

        typer.echo(error_block(errors))
