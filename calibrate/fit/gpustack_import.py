"""GPUStack performance lab's released `vllm bench serve` table as serving runs to predict.

``engine-measurements/gpustack-performance-lab/serving_benchmarks.csv`` in the shared data (README there): one row per
benchmark block, with the server command above it. :func:`released_runs` turns each vLLM row into a
:class:`ReleasedRun` -- catalog model and weight dtype, GPU, TP / EP, vLLM version, the server's batching knobs
(``--max-num-batched-tokens``, ``--max-num-seqs``, ``--gpu-memory-utilization``, ``--async-scheduling``,
``--kv-cache-dtype``), the load (requests, per-request input / output tokens = totals / requests, a burst or N
closed-loop users) and the measured figures -- or a counted reason it is skipped (a model the catalog lacks,
pipeline parallelism, speculative decoding, vLLM 0.17's ``--performance-mode``, a block copied between docs, ...). The predictions: :mod:`validate.serving.released`."""

from __future__ import annotations

from simulator.paths import shared

import re
import shlex
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
from pydantic import ValidationError

from simulator.catalog import get_hardware, get_model
from simulator.catalog.engine_hosts import ServingEngine
from simulator.cost.execution import Execution
from simulator.errors import InputError

GPUSTACK = shared("engine-measurements", "gpustack-performance-lab")
TABLE = "serving_benchmarks.csv"
COLUMNS = ("file", "hardware", "engine_versions", "section", "serve_cmd", "block_comment", "max_concurrency", "requests", "in_tok",
           "out_tok", "duration_s", "out_tps", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
           "mean_itl_ms", "median_itl_ms")
# served model id (lower case, quantisation suffix removed) -> catalog model
MODELS = {"qwen/qwen3-14b": "qwen3-14b", "qwen/qwen3-32b": "qwen3-32b",
          "qwen/qwen3-235b-a22b-instruct-2507": "qwen3-235b-a22b", "openai/gpt-oss-20b": "gpt-oss-20b",
          "openai/gpt-oss-120b": "gpt-oss-120b", "deepseek-ai/deepseek-r1-0528": "deepseek-r1",
          "zai-org/glm-4.5-air": "glm-4.5-air", "zai-org/glm-4.6": "glm-4.6", "qwen/qwen3.5-9b": "qwen3.5-9b",
          "qwen/qwen3.5-35b-a3b": "qwen3.5-35b-a3b", "deepseek-ai/deepseek-v3.2": "deepseek-v3.2"}
GPUS = (("a100", "a100-80gb"), ("h100", "h100-sxm"), ("h200", "h200"))
# Docs whose hardware line says "H100 SXM" while their own runs were measured on a 2 TB/s part: their memory-bound
# decode steps run at an H100 PCIe's bandwidth, not an SXM's (the evidence, model-free and from the step model:
# validate/serving/gpu_labels.py; its figures: docs/results.md "Which H100"). Read as the GPU they were measured on
# unless ``as_labelled``; the multi-GPU H100 docs keep their SXM label (their decode steps fit an SXM), and so does
# gpt-oss-20b's since its vLLM generation's MoE terms price its steps (as labelled -8%, as a PCIe +21%).
MEASURED_ON = {"qwen3-14b__h100.md": "h100-pcie", "qwen3-32b__h100.md": "h100-pcie"}
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9


@dataclass(frozen=True)
class ReleasedRun:
    """One released `vllm bench serve` result and the server it ran against."""

    row: int  # row of the table (0-based)
    doc: str
    section: str
    engine: str
    version: str
    gpu: str  # the GPU it was measured on (:data:`MEASURED_ON`)
    labelled_gpu: str  # the GPU its doc's hardware line names
    model: str
    weight_dtype: str
    kv_dtype: str
    tp: int
    ep: int
    max_num_batched_tokens: int
    max_num_seqs: int
    gpu_memory_utilization: float
    async_scheduling: bool
    requests: int
    input_tokens: int
    output_tokens: int
    concurrency: int | None  # None: a burst (every request at once)
    dataset: str  # "sharegpt" (prompts and replies of varied length: :func:`dataset_of`) or "random" (fixed lengths)
    measured: dict  # out_tps, mean_ttft_ms, median_ttft_ms, mean_tpot_ms, median_tpot_ms, mean_itl_ms, median_itl_ms,
    # duration_s
    output_cap: int | None = None  # random dataset: the requests' max_tokens (:func:`output_caps`); None: unknown
    serve_cmd: str = ""  # the server command above its block, as the doc gives it

    @property
    def server_options(self) -> list[str]:
        """The serve command's arguments after the served model (``vllm serve <model> ...``)."""
        return serve_args(self.serve_cmd)[3:]

    @property
    def key(self) -> str:
        return f"{self.doc}#{self.row}"

    def peak_matmul_s(self, tokens: float, gpu: str | None = None) -> float:
        """Seconds ``tokens`` take through the model's active weights (2 x active parameters per token, attention
        left out) at the dense BF16 peak of ``gpu`` (default: the run's) over its TP shards: a floor on their time."""
        from simulator.catalog import get_hardware, get_model

        flops = 2.0 * get_model(self.model).active_params * float(tokens)
        return flops / (self.tp * get_hardware(gpu or self.gpu).dense_bf16_flops_per_s)


