"""``validate capacity``, ``validate mixture`` and ``validate kernels``: each parses its options, calls one library
function (``validate.capacity``, ``validate.mixture``, ``validate.gpu_kernels``) and prints; the library is imported
inside the command."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from simulator.option_values import threshold_list_option
from simulator.output_contract import writes
from simulator.paths import shared


@writes(out="folder")
def validate_capacity_cmd(
    ctx: typer.Context,
    runs: list[Path] = typer.Argument(..., help="serve-systems Poisson run directories (SYSTEM/poisson-R)"),
    scenario: str = typer.Option(..., help="scenario YAML whose profiles come from other loads"),
    slo: str = typer.Option(..., help="SLO, e.g. 'p90_latency<=12s'"),
    threshold: Optional[list[int]] = threshold_list_option(),
    requests: int = typer.Option(300, help="simulated requests per run (the capacity search's run length)"),
    seed: int = typer.Option(0, help="simulation seed"),
    out: Path = typer.Option(..., help="report folder"),
):
    """Measured capacity (a real Poisson sweep) against specsim simulate capacity's prediction and interval.

    Example: specsim validate capacity RUN_DIR... --scenario scenarios/cpu-serve-capacity.yaml --slo "p90_latency<=12s" --out R"""
    from simulator.command_line import command_line
    from validate.capacity import run

    run([str(r) for r in runs], scenario, slo, threshold, requests, seed, out, command_line(ctx))


@writes(out="folder")
def validate_mixture_cmd(
    out: Path = typer.Option(..., help="report folder (report.md, folds.csv, summary.csv), e.g. out/mixture-validation"),
    aggregates: Path = typer.Option(None, help="per-problem aggregates JSON (default: the shared AIME traces')"),
    data: Path = typer.Option(None, help="per-step SpecReason traces (default: the shared ones)"),
) -> None:
    """Leave-one-problem-out validation of the workload mixture (~3 min): tokens, kept share, latency per held-out problem.

    Example: specsim validate mixture --out out/mixture-validation"""
    from validate.mixture import run

    typer.echo(f"leave-one-problem-out: fitting one mixture per held-out problem, writing {out} ...")
    _, _, text = run(out, aggregates, data)
    typer.echo(text)


@writes(out="folder")
def validate_kernels_cmd(
    ctx: typer.Context,
    out: Path = typer.Option(..., help="folder for report.md and figures.csv"),
    vidur: str = typer.Option(str(shared("vidur-gpu-profiles")), help="Vidur data/profiling-style folder"),
    aiconfigurator: str = typer.Option(str(shared("aiconfigurator-vllm-kernels")),
                                       help="AIConfigurator systems/data-style folder"),
) -> None:
    """Held-out figures of the GPU kernel model against the catalog priors and a constant-efficiency roofline.

    Example: specsim validate kernels --out out/gpu-validation"""
    import sys

    from validate.gpu_kernels import load_inputs, run, summary, write_report
    from simulator.command_line import command_line

    df, inputs = load_inputs(vidur, aiconfigurator)
    fig = run(df, log=lambda s: print(s, file=sys.stderr))
    path = write_report(fig, out, command_line(ctx), inputs)
    typer.echo(summary(fig).to_string(index=False, float_format=lambda v: f"{100 * v:.1f}%"))
    typer.echo(f"wrote {path}")
