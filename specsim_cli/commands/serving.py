"""The commands of the serving ladders and the burst study: ``measure serve-bench``, ``measure serve-specreason``,
``measure compare-serve``, ``measure burst-probe`` and ``import bench-serve``. Each parses its options, calls one library
function (``calibrate.measure.serve_bench``, ``serve_specreason``, ``import_bench_serve``, ``calibrate.fit.burst_probe``)
and prints; the library is imported inside the command."""

from __future__ import annotations

import json

from pathlib import Path
from typing import Optional

import typer

from calibrate.fit.burst_probe import GPUSTACK, GROUPS, VARIANTS
from simulator.errors import InputError
from simulator.option_values import threshold_option
from simulator.output_contract import writes


@writes(out="runs")
def serve_bench_cmd(
    model: Path = typer.Option(Path(".cache/models/smollm2-135m-instruct"), help="model folder served by vllm serve"),
    concurrency: str = typer.Option("1,2,4,8", help="closed-loop levels (vllm bench serve --max-concurrency); '' for none"),
    request_rate: str = typer.Option("", help="open-loop levels, req/s (vllm bench serve --request-rate), comma-separated"),
    num_prompts: int = typer.Option(16, help="requests per level"),
    input_len: int = typer.Option(64, help="random prompt tokens per request"),
    output_len: int = typer.Option(32, help="generated tokens per request (EOS ignored)"),
    seed: int = typer.Option(0, help="vllm bench serve --seed (prompts)"),
    draft: Optional[Path] = typer.Option(None, help="draft model folder: speculative decoding (vLLM draft_model)"),
    gamma: int = typer.Option(0, help="speculative tokens per iteration (with --draft)"),
    dtype: str = typer.Option("float32", help="vllm serve --dtype"),
    max_model_len: int = typer.Option(2048, help="vllm serve --max-model-len"),
    prefix_caching: bool = typer.Option(False, help="vLLM prefix caching across requests"),
    enforce_eager: bool = typer.Option(True, help="vllm serve --enforce-eager (no graph capture/compile)"),
    server_arg: list[str] = typer.Option([], "--server-arg", help="extra vllm serve argument; repeatable, e.g. --server-arg=--tensor-parallel-size=2"),
    bench_arg: list[str] = typer.Option([], "--bench-arg", help="extra vllm bench serve argument; repeatable"),
    startup_timeout: float = typer.Option(600.0, help="seconds to wait for /health"),
    level_timeout: float = typer.Option(1800.0, help="seconds one level's vllm bench serve may run"),
    out: Path = typer.Option(..., help="run folder: provenance.json, server.log, one folder per level (complete ones kept)"),
) -> None:
    """Real `vllm serve` + `vllm bench serve` over a ladder of levels; /metrics per level; imports each result.

    Example: specsim measure serve-bench --concurrency 1,2,4,8 --num-prompts 24 --input-len 64 --output-len 32 --out out/serve-bench/cpu"""
    import shlex
    import sys

    from calibrate.measure.serve_bench import BenchSpec, ServerSpec, parse_levels, run_ladder

    if num_prompts < 1 or input_len < 1 or output_len < 1:
        raise InputError(None, "--num-prompts", "--num-prompts, --input-len and --output-len must be >= 1")
    if (draft is None) != (gamma == 0):
        raise InputError(None, "--gamma", "give --draft DIR with --gamma K >= 1, or neither")
    if gamma < 0:
        raise InputError(None, "--gamma", f"must be >= 0 (got {gamma})")
    for p, name in ((model, "--model"), (draft, "--draft")):
        if p is not None and not (p / "config.json").is_file():
            raise InputError(str(p), name, "expected a model folder with config.json (specsim measure prepare-models)")
    levels = parse_levels(concurrency, request_rate)
    server = ServerSpec(model=str(model), served_name=model.name, dtype=dtype, max_model_len=max_model_len,
                        draft=str(draft) if draft else None, gamma=gamma, prefix_caching=prefix_caching,
                        enforce_eager=enforce_eager, extra_args=list(server_arg))
    bench = BenchSpec(input_len=input_len, output_len=output_len, num_prompts=num_prompts, seed=seed,
                      extra_args=list(bench_arg))
    command = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    res = run_ladder(server, bench, levels, out, startup_timeout, level_timeout,
                     log=lambda m: typer.echo(m, err=True), command=command)
    for r in res:
        typer.echo(("kept  " if r.skipped else "new   ") + r.summary_line)
    typer.echo(f"wrote {out} ({sum(not r.skipped for r in res)} new level(s), {sum(r.skipped for r in res)} kept); "
               f"validate: specsim validate serving {out}/*/ --profile PROFILE --out REPORT")

