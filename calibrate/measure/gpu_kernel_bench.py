"""GPU kernel bench, round two: bf16 and FP8 GEMMs at the released models' shapes, grouped-GEMM MoE layers, and
device memory as the driver and torch report it.

Runs on the lent GPU with torch alone (``python3 calibrate/measure/gpu_kernel_bench.py PLAN OUT``; the plan and the
model's predictions of every point come first, from ``specsim measure kernel-plan``, made on this side and committed
before the device call). Times are CUDA-graph replays timed by CUDA events
(:func:`calibrate.measure.gpu_step_bench.time_point`), the median over the plan's repeats; a CPU dry run (the plan's
``allow_cpu``) times one call each, to test the plumbing only.

Ops (one JSON line each in OUT/records.jsonl, written as measured; OUT/run.json: provenance, what ran how, skips):

- ``gemm``: x[m, k] @ w[n, k]^T in bf16;
- ``gemm_fp8``: the same with e4m3 operands through ``torch._scaled_mm``, bf16 out; ``scales`` per-tensor
  (``tensor``) or per-row / per-column (``rowwise``, where the installed torch accepts them: refused points are listed
  as skipped with torch's reason);
- ``grouped``: one MoE layer's routed experts (gated: gate and up [2I, H], down [H, I]) for T tokens routed top-k over
  E experts round-robin (every expert hit gets T k / hits rows, as a balanced router gives): ``torch._grouped_mm``
  where the installed torch has it (``impl: grouped_mm``), else one GEMM chain per hit expert (``impl: loop``: launch
  costs the fused kernels do not pay, stated in the record);
- ``grouped_fp8``: the same layer with e4m3 experts and activations cast to e4m3 in the pass:
  ``torch._scaled_grouped_mm`` where accepted, else a ``torch._scaled_mm`` chain per hit expert (``impl`` says which,
  and why);
- ``memory``: ``torch.cuda.mem_get_info`` (free, total), ``nvidia-smi``'s total, what one captured CUDA graph of a
  decode-sized GEMM chain reserves, and the peak allocation of a profile-like pass over ``tokens`` tokens (one
  dense layer's GEMMs and activations).
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import sys
import time

try:  # imported (tests, tools): the package
    from calibrate.measure.gpu_step_bench import cpu_time, smi, start, time_point
except ImportError:  # run as a script on the device (torch only, the project not importable): the sibling file
    import importlib.util as _util

    _spec = _util.spec_from_file_location(
        "gpu_step_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_step_bench.py"))
    _step = _util.module_from_spec(_spec)
    _spec.loader.exec_module(_step)
    cpu_time, smi, start, time_point = _step.cpu_time, _step.smi, _step.start, _step.time_point


def _gemm_fn(torch, p: dict, dev: str):
    x = torch.randn(p["m"], p["k"], device=dev, dtype=torch.bfloat16)
    w = torch.randn(p["n"], p["k"], device=dev, dtype=torch.bfloat16)
    return lambda: x @ w.t()


def _fp8_fn(torch, p: dict, dev: str):
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise RuntimeError("this torch has no torch._scaled_mm / float8_e4m3fn")
    f8 = torch.float8_e4m3fn
    x = torch.randn(p["m"], p["k"], device=dev).to(f8)
    w = torch.randn(p["n"], p["k"], device=dev).to(f8)
    if p.get("scales", "tensor") == "rowwise":
        sa = torch.ones(p["m"], 1, device=dev, dtype=torch.float32)
        sb = torch.ones(1, p["n"], device=dev, dtype=torch.float32)
    else:
        sa = torch.ones((), device=dev, dtype=torch.float32)
        sb = torch.ones((), device=dev, dtype=torch.float32)
    wt = w.t()  # column-major second operand, as _scaled_mm requires
    return lambda: torch._scaled_mm(x, wt, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)


def experts_hit(tokens: int, experts: int, topk: int) -> int:
    """Distinct experts a balanced (round-robin) router hits with ``tokens`` tokens of top-``topk``."""
    return min(experts, tokens * topk)


def _grouped_fn(torch, p: dict, dev: str) -> tuple:
    """(callable, impl) of one MoE layer's routed experts (module docstring)."""
    T, E, k, H, I = p["tokens"], p["experts"], p["topk"], p["hidden"], p["inter"]
    hit = experts_hit(T, E, k)
    rows = -(-T * k // hit)  # rows per hit expert (ceil): the balanced router's even split
    bf = torch.bfloat16
    w13 = torch.randn(hit, 2 * I, H, device=dev, dtype=bf)
    w2 = torch.randn(hit, H, I, device=dev, dtype=bf)
    x = torch.randn(hit * rows, H, device=dev, dtype=bf)
    gm = getattr(torch, "_grouped_mm", None)
    if gm is not None and dev == "cuda":
        offs = torch.arange(rows, hit * rows + 1, rows, device=dev, dtype=torch.int32)

        def run():
            h = gm(x, w13.transpose(1, 2), offs=offs)
            g, u = h[:, :I], h[:, I:]
            return gm(torch.nn.functional.silu(g) * u, w2.transpose(1, 2), offs=offs)
        try:
            run()
            return run, "grouped_mm"
        except Exception:  # noqa: BLE001 - the installed torch refuses the shapes: the loop below, stated
            pass
    xs = x.view(hit, rows, H)

    def loop():
        out = []
        for e in range(hit):
            h = xs[e] @ w13[e].t()
            out.append((torch.nn.functional.silu(h[:, :I]) * h[:, I:]) @ w2[e].t())
        return out
    return loop, "loop"


def _memory(torch, p: dict, dev: str) -> dict:
    """The memory figures of a ``memory`` point (module docstring)."""
    out = {"op": "memory"}
    free, total = torch.cuda.mem_get_info()
    out.update(free_bytes=free, total_bytes=total, smi_total=smi("memory.total"))
    H, I, n = p["hidden"], p["inter"], p["tokens"]
    bf = torch.bfloat16
    w = [torch.randn(3 * H, H, device=dev, dtype=bf), torch.randn(2 * I, H, device=dev, dtype=bf),
         torch.randn(H, I, device=dev, dtype=bf)]
    x1 = torch.randn(p.get("graph_batch", 256), H, device=dev, dtype=bf)

    def chain(x):
        h = x @ w[1].t()
        return (torch.nn.functional.silu(h[:, :I]) * h[:, I:]) @ w[2].t() + (x @ w[0].t())[:, :H]
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        chain(x1)
    torch.cuda.current_stream().wait_stream(st)
    # the snapshot after the warm-up and with the cache emptied: a capture empties the allocator's cache itself, so
    # a snapshot taken before that would count the cache it releases
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before, free_before = torch.cuda.memory_reserved(), torch.cuda.mem_get_info()[0]
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        chain(x1)
    torch.cuda.synchronize()
    out["graph_reserved_bytes"] = torch.cuda.memory_reserved() - before
    out["graph_driver_bytes"] = free_before - torch.cuda.mem_get_info()[0]  # the pool and the graph itself
    del g
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    chain(torch.randn(n, H, device=dev, dtype=bf))
    torch.cuda.synchronize()
    out["profile_pass_peak_bytes"] = torch.cuda.max_memory_allocated() - base
    out["profile_tokens"] = n
    return out


def _grouped_fp8_fn(torch, p: dict, dev: str) -> tuple:
    """(callable, impl) of the layer of :func:`_grouped_fn` with e4m3 experts (per-expert, per-row scales) and its
    activations cast to e4m3 in the pass (vLLM's dynamic quantisation; the scales held at one: timing only):
    ``torch._scaled_grouped_mm`` where the installed torch has it and accepts the shapes, else one ``torch._scaled_mm``
    chain per hit expert (``impl: loop``, with torch's reason for refusing the grouped call)."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise RuntimeError("this torch has no torch._scaled_mm / float8_e4m3fn")
    T, E, k, H, I = p["tokens"], p["experts"], p["topk"], p["hidden"], p["inter"]
    hit = experts_hit(T, E, k)
    rows = -(-T * k // hit)
    f8, bf, f32 = torch.float8_e4m3fn, torch.bfloat16, torch.float32
    silu = torch.nn.functional.silu
    w13 = torch.randn(hit, 2 * I, H, device=dev).to(f8)
    w2 = torch.randn(hit, H, I, device=dev).to(f8)
    x = torch.randn(hit * rows, H, device=dev, dtype=bf)
    sgm = getattr(torch, "_scaled_grouped_mm", None)
    why = "no torch._scaled_grouped_mm" if sgm is None else "torch._scaled_grouped_mm: CUDA only"
    if sgm is not None and dev == "cuda":
        offs = torch.arange(rows, hit * rows + 1, rows, device=dev, dtype=torch.int32)
        sx = torch.ones(hit * rows, device=dev, dtype=f32)
        s13 = torch.ones(hit, 2 * I, device=dev, dtype=f32)
        s2 = torch.ones(hit, H, device=dev, dtype=f32)

        def run():
            h = sgm(x.to(f8), w13.transpose(1, 2), sx, s13, offs=offs, out_dtype=bf)
            a = (silu(h[:, :I]) * h[:, I:]).to(f8)
            return sgm(a, w2.transpose(1, 2), sx, s2, offs=offs, out_dtype=bf)
        try:
            run()
            return run, "scaled_grouped_mm"
        except Exception as e:  # noqa: BLE001 - the installed torch refuses: the loop below, with its reason
            why = f"scaled_grouped_mm refused: {type(e).__name__}: {str(e)[:120]}"
    one = torch.ones((), device=dev, dtype=f32)
    xs = x.view(hit, rows, H)

    def loop():
        out = []
        for e in range(hit):
            h = torch._scaled_mm(xs[e].to(f8), w13[e].t(), scale_a=one, scale_b=one, out_dtype=bf)
            a = (silu(h[:, :I]) * h[:, I:]).to(f8)
            out.append(torch._scaled_mm(a, w2[e].t(), scale_a=one, scale_b=one, out_dtype=bf))
        return out
    return loop, f"loop ({why})"


def _run_point(torch, p: dict, dev: str, repeats: int) -> dict:
    op = p["op"]
    if op == "memory":
        if dev != "cuda":
            raise RuntimeError("memory points need a CUDA device")
        return {**p, **_memory(torch, p, dev)}
    impl = None
    if op == "gemm":
        fn = _gemm_fn(torch, p, dev)
    elif op == "gemm_fp8":
        fn = _fp8_fn(torch, p, dev)
    elif op == "grouped":
        fn, impl = _grouped_fn(torch, p, dev)
    elif op == "grouped_fp8":
        fn, impl = _grouped_fp8_fn(torch, p, dev)
    else:
        raise ValueError(f"unknown op {op!r}")
    r = time_point(torch, fn, graph=True, repeats=repeats) if dev == "cuda" else \
        {"time_s": cpu_time(fn), "times_s": [], "replays": 1}
    return {**p, **r, **({"impl": impl} if impl else {})}


def main(argv: list[str]) -> int:
    import torch

    started = start(argv, {"grouped_mm": hasattr(torch, "_grouped_mm"), "scaled_mm": hasattr(torch, "_scaled_mm")}, 300)
    if started is None:
        return 2
    torch, plan, dev, deadline, recs = started
    for p in plan["points"]:
        if time.monotonic() > deadline:
            recs.run["skipped"].append({**p, "why": "time"})
            continue
        try:
            r = _run_point(torch, p, dev, int(plan.get("repeats", 5)))
        except Exception as e:  # noqa: BLE001 - OOM or a kernel refusal: recorded, the next point runs
            recs.run["skipped"].append({**p, "why": f"{type(e).__name__}: {str(e)[:200]}"})
            if dev == "cuda":
                torch.cuda.empty_cache()
            continue
        recs.write(r)
        print(json.dumps({k: r.get(k) for k in ("id", "op", "time_s", "impl")}), flush=True)
    recs.run["finished_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    recs.save_run()
    recs.rec.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
