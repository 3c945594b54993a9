"""Per-layer operator timings in Vidur's layout, measured on this machine with torch.

For a model shape (heads, KV heads, hidden, FFN width, vocab, gated MLP) and each (tokens per pass, TP
degree), one TP shard of one decoder layer's operators is timed on one device -- the same ops Vidur's
profiler times (the shared data's ``vidur-gpu-profiles``): ``emb`` (embedding lookup), ``input_layernorm``,
``attn_pre_proj`` (QKV), ``attn_rope``, ``attn_post_proj`` (O), ``post_attention_layernorm``,
``mlp_up_proj`` (gate+up), ``mlp_act`` (SiLU x up), ``mlp_down_proj``, ``add`` (residual). Times are in ms
(min/max/mean/median/std over repeats, CUDA-synchronised on GPU) and written as
``OUT/compute/<gpu>/<org>/<model>/mlp.csv`` with Vidur's columns, so ``specsim import vidur OUT``
reads our own numbers exactly as it reads the public A100/A40 profiles, and the GPU fits compare them in
one table. A provenance file ``op_bench.json`` (hardware, torch version, dtype, date, shapes) sits beside it.

    specsim measure op-bench --model meta-llama/Llama-2-7b-hf --out OUT [--tokens 1,2,...] [--tp 1,2,4]
"""

from __future__ import annotations

import datetime as _dt
import json
import statistics
import sys
import time
from pathlib import Path

# Vidur's model shapes (read off the shared data's vidur-gpu-profiles: n_head, n_kv_head, n_embd, n_expanded_embd,
# vocab_size, use_gated_mlp)
SHAPES = {
    "meta-llama/Llama-2-7b-hf": (32, 32, 4096, 11008, 32768, True),
    "meta-llama/Meta-Llama-3-8B": (32, 8, 4096, 14336, 128256, True),
    "meta-llama/Llama-2-70b-hf": (64, 8, 8192, 28672, 32768, True),
    "codellama/CodeLlama-34b-Instruct-hf": (64, 8, 8192, 22016, 32000, True),
    "tiny/test-2l": (4, 2, 256, 512, 1024, True),  # CPU dry runs only
}
OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj", "post_attention_layernorm",
       "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
STATS = ("min", "max", "mean", "median", "std")
DEFAULT_TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 768, 1024, 1536, 2048)


def _timer(device):
    import torch

    if device.type == "cuda":
        def run(fn, repeats):
            out = []
            for _ in range(repeats):
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                torch.cuda.synchronize()
                out.append(a.elapsed_time(b))
            return out
    else:
        def run(fn, repeats):
            out = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                out.append((time.perf_counter() - t0) * 1e3)
            return out
    return run