@writes(out="folder")
def import_bench_serve_cmd(
    results: list[Path] = typer.Argument(..., help="vllm bench serve result JSONs (--save-result --save-detailed)"),
    out: Optional[Path] = typer.Option(None, help="folder: one serving-run folder per JSON (named after it); "
                                                  "without it, only check and summarise"),
) -> None:
    """Check `vllm bench serve` result JSONs and write them in the serving-run format (every file checked first).

    Example: specsim import bench-serve results/*.json --out out/imported"""
    from calibrate.measure.import_bench_serve import read_bench_json, summary_line, write_run

    parsed = [read_bench_json(p) for p in results]  # every input checked before anything is written
    names = [p.stem for p in results]
    if out is not None and len(set(names)) != len(names):
        raise InputError(None, "RESULTS", "two result files share a name: import them into separate --out folders")
    for p, r in zip(results, parsed):
        typer.echo(summary_line(r))
        if out is not None:
            typer.echo(f"wrote {write_run(p, out / p.stem)}")


@writes(out="runs")
def serve_specreason_cmd(
    system: str = typer.Option("specreason", help="vanilla-base | vanilla-small | specdecode | specreason | specreason-decode"),
    base: Path = typer.Option(Path(".cache/models/smollm2-135m-instruct"), help="base model folder (its own server)"),
    small: Path = typer.Option(Path(".cache/models/smollm2-135m-instruct-draft6l"), help="small model folder (its own server)"),
    draft: Path = typer.Option(None, help="draft for the base server's speculative decoding (specdecode, specreason-decode)"),
    gamma: int = typer.Option(0, help="speculative tokens per iteration (with --draft)"),
    threshold: float = threshold_option(7.0),
    score_mode: str = typer.Option("greedy", help="greedy | mean"),
    first_n: int = typer.Option(0, help="first n steps generated by the base model"),
    budget: int = typer.Option(8192, help="thinking-token budget (kept steps)"),
    step_max_tokens: int = typer.Option(512, help="max tokens per step"),
    temperature: float = typer.Option(0.0, help="sampling temperature of the steps (0 = greedy)"),
    top_p: float = typer.Option(1.0, help="nucleus sampling of the steps"),
    dataset: str = typer.Option("gsm_symbolic", help="gsm_symbolic | gsm8k | jsonl:PATH"),
    requests: int = typer.Option(1, help="number of requests (problems)"),
    seed: int = typer.Option(0, help="run seed (request i uses seed + i)"),
    dtype: str = typer.Option("float32", help="vllm serve --dtype of both servers"),
    max_model_len: int = typer.Option(4096, help="vllm serve --max-model-len of both servers"),
    warmup: int = typer.Option(0, help="extra problems run first and discarded"),
    startup_timeout: float = typer.Option(600.0, help="seconds to wait for each server's /health"),
    out: Path = typer.Option(..., help="run directory (resumed if it exists)"),
) -> None:
    """A system over two `vllm serve` processes (HTTP, prefix caching on): traces in the run-directory contract.

    Example: specsim measure serve-specreason --system specreason --threshold 6 --requests 3 --out out/serve-specreason/t6"""
    from calibrate.measure.serve_specreason import run_system_http
    from calibrate.measure.engine import Sampling
    from calibrate.measure.orchestrator import RunConfig

    cfg = RunConfig(system=system, threshold=threshold, first_n=first_n, budget_tokens=budget,
                    step_max_tokens=step_max_tokens, score_mode=score_mode,
                    sampling=Sampling(temperature=temperature, top_p=top_p))
    run_system_http(cfg, str(base), str(small), str(draft) if draft else None, gamma, dataset, requests, seed, out,
                    dtype, max_model_len, warmup, startup_timeout, log=lambda m: typer.echo(m, err=True),
                    on_request=lambda r: typer.echo(f"request {r['request_id']}: {r['num_steps']} steps "
                                                    f"({r['num_small_steps']} kept from small), {r['latency_s']:.2f} s",
                                                    err=True))
    typer.echo(f"wrote {out}")

