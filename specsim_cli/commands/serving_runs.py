"""``specsim measure serve-run`` (one engine, fixed-length generations: :mod:`calibrate.measure.serving_run`) and
``specsim measure serve-systems`` (whole systems, the small and base engines colocated:
:mod:`calibrate.measure.serving_systems`): concurrent requests on the real vLLM engine, closed loop of N users and/or
Poisson arrivals. The engines are imported when a command runs."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from simulator.errors import InputError
from simulator.option_values import system_list_option, threshold_option
from simulator.output_contract import writes


def _arrivals(users: str, poisson_rate: list[float], seed: int) -> tuple:
    """The levels: a closed loop per user count of ``users`` (comma-separated), then a Poisson loop per rate."""
    from calibrate.measure.serving_run import ClosedLoop, PoissonLoop

    try:
        levels = [int(v) for v in users.split(",") if v.strip()]
    except ValueError:
        raise InputError(None, "--users", f"expected comma-separated integers (got {users!r})") from None
    return tuple([ClosedLoop(u) for u in levels] + [PoissonLoop(r, seed) for r in poisson_rate])


@writes(out="runs")
def serve_run_cmd(
    base: Path = typer.Option(Path(".cache/models/smollm2-135m-instruct"), help="base model folder"),
    users: str = typer.Option("1,2,4,8", help="closed-loop levels: comma-separated user counts ('' for none)"),
    poisson_rate: list[float] = typer.Option([], "--poisson-rate", help="open-loop Poisson rate (req/s); repeatable"),
    requests: int = typer.Option(16, help="measured requests per level"),
    min_tokens: int = typer.Option(16, help="smallest generation length"),
    max_tokens: int = typer.Option(64, help="largest generation length"),
    seed: int = typer.Option(0, help="problems, generation lengths and Poisson instants"),
    warmup: int = typer.Option(8, help="discarded warm-up requests (closed loop at the largest level)"),
    dtype: str = typer.Option("float32", help="vLLM dtype of the model"),
    max_model_len: int = typer.Option(2048, help="vLLM max_model_len (prompt + output tokens)"),
    prefix_caching: bool = typer.Option(False, help="vLLM prefix caching across requests"),
    min_prompt_tokens: int = typer.Option(160, help="prepend worked examples to shorter prompts (CPU GEMM shapes)"),
    draft: Optional[Path] = typer.Option(None, help="draft model folder: speculative decoding (vLLM draft_model)"),
    gamma: int = typer.Option(0, help="speculative tokens per iteration (with --draft)"),
    out: Path = typer.Option(..., help="campaign folder: one run directory per level (complete ones kept)"),
) -> None:
    """Concurrent requests on the real vLLM engine (closed loop of N users / Poisson), per-step trace.

    Example: specsim measure serve-run --users 1,2,4,8 --poisson-rate 1.5 --requests 24 --out out/serving-cpu"""
    from calibrate.measure.serving_run import ServeConfig, run_serving

    arr = _arrivals(users, poisson_rate, seed)
    cfg = ServeConfig(base=str(base), arrivals=arr, requests=requests, min_tokens=min_tokens, max_tokens=max_tokens,
                      seed=seed, warmup=warmup, dtype=dtype, max_model_len=max_model_len,
                      prefix_caching=prefix_caching, min_prompt_tokens=min_prompt_tokens,
                      draft=str(draft) if draft else "", gamma=gamma)
    cfg.check()
    from calibrate.measure.engine import check_draft, describe_model_dir, read_model_config

    read_model_config(base)
    if draft:
        check_draft(describe_model_dir(base, False), draft, gamma, False)
    command = "specsim " + " ".join(sys.argv[1:])
    for d in run_serving(cfg, out, command=command, log=typer.echo):
        typer.echo(str(d))


@writes(out="runs")
def serve_systems_cmd(
    base: Path = typer.Option(Path(".cache/models/smollm2-135m-instruct"), help="base model folder"),
    small: Path = typer.Option(Path(".cache/models/smollm2-135m-instruct-draft6l"), help="small model folder"),
    system: list[str] = system_list_option(["vanilla-base", "specreason"], help="vanilla-base | vanilla-small | "
                                           "specreason | specdecode | specreason-decode"),
    gamma: int = typer.Option(0, help="draft tokens per iteration of specdecode / specreason-decode (small model drafts)"),
    users: str = typer.Option("1,2,4", help="closed-loop levels: comma-separated user counts ('' for none)"),
    poisson_rate: list[float] = typer.Option([], "--poisson-rate", help="open-loop Poisson rate (req/s); repeatable"),
    requests: int = typer.Option(12, help="measured requests per (system, level)"),
    threshold: float = threshold_option(7.0),
    score_mode: str = typer.Option("greedy", help="greedy digit | mean (logprob-weighted)"),
    budget: int = typer.Option(48, help="thinking-token budget (checked between steps)"),
    step_max_tokens: int = typer.Option(24, help="largest step"),
    seed: int = typer.Option(0, help="problems, generation lengths and arrival instants"),
    warmup: int = typer.Option(4, help="discarded warm-up requests per system (closed loop at the largest level)"),
    dtype: str = typer.Option("float32", help="vLLM dtype of both models"),
    out: Path = typer.Option(..., help="campaign folder: OUT/SYSTEM/LEVEL run directories (complete ones kept)"),
) -> None:
    """Concurrent requests through whole systems (SpecReason: small + base engines colocated), per-call trace.

    Example: specsim measure serve-systems --system vanilla-base --system specreason --users 1,2 --out out/serving-systems"""
    from calibrate.measure.serving_systems import SystemServeConfig, run_system_serving

    arr = _arrivals(users, poisson_rate, seed)
    cfg = SystemServeConfig(base=str(base), small=str(small), systems=tuple(system), arrivals=arr, requests=requests,
                            threshold=threshold, score_mode=score_mode, budget_tokens=budget,
                            step_max_tokens=step_max_tokens, seed=seed, warmup=warmup, dtype=dtype, gamma=gamma)
    cfg.check()
    from calibrate.measure.engine import read_model_config

    read_model_config(base)
    if any(s != "vanilla-base" for s in cfg.systems):
        read_model_config(small)
    command = "specsim " + " ".join(sys.argv[1:])
    for d in run_system_serving(cfg, out, command=command, log=typer.echo):
        typer.echo(str(d))