def serve_args(cmd: str) -> list[str]:
    """A doc's server command split as a shell would (a JSON option, e.g. --speculative-config {...}, kept whole)."""
    return shlex.split(cmd.replace("{", "'{").replace("}", "}'")) if "{" in cmd else shlex.split(cmd)


def _option(args: list[str], *names: str) -> str | None:
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


ROUND_LENGTHS = tuple([128 * 2**k for k in range(12)] + [1000 * k for k in range(1, 129)])


def round_length(tokens_per_request: float) -> int | None:
    """The round length a random-dataset run asked for (``--random-input-len``: 128, 2000, 4000, ...) when the
    per-request mean is within 2% of one (the served model's tokenizer moves it a little: 1996-2000), else None."""
    near = min(ROUND_LENGTHS, key=lambda r: abs(tokens_per_request - r))
    return near if abs(tokens_per_request - near) <= 0.02 * near else None


def dataset_of(comment, input_per_request: float, output_per_request: float) -> str:
    """Which `vllm bench serve` dataset a row ran, which the table does not say (the doc's benchmark command does):
    "sharegpt" when the comment above the block says so, "random" when it names a random input length; otherwise
    ShareGPT when the per-request mean prompt is no round length (vLLM's random dataset asks for exact token counts,
    so its means sit at 128, 2000, 4000, ...; ShareGPT's depend on the tokenizer: 214-219 here) and both means fit
    vLLM's ShareGPT filter (:data:`SHAREGPT_MAX_PROMPT`, :data:`SHAREGPT_MAX_TOTAL`)."""
    from simulator.engines.serving.bench_workload import SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_TOTAL

    text = str(comment).lower() if isinstance(comment, str) else ""
    if "sharegpt" in text:
        return "sharegpt"
    if re.search(r"random \d+k? input", text):
        return "random"
    is_round = round_length(input_per_request) is not None
    fits = input_per_request <= SHAREGPT_MAX_PROMPT and input_per_request + output_per_request <= SHAREGPT_MAX_TOTAL
    return "sharegpt" if fits and not is_round else "random"


def _version(text: str) -> str | None:
    m = re.search(r"vLLM:?\s*v?(\d+\.\d+(?:\.\d+)?)", str(text))
    if not m:
        return None
    major_minor = ".".join(m.group(1).split(".")[:2])
    return major_minor


def _limits(args: list[str], gpu: str, version: str, tp: int) -> Execution | str:
    """The serve command's scheduler limits, what it leaves unset vLLM's defaults on that GPU (``Execution.for_device``,
    the one rule); the reason to skip the row where vLLM itself would refuse them at start-up."""
    try:
        ex = Execution.from_limits(_option(args, "--max-num-batched-tokens"), _option(args, "--max-num-seqs"))
        return ex.for_device(get_hardware(gpu), ServingEngine(version=version), world_size=tp)
    except ValidationError as e:
        return f"scheduler limits vLLM refuses ({e.errors()[0]['msg'].removeprefix('Value error, ')})"


