"""Serving-representative torch microbenchmark: static KV cache + CUDA graphs.

A naive eager ``generate`` loop is launch-bound and would teach the cost model the wrong
decode cost. Here every decode step runs on a pre-allocated :class:`transformers.StaticCache`
with fixed shapes, and on CUDA the step is captured once as a CUDA graph
(``torch.compile(mode="reduce-overhead")``), as vLLM does. Ops, one record per point
(same ``microbench.jsonl`` contract as :mod:`calibrate.measure.microbench`):

- ``decode``  batch B at context L: median per-step time over ``decode_tokens`` steps
  (``new_tokens`` = 1 per record: the fit reads one decode pass);
- ``prefill`` N new tokens on C cached ones, batch 1 (``score`` = 70 new tokens);
- ``verify``  gamma + 1 new tokens on a cached context L.

Besides the records, ``bandwidth.json`` gives, per (context, batch), the achieved memory
bandwidth of a decode step — (weights streamed + KV read) / time — and its fraction of the
device's datasheet bandwidth (catalog hardware matched from the GPU name; ``cpu`` on CPU).
Random weights (``dummy_model_dir``): timing does not depend on the weights' values.
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from calibrate.measure.hardware import detect_hardware
from calibrate.measure.run_directory import RunDirectory
from calibrate.contracts.trace_schema import SCHEMA_VERSION
from simulator.errors import InputError

SCORE_NEW_TOKENS = 70
FILL_CHUNK = 2048  # tokens per untimed pass that fills a cache before a timed point


@dataclass
class StaticPlan:
    contexts: list[int] = field(default_factory=lambda: [512, 2048, 8192, 16384])
    batches: list[int] = field(default_factory=lambda: [1, 4, 16])
    new_tokens: list[int] = field(default_factory=lambda: [70, 512, 2048])
    cached_tokens: list[int] = field(default_factory=lambda: [0, 4096])
    gammas: list[int] = field(default_factory=lambda: [1, 2, 4, 8])
    decode_tokens: int = 32
    repeats: int = 3


def catalog_hardware_for(hw: dict) -> str:
    """The catalog hardware whose datasheet figures apply to the detected device."""
    from simulator.catalog.hardware import catalog_hardware

    if hw.get("device") != "cuda":
        return "cpu"
    name = catalog_hardware(hw.get("gpu_name"), hw.get("device"))
    if name is not None:
        return name
    raise InputError(None, "hardware", f"no catalog entry for GPU {hw.get('gpu_name')!r}; add it to simulator/catalog/hardware.yaml")


class StaticRunner:
    """One model with a static KV cache; the decode step optionally graph-captured."""

    def __init__(self, arch: str, layers: int | None, dtype: str, device: str, compile_mode: str, max_len: int):
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        from calibrate.measure.model_cache import dummy_model_dir

        self.torch = torch
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        if self.device == "cuda" and not torch.cuda.is_available():
            raise InputError(None, "--device", "cuda requested but torch sees no CUDA device")
        self.dtype = getattr(torch, dtype, None)
        if not isinstance(self.dtype, torch.dtype):
            raise InputError(None, "--dtype", f"unknown torch dtype {dtype!r}")
        cfg = AutoConfig.from_pretrained(dummy_model_dir(arch, layers=layers))
        torch.manual_seed(0)
        with torch.device(self.device):
            self.model = AutoModelForCausalLM.from_config(cfg, dtype=self.dtype).eval()
        self.config, self.max_len, self.vocab = cfg, max_len, cfg.vocab_size
        if compile_mode == "auto":
            compile_mode = "reduce-overhead" if self.device == "cuda" else "none"
        self.compile_mode = compile_mode
        self._step = self._forward
        if compile_mode != "none":
            # every (batch, cache length) point is a new shape: past dynamo's default limit of 8 recompilations
            # the step would silently run eager, launch-bound -- the decode cost this bench exists to avoid
            for knob in ("recompile_limit", "cache_size_limit"):
                if hasattr(torch._dynamo.config, knob):
                    setattr(torch._dynamo.config, knob, 256)
            self._step = torch.compile(self._forward, mode=compile_mode, fullgraph=True)

    def _forward(self, ids, cache, positions, keep: int = 0):
        """One pass; ``keep`` > 0: logits of the last ``keep`` positions only (vLLM samples from the last)."""
        return self.model(input_ids=ids, past_key_values=cache, cache_position=positions, use_cache=True,
                          logits_to_keep=keep).logits

    def _fill(self, cache, batch: int, upto: int, chunk: int = FILL_CHUNK) -> None:
        """Put ``upto`` tokens per sequence into the cache, in chunks: one pass over batch x 16k tokens would
        hold activations of tens of GB (untimed: only the cache it leaves matters)."""
        for lo in range(0, upto, chunk):
            hi = min(upto, lo + chunk)
            self._forward(self._ids(batch, hi - lo), cache, self.torch.arange(lo, hi, device=self.device), keep=1)

    def _sync(self):
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def _ids(self, batch: int, n: int):
        g = self.torch.Generator(device="cpu").manual_seed(batch * 1_000_003 + n)
        return self.torch.randint(100, max(200, min(self.vocab, 30000)), (batch, n), generator=g).to(self.device)

    def _cache(self, batch: int, length: int):
        from transformers import StaticCache

        return StaticCache(config=self.config, max_cache_len=length)

    def decode_step_times(self, context: int, batch: int, steps: int) -> list[float]:
        """Per-step wall times of `steps` decode passes at context ~`context` (after warm-up)."""
        torch = self.torch
        warm = 3
        cache = self._cache(batch, context + steps + warm + 1)
        with torch.inference_mode():
            self._fill(cache, batch, context)
            nxt = self._ids(batch, 1)
            times = []
            for i in range(warm + steps):
                pos = torch.tensor([context + i], device=self.device)
                self._sync()
                t0 = time.perf_counter()
                logits = self._step(nxt, cache, pos)
                nxt = logits[:, -1:].argmax(-1)
                self._sync()
                if i >= warm:
                    times.append(time.perf_counter() - t0)
        return times

    def pass_times(self, cached: int, passes: list[tuple[int, int]], repeats: int) -> list[list[float]]:
        """Per (new, keep) of ``passes``: the wall times of ``repeats`` passes over ``new`` tokens on ``cached``
        tokens (batch 1) with the logits of the last ``keep`` positions (1: a prefill or a score samples one token;
        gamma + 1: a verification), after one untimed warm-up pass. Each pass gets a freshly filled cache:
        transformers' StaticCache writes at its own running length, not at the positions it is given, so a
        pass cannot be repeated on the same cache."""
        torch = self.torch
        out = []
        with torch.inference_mode():
            for new, keep in passes:
                ids = self._ids(1, new)
                pos = torch.arange(cached, cached + new, device=self.device)
                times = []
                for i in range(repeats + 1):
                    cache = self._cache(1, cached + new + 1)
                    self._fill(cache, 1, cached)
                    self._sync()
                    t0 = time.perf_counter()
                    self._forward(ids, cache, pos, keep=keep)
                    self._sync()
                    if i:
                        times.append(time.perf_counter() - t0)
                out.append(times)
        return out


def _is_oom(e: BaseException) -> bool:
    return type(e).__name__ == "OutOfMemoryError" or "out of memory" in str(e).lower()


def _model(arch: str, layers: int | None):
    """The benchmarked catalog model at its depth (``layers``: a CPU-sized cut)."""
    from simulator.catalog import get_model

    m = get_model(arch)
    return m.cut(layers) if layers else m


def point_bytes(arch: str, layers: int | None, batch: int, length: int, new_tokens: int, bytes_per_param: float) -> float:
    """Device memory a point needs beyond the weights: its KV cache of ``length`` tokens per sequence (the cost
    model's bytes per token) and the float32 logits of ``new_tokens`` per sequence, plus 25% for activations and
    the graph pool."""
    m = _model(arch, layers)
    return 1.25 * batch * (length * m.kv_bytes_per_token(1, bytes_per_param) + 4.0 * new_tokens * m.vocab)


def _record(op, batch, new, cached, gamma, times) -> dict:
    return {"schema_version": SCHEMA_VERSION, "kind": "microbench", "op": op, "model": "base", "batch": batch,
            "new_tokens": new, "cached_tokens": cached, "gamma": gamma,
            "wall_time_s": statistics.median(times), "wall_times_s": list(times), "repeats": len(times)}


def decode_bytes(arch: str, layers: int | None, context: int, batch: int, bytes_per_param: float) -> float:
    """Bytes a decode pass streams per the cost model: weights (layers + LM head) + KV read."""
    m = _model(arch, layers).model_copy(update={"bytes_per_param": bytes_per_param})
    return m.weight_bytes_read + batch * (context + 1) * m.kv_bytes_per_token(1, bytes_per_param)


def _manifest(arch: str, plan: StaticPlan, layers: int | None, dtype: str, r: StaticRunner, hw: dict) -> dict:
    import torch

    return {
        "schema_version": SCHEMA_VERSION, "kind": "microbench",
        "created_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"), "engine": "torch-static",
        "engine_version": f"torch {torch.__version__}", "hardware": hw,
        "models": {"base": {"arch": arch, "layers": layers or r.config.num_hidden_layers, "weights": "random"}},
        "dtype": dtype, "tensor_parallel": 1, "system": "", "gamma": 0, "threshold": 0.0, "first_n": 0,
        "budget_tokens": 0, "score_mode": "", "sampling": {"temperature": 0.0}, "seed": 0,
        "dataset": "", "num_requests": 0, "command": "static-bench",
        "options": {"plan": asdict(plan), "compile": r.compile_mode, "device": r.device},
    }


@dataclass
class _Points:
    """Runs the plan's points one by one, skipping (and listing in ``skipped``) a point that cannot fit, runs out of
    memory, or comes after its share of the time budget."""

    r: StaticRunner
    arch: str
    layers: int | None
    bpp: float
    max_seconds: float | None
    log: Callable[[str], None]
    t_start: float = field(default_factory=time.perf_counter)
    skipped: list[dict] = field(default_factory=list)

    def measure(self, what: dict, batch: int, length: int, new: int, fn, share: float = 1.0):
        """fn() unless the point cannot fit or its share of the time budget is spent (then it is listed in
        ``skipped``): decode points get the first 60% of ``max_seconds``, so prefill and verify always get time."""
        import torch

        r, skipped, log, max_seconds = self.r, self.skipped, self.log, self.max_seconds
        if max_seconds is not None and time.perf_counter() - self.t_start > share * max_seconds:
            skipped.append({**what, "reason": f"time budget of {share * max_seconds:.0f} s spent"})
            return None
        if r.device == "cuda":
            free = torch.cuda.mem_get_info()[0]
            need = point_bytes(self.arch, self.layers, batch, length, new, self.bpp)
            if need > 0.9 * free:
                skipped.append({**what, "reason": f"needs ~{need / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"})
                log(f"skip {what}: {skipped[-1]['reason']}")
                return None
        try:
            return fn()
        except (RuntimeError, MemoryError) as e:
            if not _is_oom(e):
                raise
            skipped.append({**what, "reason": "out of memory"})
            log(f"skip {what}: out of memory")
            if r.device == "cuda":
                torch.cuda.empty_cache()
            return None


def _decode_points(pts: _Points, plan: StaticPlan, rd: RunDirectory, peak_bw: float, hw_name: str) -> list[dict]:
    """Every (context, batch) decode point; the bandwidth each achieved."""
    r, bandwidth = pts.r, []
    for ctx in plan.contexts:
        for b in plan.batches:
            t = pts.measure({"op": "decode", "context": ctx, "batch": b}, b, ctx + plan.decode_tokens + 4, 1,
                            lambda: r.decode_step_times(ctx, b, plan.decode_tokens), share=0.6)
            if t is None:
                continue
            med = statistics.median(t)
            rd.write("microbench", _record("decode", b, 1, ctx, 0, t))
            moved = decode_bytes(pts.arch, pts.layers, ctx, b, pts.bpp)
            frac = moved / med / peak_bw
            bandwidth.append({"context": ctx, "batch": b, "step_s": med, "bytes": moved,
                              "achieved_bytes_per_s": moved / med, "fraction_of_datasheet": frac})
            pts.log(f"decode ctx={ctx} batch={b}: {med * 1e3:.2f} ms/step, {frac:.0%} of {hw_name} bandwidth")
    return bandwidth


def _prefill_and_verify_points(pts: _Points, plan: StaticPlan, rd: RunDirectory) -> None:
    r = pts.r
    news = plan.new_tokens + [SCORE_NEW_TOKENS]
    for c in plan.cached_tokens:
        ts = pts.measure({"op": "prefill", "new_tokens": news, "cached_tokens": c}, 1, max(news) + c + 1, 1,
                         lambda: r.pass_times(c, [(n, 1) for n in news], plan.repeats))
        for new, t in zip(news, ts or []):
            rd.write("microbench", _record("score" if new == SCORE_NEW_TOKENS else "prefill", 1, new, c, 0, t))
            pts.log(f"prefill new={new} cached={c}: {statistics.median(t) * 1e3:.2f} ms")
    for ctx in plan.contexts:
        g_max = max(plan.gammas)
        ts = pts.measure({"op": "verify", "context": ctx, "gamma": plan.gammas}, 1, ctx + g_max + 2, g_max + 1,
                         lambda: r.pass_times(ctx, [(g + 1, g + 1) for g in plan.gammas], plan.repeats))
        for g, t in zip(plan.gammas, ts or []):
            rd.write("microbench", _record("verify", 1, g + 1, ctx, g, t))


def run_static_bench(arch: str, plan: StaticPlan, out: str | Path, layers: int | None = None, dtype: str = "bfloat16",
                     device: str = "auto", compile_mode: str = "auto", log=print, max_seconds: float | None = None) -> dict:
    """Measure every op of ``plan``; write ``microbench.jsonl`` and ``bandwidth.json`` in ``out``.

    A point whose KV cache would not fit the device's free memory is skipped before it runs, one that runs out
    of memory anyway is skipped when it does, and past ``max_seconds`` the remaining points are skipped: each is
    listed in ``bandwidth.json`` (``skipped``) and the run still ends with what it measured."""
    from simulator.catalog import get_hardware

    if compile_mode not in ("auto", "none", "reduce-overhead", "default", "max-autotune"):
        raise InputError(None, "--compile", f"expected auto, none, reduce-overhead, default or max-autotune (got {compile_mode!r})")
    max_len = max(plan.contexts + [c + n for c in plan.cached_tokens for n in plan.new_tokens]) + plan.decode_tokens + 16
    r = StaticRunner(arch, layers, dtype, device, compile_mode, max_len)
    hw = detect_hardware()
    hw_name = catalog_hardware_for(hw)
    peak_bw = get_hardware(hw_name).memory_bandwidth_bytes_per_s
    import torch

    bpp = torch.finfo(r.dtype).bits / 8
    rd = RunDirectory.open(out, _manifest(arch, plan, layers, dtype, r, hw))
    pts = _Points(r, arch, layers, bpp, max_seconds, log)
    bandwidth: list[dict] = []
    try:
        bandwidth = _decode_points(pts, plan, rd, peak_bw, hw_name)
        _prefill_and_verify_points(pts, plan, rd)
    finally:
        rd.close()
    summary = {"arch": arch, "layers": layers or r.config.num_hidden_layers, "hardware": hw, "catalog_hardware": hw_name,
               "datasheet_bytes_per_s": peak_bw, "compile": r.compile_mode, "dtype": dtype, "decode": bandwidth,
               "skipped": pts.skipped, "seconds": round(time.perf_counter() - pts.t_start, 1)}
    path = Path(out) / "bandwidth.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(summary, indent=1))
    tmp.replace(path)
    return summary