def time_layer_ops(shape, tokens: int, tp: int, device, dtype, repeats: int, warmup: int = 3) -> dict[str, list[float]]:
    """ms per call of every op of one TP shard of one layer at ``tokens`` tokens per pass."""
    import torch

    heads, kv_heads, h, ffn, vocab, gated = shape
    d = h // heads
    hq, hkv = heads // tp, max(-(-kv_heads // tp), 1)
    f = ffn // tp
    g = torch.Generator(device="cpu").manual_seed(0)
    mk = lambda *s: (torch.randn(*s, generator=g) * 0.02).to(device=device, dtype=dtype)  # noqa: E731
    x = mk(tokens, h)
    emb_w = mk(vocab // tp, h)
    ids = torch.randint(0, vocab // tp, (tokens,), generator=g).to(device)
    w_qkv, w_o = mk((hq + 2 * hkv) * d, h), mk(h, hq * d)
    w_up, w_down = mk((2 if gated else 1) * f, h), mk(h, f)
    norm_w = torch.ones(h, device=device, dtype=dtype)
    q = mk(tokens, hq, d)
    k = mk(tokens, hkv, d)
    cos, sin = mk(tokens, 1, d), mk(tokens, 1, d)
    up = mk(tokens, (2 if gated else 1) * f)
    act_in = mk(tokens, f)

    def rms():
        var = x.float().pow(2).mean(-1, keepdim=True)
        return (x.float() * torch.rsqrt(var + 1e-6)).to(dtype) * norm_w

    def rot(t):
        t1, t2 = t[..., : d // 2], t[..., d // 2:]
        return torch.cat((-t2, t1), dim=-1)

    def rope():
        return q * cos + rot(q) * sin, k * cos + rot(k) * sin

    def act():
        if gated:
            a, b = up.chunk(2, dim=-1)
            return torch.nn.functional.silu(a) * b
        return torch.nn.functional.silu(up)

    fns = {
        "emb": lambda: torch.nn.functional.embedding(ids, emb_w),
        "input_layernorm": rms,
        "attn_pre_proj": lambda: x @ w_qkv.T,
        "attn_rope": rope,
        "attn_post_proj": lambda: mk_o @ w_o.T,
        "post_attention_layernorm": rms,
        "mlp_up_proj": lambda: x @ w_up.T,
        "mlp_act": act,
        "mlp_down_proj": lambda: act_in @ w_down.T,
        "add": lambda: x + x,
    }
    mk_o = mk(tokens, hq * d)
    run = _timer(device)
    out = {}
    with torch.inference_mode():
        for op in OPS:
            run(fns[op], warmup)
            out[op] = run(fns[op], repeats)
    return out


def bench(model: str, tokens, tps, device: str = "auto", dtype: str = "bfloat16", repeats: int = 20) -> list[dict]:
    import torch

    if model not in SHAPES:
        from simulator.errors import InputError

        raise InputError(None, "--model", f"unknown shape {model!r} (known: {', '.join(SHAPES)})")
    dev = torch.device("cuda" if device == "auto" and torch.cuda.is_available() else ("cpu" if device == "auto" else device))
    dt = getattr(torch, dtype)
    shape = SHAPES[model]
    rows = []
    for tp in tps:
        if shape[0] % tp:
            continue
        for n in tokens:
            t = time_layer_ops(shape, n, tp, dev, dt, repeats)
            row = {}
            for op in OPS:
                v = t[op]
                row.update({f"time_stats.{op}.min": min(v), f"time_stats.{op}.max": max(v),
                            f"time_stats.{op}.mean": statistics.fmean(v), f"time_stats.{op}.median": statistics.median(v),
                            f"time_stats.{op}.std": statistics.pstdev(v)})
            row.update(n_head=shape[0], n_kv_head=shape[1], n_embd=shape[2], n_expanded_embd=shape[3],
                       vocab_size=shape[4], use_gated_mlp=shape[5], num_tokens=n, num_tensor_parallel_workers=tp)
            rows.append(row)
            print(f"{model} tp={tp} tokens={n}: qkv {row['time_stats.attn_pre_proj.median']:.4f} ms, "
                  f"up {row['time_stats.mlp_up_proj.median']:.4f} ms", file=sys.stderr)
    return rows


def write_op_bench(model: str, out: Path, tokens: list[int], tps: list[int], device: str, dtype: str, repeats: int,
                   command: str) -> Path:
    """Time ``model``'s layer ops (:func:`bench`) and write ``OUT/compute/<gpu>/<org>/<model>/mlp.csv`` and
    ``OUT/op_bench.json`` (provenance); returns the CSV's path."""
    import pandas as pd
    import torch

    from calibrate.measure.hardware import detect_hardware
    from simulator.catalog.hardware import catalog_hardware
    from simulator.inputs.loading import write_atomic

    hw = detect_hardware()
    gpu = catalog_hardware(hw.get("gpu_name"), hw.get("device")) or "unknown-gpu"
    rows = bench(model, tokens, tps, device, dtype, repeats)
    org, name = model.split("/", 1)
    csv = Path(out) / "compute" / gpu.split("-")[0] / org / name / "mlp.csv"
    write_atomic(csv, pd.DataFrame(rows).to_csv(index=False))
    write_atomic(Path(out) / "op_bench.json", json.dumps({
        "hardware": hw, "catalog_hardware": gpu, "torch": torch.__version__, "dtype": dtype, "model_shape": model,
        "tokens": tokens, "tp": tps, "repeats": repeats, "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "command": command}, indent=2))
    return csv