def _parse(i: int, r, as_labelled: bool = False) -> ReleasedRun | str:
    """The run of table row ``i`` or the reason it is skipped (its GPU: :data:`MEASURED_ON`'s unless ``as_labelled``)."""
    cmd = str(r.serve_cmd) if isinstance(r.serve_cmd, str) else ""
    if not cmd.startswith("vllm serve"):
        return "not a vLLM server" if cmd else "no server command above the block"
    args = serve_args(cmd)
    served = args[2]
    low = served.lower()
    dtype = "bf16"
    for suffix, dt in (("-fp8", "fp8"), ("-awq", "int4")):
        if low.endswith(suffix):
            low, dtype = low[: -len(suffix)], dt
    model = MODELS.get(low)
    if model is None:
        return f"model not in the catalog ({served.split('/')[-1].split('-FP8')[0]})"
    doc_model = str(r.file).split("__")[0].replace(".x", "")  # glm-4.x: GLM-4.5 / 4.6
    if doc_model not in low.replace("-instruct-2507", "").replace("-0528", ""):
        return "server command names another model than its doc"
    if dtype == "bf16":  # no -FP8 / -AWQ repository: the checkpoint's own (the catalog's: DeepSeek-R1 fp8)
        dtype = get_model(model).weight_dtype
    if _option(args, "--quantization", "-q") == "fp8":
        dtype = "fp8"
    if _option(args, "-pp", "--pipeline-parallel-size"):
        return "pipeline parallelism"
    if _option(args, "--speculative-config"):
        return "speculative decoding"
    if _option(args, "--performance-mode"):  # vLLM 0.17's preset: batching defaults this importer does not know
        return "--performance-mode (its batching defaults are not known here)"
    gpu = next((g for k, g in GPUS if k in str(r.hardware).lower()), None)
    if gpu is None:
        return f"GPU not mapped ({r.hardware})"
    labelled = gpu
    if not as_labelled:
        gpu = MEASURED_ON.get(str(r.file), gpu)
    version = _version(r.engine_versions)
    if version is None:
        return "no vLLM version stated"
    tp = int(_option(args, "-tp", "--tensor-parallel-size") or 1)
    ex = _limits(args, gpu, version, tp)
    if isinstance(ex, str):
        return ex
    kv = _option(args, "--kv-cache-dtype") or "auto"
    n = int(r.requests)
    conc = None if pd.isna(r.max_concurrency) or int(r.max_concurrency) >= n else int(r.max_concurrency)
    measured = {c: float(getattr(r, c)) for c in ("out_tps", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms",
                                                    "median_tpot_ms", "mean_itl_ms", "median_itl_ms",
                                                    "duration_s")}
    return ReleasedRun(
        row=i, doc=str(r.file), section=str(r.section), engine="vllm", version=version, gpu=gpu, labelled_gpu=labelled,
        model=model,
        weight_dtype=dtype, kv_dtype="fp8" if kv.startswith("fp8") else "bf16", tp=tp,
        ep=tp if "--enable-expert-parallel" in args else 1,
        max_num_batched_tokens=ex.max_num_batched_tokens, max_num_seqs=ex.max_num_seqs,
        gpu_memory_utilization=float(_option(args, "--gpu-memory-utilization") or DEFAULT_GPU_MEMORY_UTILIZATION),
        async_scheduling="--async-scheduling" in args, requests=n,
        input_tokens=max(1, round(float(r.in_tok) / n)), output_tokens=max(1, round(float(r.out_tok) / n)),
        concurrency=conc, dataset=dataset_of(r.block_comment, float(r.in_tok) / n, float(r.out_tok) / n),
        measured=measured, serve_cmd=cmd)


def output_caps(df: pd.DataFrame) -> dict[tuple[int, int], int]:
    """{(asked prompt length (:func:`round_length`), requests): max_tokens} of the table's random-dataset runs, which
    the table does not state (the docs' benchmark commands do): the largest mean output of any row with that prompt
    length and request count, every engine's (a run whose every request reached the cap; the docs' 128 / 2000 / 4000
    / 32000-token prompts give 4 / 100 / 200 / 100). A run below it ended some requests early (`vllm bench serve`
    does not ignore EOS unless told)."""
    n = df["requests"].astype(float)
    inp, out = df["in_tok"] / n, df["out_tok"] / n
    key = pd.DataFrame({"inp": [round_length(i) or -1 for i in inp], "req": n.astype(int), "out": out})
    key = key[[dataset_of(c, i, o) == "random" and k > 0 for c, i, o, k in zip(df["block_comment"], inp, out, key.inp)]]
    return {(int(i), int(r)): int(round(o)) for (i, r), o in key.groupby(["inp", "req"]).out.max().items()}


def released_runs(folder: Path | str = GPUSTACK, as_labelled: bool = False) -> tuple[list[ReleasedRun], Counter]:
    """(the table's vLLM rows as runs, skipped rows counted by reason). Duplicate rows (the same doc, command, load
    and figures: the docs repeat a baseline block in later sections) are kept once. ``as_labelled``: every run on the
    GPU its doc names (else :data:`MEASURED_ON`'s)."""
    path = Path(folder) / TABLE
    if not path.is_file():
        raise InputError(str(path), None, "released serving table not found (expected serving_benchmarks.csv)")
    df = pd.read_csv(path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise InputError(str(path), missing[0], f"column missing (expected {', '.join(COLUMNS)})")
    runs, skipped, seen = [], Counter(), set()
    caps = output_caps(df)
    for i, r in enumerate(df.itertuples(index=False)):
        out = _parse(i, r, as_labelled)
        if isinstance(out, str):
            skipped[out] += 1
            continue
        dup = (out.doc, r.serve_cmd, out.requests, out.input_tokens, out.output_tokens, out.concurrency,
               out.measured["out_tps"], out.measured["mean_tpot_ms"])
        if dup in seen:
            skipped["duplicate of an earlier row"] += 1
            continue
        seen.add(dup)
        if out.dataset == "random":
            out = replace(out, output_cap=caps.get((round_length(out.input_tokens) or -1, out.requests)))
        runs.append(out)
    # the same measured figures in two docs (glm-4.5-air's H100 doc repeats four of its A100 doc's blocks): a copy,
    # and which GPU measured it is unknown, so neither is kept
    figs = lambda r: tuple(r.measured[k] for k in ("out_tps", "mean_ttft_ms", "mean_tpot_ms", "mean_itl_ms"))  # noqa: E731
    docs: dict[tuple, set] = {}
    for r in runs:
        docs.setdefault(figs(r), set()).add(r.doc)
    copied = [r for r in runs if len(docs[figs(r)]) > 1]
    if copied:
        skipped["the same measured figures in another doc (a copy)"] += len(copied)
        runs = [r for r in runs if len(docs[figs(r)]) == 1]
    return runs, skipped
