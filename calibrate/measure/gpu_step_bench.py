"""Engine-level GPU step bench: one decoder step as a serving engine runs it, CUDA graph replayed.

Runs on the lent GPU with torch alone (no project import: ``python3 calibrate/measure/gpu_step_bench.py PLAN OUT``), so it
needs nothing carried. The plan (``calibrate.gpu_priors.step_plan``, made here from the catalog) gives each model's
shape and the points. Per model: random bf16 weights (timing does not depend on their values), one flat KV buffer
per layer viewed as [batch, kv_heads, length, head_dim] for each point, and a llama/qwen2 decoder written out in
torch ops: fused RMSNorm, fused QKV (+bias), rotary as one elementwise kernel per tensor, KV write at the step's
positions, attention by ``scaled_dot_product_attention`` over the cached + new keys (a point's ``attention``:
``sdpa`` torch's choice, GQA without copies; ``flash`` FlashAttention-2 forced; ``packed`` the query heads of each
KV head packed into one query block; ``causal`` a prefill's causal pass: the new block causal, the cached block
unmasked), O projection, SwiGLU MLP, final norm, LM head over the rows an engine samples (the last
token per sequence for a decode or prefill, all k+1 for a verification), argmax. A point's step is captured once as a
CUDA graph and replayed; its time is the median over ``repeats`` batches of replays, each batch timed by CUDA
events (so host time is not in it: this is the GPU part of an engine step; an engine adds its scheduler and
input preparation, which the cost model's t_step / t_seq carry from vLLM's own measurements).

Ops (one JSON line each in OUT/records.jsonl, written as measured):
- ``decode``: batch B, 1 new token each, context C;
- ``verify``: batch B, n = k+1 new tokens each, context C (speculative decoding's verification pass);
- ``prefill``: batch 1, n new tokens on C cached;
- ``head``: a 1-layer EAGLE-style draft head of the model's width (fusion fc 2H->H, one decoder layer with its
  own KV, the target's LM head), batch B, context C;
- ``decode_eager``: a decode point run without the graph (each step timed by events around the launches);
- ``sustained``: one step (``base``, default prefill) replayed back to back for ``seconds``: per-window step times and
  nvidia-smi's clock, power and temperature samples (does a long run slow down as the chip meets its limits?);
- ``gemm`` / ``copy``: the chip's achieved bf16 GEMM rate and device-to-device copy bandwidth.
OUT/run.json: GPU, driver, clocks, torch / CUDA versions, attention backend, what was skipped and why.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import os
import platform
import subprocess
import sys
import time


def smi(query: str) -> str | None:
    try:
        r = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                           text=True, timeout=20)
        return r.stdout.strip() or None
    except Exception:  # noqa: BLE001 - provenance is best effort
        return None


def provenance(torch) -> dict:
    d = {"date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
         "host": platform.node(), "python": sys.version.split()[0], "torch": torch.__version__,
         "cuda": torch.version.cuda, "device": "cuda" if torch.cuda.is_available() else "cpu"}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        d.update(gpu_name=p.name, gpu_memory_bytes=p.total_memory, sm_count=p.multi_processor_count,
                 cudnn=torch.backends.cudnn.version())
        for key, q in (("driver", "driver_version"), ("clocks_now", "clocks.sm,clocks.mem"),
                       ("clocks_max", "clocks.max.sm,clocks.max.mem"), ("power_limit", "power.limit"),
                       ("pstate", "pstate"), ("smi_name", "name")):
            d[key] = smi(q)
    return d


class Bench:
    def __init__(self, torch, spec: dict, dtype, device: str, kv_cap_tokens: int):
        self.t = torch
        self.s = spec
        self.dtype = dtype
        self.dev = device
        H, nh, kvh, D, I, V = (spec[k] for k in ("hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab"))
        self.H, self.nh, self.kvh, self.D, self.I, self.V = H, nh, kvh, D, I, V
        self.L = spec["layers"]
        q = nh * D + 2 * kvh * D
        g = torch.Generator(device=device).manual_seed(0)

        def w(*shape):
            return (torch.randn(*shape, generator=g, device=device, dtype=dtype) * 0.02)

        self.layers = []
        for _ in range(self.L):
            self.layers.append(dict(qkv=w(q, H), qkv_b=w(q) if spec.get("qkv_bias") else None, o=w(H, nh * D),
                                    gu=w(2 * I, H), down=w(H, I), n1=torch.ones(H, device=device, dtype=dtype),
                                    n2=torch.ones(H, device=device, dtype=dtype)))
        self.embed = w(V, H)
        self.lm_head = self.embed if spec.get("tie_embeddings") else w(V, H)
        self.norm = torch.ones(H, device=device, dtype=dtype)
        # draft head (EAGLE-1 style): fusion fc and one layer of its own
        self.head_fc = w(H, 2 * H)
        self.head_layer = dict(qkv=w(q, H), qkv_b=None, o=w(H, nh * D), gu=w(2 * I, H), down=w(H, I),
                               n1=torch.ones(H, device=device, dtype=dtype), n2=torch.ones(H, device=device, dtype=dtype))
        self.kv_cap = kv_cap_tokens
        per = kv_cap_tokens * kvh * D
        self.kbuf = [torch.empty(per, device=device, dtype=dtype) for _ in range(self.L)]
        self.vbuf = [torch.empty(per, device=device, dtype=dtype) for _ in range(self.L)]
        inv = 1.0 / (10000.0 ** (torch.arange(0, D, 2, device=device, dtype=torch.float32) / D))
        self.inv_freq = inv

    # ---- the model ------------------------------------------------------------------------------------------
    def _rms(self, x, w):
        # one fused kernel, as vLLM's RMSNorm
        return self.t.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def _rope(self, x, cos, sin):
        # one elementwise kernel per tensor: the cost of vLLM's fused rotary kernel (the values are not a rotation;
        # timing does not depend on them)
        return x * cos

    def _layer(self, x, lw, kc, vc, ctx, n, cos, sin):
        t = self.t
        F = t.nn.functional
        B = x.shape[0]
        nh, kvh, D = self.nh, self.kvh, self.D
        h = self._rms(x, lw["n1"])
        qkv = F.linear(h, lw["qkv"], lw["qkv_b"])
        q, k, v = qkv.split([nh * D, kvh * D, kvh * D], dim=-1)
        q = self._rope(q.view(B, n, nh, D), cos, sin).transpose(1, 2)
        k = self._rope(k.view(B, n, kvh, D), cos, sin).transpose(1, 2)
        kc[:, :, ctx:ctx + n] = k
        vc[:, :, ctx:ctx + n] = v.view(B, n, kvh, D).transpose(1, 2)
        if self.attention == "packed" and n > 1:
            # the n new tokens' query heads of one KV head packed into one query block (FA3's pack-GQA,
            # FlashInfer's decode): each KV head is read once per sequence, as in a decode; the causal mask among
            # the n new tokens is left out (timing only)
            g = nh // kvh
            qp = q.reshape(B, kvh, g * n, D)
            a = F.scaled_dot_product_attention(qp, kc[:, :, :ctx + n], vc[:, :, :ctx + n]).reshape(B, nh, n, D)
        elif self.attention == "causal" and n > 1:
            # a prefill's causal attention as engines run it (each new token sees the cached keys and the new ones
            # up to itself): the cached block without a mask plus the new block with a causal one, two kernels whose
            # work is the lower-right causal pass's; their outputs are summed, not merged (timing only)
            a = F.scaled_dot_product_attention(q, kc[:, :, ctx:ctx + n], vc[:, :, ctx:ctx + n], is_causal=True,
                                               enable_gqa=True)
            if ctx > 0:
                a = a + F.scaled_dot_product_attention(q, kc[:, :, :ctx], vc[:, :, :ctx], enable_gqa=True)
        elif self.attention == "flash":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                a = F.scaled_dot_product_attention(q, kc[:, :, :ctx + n], vc[:, :, :ctx + n], enable_gqa=True)
        else:
            a = F.scaled_dot_product_attention(q, kc[:, :, :ctx + n], vc[:, :, :ctx + n], enable_gqa=True)
        x = x + F.linear(a.transpose(1, 2).reshape(B, n, nh * D), lw["o"])
        h = self._rms(x, lw["n2"])
        g, u = F.linear(h, lw["gu"]).chunk(2, dim=-1)
        return x + F.linear(F.silu(g) * u, lw["down"])

    def _caches(self, B, length, layers):
        kvh, D = self.kvh, self.D
        need = B * length
        if need > self.kv_cap:
            raise MemoryError(f"{need} KV tokens > buffer of {self.kv_cap}")
        n = B * kvh * length * D
        return [(self.kbuf[i][:n].view(B, kvh, length, D), self.vbuf[i][:n].view(B, kvh, length, D))
                for i in range(layers)]

    def _rot(self, ctx, n):
        pos = self.t.arange(ctx, ctx + n, device=self.dev, dtype=self.t.float32)
        f = self.t.outer(pos, self.inv_freq)
        emb = self.t.cat((f, f), dim=-1)
        return emb.cos().to(self.dtype)[None, :, None, :], emb.sin().to(self.dtype)[None, :, None, :]

    attention = "sdpa"

    def step_fn(self, op: str, B: int, n: int, ctx: int, attention: str = "sdpa"):
        """A closure running one step on static inputs (what the graph captures). ``attention``: ``sdpa`` (torch
        picks the kernel, GQA without copies), ``flash`` (FlashAttention-2 forced: refused where it does not apply),
        ``packed`` (for n > 1, the group's query heads packed into the query length), ``causal`` (for n > 1, a prefill's
        causal mask over the new tokens, the cached ones unmasked)."""
        t = self.t
        self.attention = attention
        F = t.nn.functional
        ids = t.randint(0, self.V, (B, n), device=self.dev)
        cos, sin = self._rot(ctx, n)
        if op == "head":
            caches = self._caches(B, ctx + n, 1)
            hid = t.randn(B, n, self.H, device=self.dev, dtype=self.dtype)

            def run():
                e = F.embedding(ids, self.embed)
                x = F.linear(t.cat((e, hid), dim=-1), self.head_fc)
                x = self._layer(x, self.head_layer, caches[0][0], caches[0][1], ctx, n, cos, sin)
                x = self._rms(x[:, -1], self.norm)
                return F.linear(x, self.lm_head).argmax(-1)
            return run
        caches = self._caches(B, ctx + n, self.L)
        rows = n if op == "verify" else 1

        def run():
            x = F.embedding(ids, self.embed)
            for lw, (kc, vc) in zip(self.layers, caches):
                x = self._layer(x, lw, kc, vc, ctx, n, cos, sin)
            x = self._rms(x[:, -rows:], self.norm)
            return F.linear(x, self.lm_head).argmax(-1)
        return run


def _events_time(torch, fn, reps: int) -> float:
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(reps):
        fn()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / 1e3 / reps


def capture(torch, run):
    """``run`` warmed up on a side stream and captured as a CUDA graph: the graph (keep it alive while replaying)."""
    st = torch.cuda.Stream()
    st.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(st):
        for _ in range(2):
            run()
    torch.cuda.current_stream().wait_stream(st)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        run()
    return g


def time_point(torch, run, graph: bool, repeats: int, target_s: float = 0.015) -> dict:
    if graph:
        g = capture(torch, run)
        fn = g.replay
    else:
        run()
        fn = run
    torch.cuda.synchronize()
    one = _events_time(torch, fn, 1)
    reps = max(2, min(60, math.ceil(target_s / max(one, 1e-6))))
    times = sorted(_events_time(torch, fn, reps) for _ in range(repeats))
    if graph:
        del g
    return {"time_s": times[len(times) // 2], "times_s": times, "replays": reps}


def chip_figures(torch, dev) -> list[dict]:
    out = []
    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    t = sorted(_events_time(torch, lambda: a @ b, 10) for _ in range(3))[1]
    out.append({"op": "gemm", "m": 8192, "n": 8192, "k": 8192, "time_s": t, "tflops": 2 * 8192 ** 3 / t / 1e12})
    x = torch.empty(2 * 1024 ** 3, device=dev, dtype=torch.uint8)
    y = torch.empty_like(x)
    t = sorted(_events_time(torch, lambda: y.copy_(x), 10) for _ in range(3))[1]
    out.append({"op": "copy", "bytes": x.numel(), "time_s": t, "read_write_gb_s": 2 * x.numel() / t / 1e9})
    del a, b, x, y
    torch.cuda.empty_cache()
    return out


class Records:
    """``run.json`` (rewritten after every change) and ``records.jsonl`` (appended, flushed per record) in ``out``."""

    def __init__(self, out: str, run: dict):
        self.out, self.run = out, run
        self.rec = open(os.path.join(out, "records.jsonl"), "a")

    def write(self, r: dict) -> None:
        self.rec.write(json.dumps(r) + "\n")
        self.rec.flush()

    def save_run(self) -> None:
        with open(os.path.join(self.out, "run.json"), "w") as f:
            json.dump(self.run, f, indent=1)


def _kv_budget(torch, spec: dict, m: dict, plan: dict, dev: str) -> tuple[float, int]:
    """(estimated bf16 weight bytes, KV tokens that fit beside them and the plan's reserve)."""
    if dev == "cuda":
        torch.cuda.empty_cache()
        free, _ = torch.cuda.mem_get_info()
    else:
        free = 4e9
    wbytes = 2 * (spec["layers"] * (spec["hidden"] * (spec["heads"] + 2 * spec["kv_heads"]) * spec["head_dim"]
                                     + spec["hidden"] * spec["heads"] * spec["head_dim"]
                                     + 3 * spec["hidden"] * spec["intermediate"])
                  + 2 * spec["vocab"] * spec["hidden"])
    per_tok = 2 * spec["layers"] * spec["kv_heads"] * spec["head_dim"] * 2
    cap = int(min(m.get("kv_cap_tokens", 1 << 30), max(0.0, free - wbytes - plan.get("reserve_bytes", 8e9)) / per_tok))
    return wbytes, cap


def _decode_attention_backend(torch, spec: dict, dev: str, dtype) -> str:
    """Which attention kernel torch runs for a decode-shaped call."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        q = torch.randn(1, spec["heads"], 1, spec["head_dim"], device=dev, dtype=dtype)
        k = torch.randn(1, spec["kv_heads"], 64, spec["head_dim"], device=dev, dtype=dtype)
        with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
            torch.nn.functional.scaled_dot_product_attention(q, k, k, enable_gqa=True)
        return "flash (forced check passed)"
    except Exception as e:  # noqa: BLE001
        return f"not flash: {type(e).__name__}: {str(e)[:200]}"


def sustained_point(torch, run, seconds: float, window_s: float, dev: str) -> dict:
    """One step replayed back to back for ``seconds`` (a CUDA graph on a GPU): the mean step time of each window of
    ~``window_s``, and, on a GPU, nvidia-smi's SM clock, power draw, temperature and throttle reasons sampled every
    second by a process beside it (so the GPU never idles for a sample). Whether a long run's steps slow down as the
    chip heats or meets its power limit: the benches time a few hundred milliseconds per point."""
    import tempfile

    fn = run
    if dev == "cuda":
        fn = capture(torch, run).replay  # the bound method keeps the graph alive for the replays
        torch.cuda.synchronize()
        one = _events_time(torch, fn, 1)
    else:
        one = cpu_time(fn)
    reps = max(1, int(window_s / max(one, 1e-6)))
    windows = []
    with tempfile.TemporaryFile("w+") as log:
        sampler = None
        if dev == "cuda":
            try:
                sampler = subprocess.Popen(
                    ["nvidia-smi", "--query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,"
                     "clocks_throttle_reasons.active", "--format=csv,noheader,nounits", "-lms", "1000"],
                    stdout=log, stderr=subprocess.DEVNULL)
            except OSError:
                sampler = None
        try:
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                w = _events_time(torch, fn, reps) if dev == "cuda" else sum(cpu_time(fn) for _ in range(reps)) / reps
                windows.append({"t_s": round(time.monotonic() - t0, 3), "step_s": w, "replays": reps})
        finally:  # a failing window or Ctrl-C stops the sampler too
            if sampler is not None:
                sampler.terminate()
                sampler.wait(timeout=10)
        log.seek(0)
        samples = [line.strip() for line in log.read().splitlines() if line.strip()]
    steps = [w["step_s"] for w in windows]
    head, tail = steps[: max(1, len(steps) // 10)], steps[-max(1, len(steps) // 10):]
    return {"time_s": sorted(steps)[len(steps) // 2], "first_s": sum(head) / len(head), "last_s": sum(tail) / len(tail),
            "windows": windows, "smi": samples, "seconds": seconds}


def _run_points(torch, b, spec: dict, points: list, plan: dict, dev: str, model_deadline: float, recs: Records) -> None:
    """Time every point of one model (past its deadline, or failing, a point is listed as skipped)."""
    run = recs.run
    for p in points:
        if time.monotonic() > model_deadline:
            run["skipped"].append({"model": spec["name"], **p, "why": "time"})
            continue
        op = p["op"]
        base_op = {"decode_eager": "decode", "sustained": p.get("base", "prefill")}.get(op, op)
        try:
            fn = b.step_fn(base_op, p["batch"], p["new"], p["context"], p.get("attention", "sdpa"))
            if op == "sustained":
                r = sustained_point(torch, fn, float(p.get("seconds", 60)), float(p.get("window_s", 1.0)), dev)
            else:
                r = time_point(torch, fn, graph=(op != "decode_eager" and dev == "cuda"),
                               repeats=plan.get("repeats", 5)) if dev == "cuda" else \
                    {"time_s": cpu_time(fn), "times_s": [], "replays": 1}
        except Exception as e:  # noqa: BLE001 - OOM or a kernel refusal: recorded, the next point runs
            run["skipped"].append({"model": spec["name"], **p, "why": f"{type(e).__name__}: {str(e)[:200]}"})
            if dev == "cuda":
                torch.cuda.empty_cache()
            continue
        r = {"model": spec["name"], **p, **r}
        recs.write(r)
        print(json.dumps({k: r.get(k) for k in ("model", "op", "batch", "new", "context", "attention", "time_s")}),
              flush=True)


def _bench_model(torch, m: dict, plan: dict, dev: str, dtype, deadline: float, recs: Records) -> None:
    """One model of the plan: set up, check the attention kernel, time its points, free the device."""
    run = recs.run
    spec, points = m["spec"], m["points"]
    model_deadline = min(deadline, time.monotonic() + float(m.get("max_seconds", 1e9)))
    if time.monotonic() > deadline - 5:
        run["skipped"].append({"model": spec["name"], "why": "time"})
        return
    t0 = time.monotonic()
    wbytes, cap = _kv_budget(torch, spec, m, plan, dev)
    try:
        b = Bench(torch, spec, dtype, dev, cap)
    except Exception as e:  # noqa: BLE001 - record and go on to the next model
        run["skipped"].append({"model": spec["name"], "why": f"{type(e).__name__}: {e}"[:300]})
        recs.save_run()
        return
    info = {"kv_cap_tokens": cap, "weight_bytes_est": wbytes, "setup_s": time.monotonic() - t0}
    info["attention_backend_decode"] = _decode_attention_backend(torch, spec, dev, dtype)
    run["models"][spec["name"]] = info
    recs.save_run()
    _run_points(torch, b, spec, points, plan, dev, model_deadline, recs)
    del b
    import gc
    gc.collect()
    if dev == "cuda":
        torch.cuda.empty_cache()
    run["models"][spec["name"]]["wall_s"] = time.monotonic() - t0
    recs.save_run()


def start(argv: list[str], run: dict, max_seconds: float):
    """A bench's start from its command line (PLAN OUT): (torch, plan, device, deadline, records with ``run``'s
    fields and the provenance), or None where the plan needs a GPU and there is none (an error printed)."""
    import torch

    plan_path, out = argv[0], argv[1]
    plan = json.load(open(plan_path))
    os.makedirs(out, exist_ok=True)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev != "cuda" and not plan.get("allow_cpu"):
        print("error: no CUDA device (the plan does not allow a CPU dry run)", file=sys.stderr)
        return None
    deadline = time.monotonic() + float(plan.get("max_seconds", max_seconds))
    recs = Records(out, {"provenance": provenance(torch), "plan": plan_path, "skipped": [], **run})
    recs.save_run()
    return torch, plan, dev, deadline, recs


def main(argv: list[str]) -> int:
    started = start(argv, {"models": {}}, 420)
    if started is None:
        return 2
    torch, plan, dev, deadline, recs = started
    if dev == "cuda":
        try:
            from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: F401
        except ImportError:
            pass
        for r in chip_figures(torch, dev):
            recs.write(r)
            print(json.dumps(r), flush=True)
    dtype = getattr(torch, plan.get("dtype", "bfloat16"))
    for m in plan["models"]:
        _bench_model(torch, m, plan, dev, dtype, deadline, recs)
    recs.run["finished_utc"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    recs.save_run()
    recs.rec.close()
    return 0


def cpu_time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