def compare_serve_cmd(
    http_run: Path = typer.Argument(..., help="a serve-specreason run directory"),
    inproc_run: Path = typer.Argument(..., help="a `specsim measure run --engine vllm` directory of the same system and problems"),
) -> None:
    """Server-mode vs in-process: time per call kind and the HTTP overhead per call.

    Example: specsim measure compare-serve tests/data/serve_specreason/http-t6b tests/data/serve_specreason/inproc-t6b"""
    from calibrate.measure.serve_specreason import compare_runs

    typer.echo(compare_runs(http_run, inproc_run))


BURST_TABLES = ("engines", "intake", "two-stage", "prefill", "typical", "what-if", "admission")


def burst_probe(
    table: str = typer.Argument(..., help=" | ".join(BURST_TABLES)),
    released: Path = typer.Option(GPUSTACK, help="folder of serving_benchmarks.csv (GPUStack's released tables)"),
    fits: Optional[Path] = typer.Option(None, help="two-stage: host terms per held-out GPU (a fits-gpu.json of "
                                                   "`specsim validate serving --released`); default: the catalog's"),
    group: Optional[list[str]] = typer.Option(None, help=f"run groups, repeatable (default: all of {', '.join(GROUPS)})"),
    variant: Optional[list[str]] = typer.Option(None, help=f"assumptions, repeatable (default: all of "
                                                  f"{', '.join(VARIANTS)})"),
):
    """The burst study's tables (docs/serving-model.md): engines (B_eff = output tok/s x median ITL per engine),
    intake (each engine's time per request in the docs' 4-token bursts, its TTFT at 4 users), two-stage (each doc's
    bursts with the front end its own 4-token burst shows, beside the fitted serial one), prefill (the
    H100/H200 prefill rows' fraction of peak), typical (each burst's mean and median TPOT over requests and the
    share of the run its first tokens spread over, measured and predicted), what-if (the burst rows' bias under each
    assumption), admission (each burst's measured / predicted TTFT, TPOT and throughput beside its doc's 4-token
    burst's, and their rank correlation).

    Example: specsim measure burst-probe engines"""
    import pandas as pd

    from calibrate.fit.burst_probe import engines_table, intake_table, released_runs

    for name, got, known in (("table", [table], BURST_TABLES), ("--group", group or [], GROUPS),
                             ("--variant", variant or [], VARIANTS)):
        bad = [g for g in got if g not in known]
        if bad:
            raise InputError(None, name, f"expected one of {', '.join(known)} (got {', '.join(bad)})")
    if not (Path(released) / "serving_benchmarks.csv").is_file():
        raise InputError(str(released), None, "expected a folder holding serving_benchmarks.csv")
    pd.set_option("display.width", 250)
    if table == "engines":
        print(engines_table(released).round(2).to_string(index=False))
        return
    if table == "intake":
        print(intake_table(released).round(3).to_string(index=False))
        return
    runs, _ = released_runs(released)
    print(_burst_model_table(table, runs, fits, group, variant))


def _burst_model_table(table: str, runs, fits: Optional[Path], group, variant) -> str:
    """The burst tables that predict runs (:func:`burst_probe`), as text."""
    from calibrate.fit import burst_probe as bp

    if table == "two-stage":
        t = bp.two_stage_table(runs, _read_fits(fits))
        return (bp.two_stage_summary(t).round(1).to_string(index=False) if len(t) else
                bp.NO_PROBE)
    if table == "prefill":
        return bp.prefill_table(runs).round(3).to_string(index=False)
    if table == "typical":
        t = bp.typical_table(runs)
        return t.round(2).to_string(index=False) + "\n\n" + bp.typical_summary(t).round(2).to_string(index=False)
    if table == "admission":
        t = bp.admission_table(runs)
        if not len(t):
            return bp.NO_PROBE
        return t.round(3).to_string(index=False) + "\n\n" + bp.admission_summary(t).round(2).to_string(index=False)
    return bp.what_if(runs, group or list(GROUPS), variant or list(VARIANTS)).round(1).to_string(index=False)


def _read_fits(fits: Optional[Path]) -> dict | None:
    """A fits-gpu.json ({gpu: {version: host terms}}) or None; an InputError naming the file otherwise."""
    if fits is None:
        return None
    try:
        fitted = json.loads(Path(fits).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise InputError(str(fits), None, f"expected a fits-gpu.json ({e})") from None
    if not isinstance(fitted, dict) or not all(isinstance(v, dict) for v in fitted.values()):
        raise InputError(str(fits), None, "expected {gpu: {version: host terms}}")
    return fitted
