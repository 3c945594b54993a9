"""Issue 28: ``specsim measure serve-bench`` -- levels, commands, stopping the server whatever happens, resuming.

The process tests run the real command with a fake ``vllm`` (``tests/calibrate/fake_vllm_cli.py``: an HTTP server
with /health and /metrics and a child process, and a client writing a real result JSON), so they take seconds and
need no vLLM; ``test_serve_bench_real.py`` runs the real server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from calibrate.measure.serve_bench import BenchSpec, Level, ServerSpec, parse_levels
from calibrate.measure.server_process import start, stop_group
from simulator.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
FAKE = Path(__file__).with_name("fake_vllm_cli.py")
MODEL = ROOT / ".cache/models/smollm2-135m-instruct"


def test_levels_and_labels():
    lv = parse_levels("1,2", "0.5")
    assert [x.label for x in lv] == ["closed-1", "closed-2", "poisson-0.5"]
    for bad in (("0", ""), ("a", ""), ("", ""), ("1,1", "")):
        with pytest.raises(InputError):
            parse_levels(*bad)


def test_commands_carry_the_options():
    s = ServerSpec(model="m", served_name="m", draft="d", gamma=3, prefix_caching=True, extra_args=["--seed", "1"])
    a = s.args(1234)
    assert a[:2] == ["serve", "m"] and "--enable-prefix-caching" in a and a[-2:] == ["--seed", "1"]
    spec = json.loads(a[a.index("--speculative-config") + 1])
    assert spec == {"method": "draft_model", "model": "d", "num_speculative_tokens": 3}
    assert "--no-enable-prefix-caching" in ServerSpec(model="m").args(1)
    b = BenchSpec(num_prompts=4).args(1234, "m", "tok", Level("closed", 2), Path("/r"))
    assert b[:2] == ["bench", "serve"] and b[b.index("--max-concurrency") + 1] == "2"
    assert {"--save-result", "--save-detailed", "--ignore-eos"} <= set(b)
    b = BenchSpec().args(1, "m", "tok", Level("poisson", 0.5), Path("/r"))
    assert b[b.index("--request-rate") + 1] == "0.5" and "--max-concurrency" not in b


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_stop_group_takes_the_children(tmp_path):
    p = start([sys.executable, "-c", "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
               "'import time; time.sleep(60)']); print('RE' + 'ADY', flush=True); time.sleep(60)"], tmp_path / "log")
    for _ in range(100):
        if "READY" in (tmp_path / "log").read_text():
            break
        time.sleep(0.1)
    kids = [int(x) for x in subprocess.run(["pgrep", "-g", str(p.pid)], capture_output=True, text=True).stdout.split()]
    assert len(kids) == 2
    stop_group(p, grace_s=5)
    assert not any(_alive(k) for k in kids)


def _env(tmp_path, bench_sleep="0.2"):
    env = dict(os.environ, SPECSIM_VLLM_CLI=f"{sys.executable} {FAKE}", FAKE_VLLM_PIDS=str(tmp_path / "pids"),
               FAKE_BENCH_SLEEP=bench_sleep, PYTHONPATH=str(ROOT))
    return env


def _cmd(out, levels="1,2,3"):
    return [sys.executable, "-m", "specsim_cli", "measure", "serve-bench", "--model", str(_model_dir(out)),
            "--concurrency", levels, "--num-prompts", "4", "--out", str(out)]


def _model_dir(out: Path) -> Path:
    d = out.parent / "model"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text("{}")
    return d


def _pids(tmp_path) -> list[int]:
    f = tmp_path / "pids"
    return [int(x) for x in f.read_text().split()] if f.is_file() else []


def _wait_dead(pids, timeout=15.0) -> list[int]:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        left = [p for p in pids if _alive(p)]
        if not left:
            return []
        time.sleep(0.2)
    return [p for p in pids if _alive(p)]


def test_ladder_writes_levels_and_stops_the_server(tmp_path):
    pytest.importorskip("vllm")  # runs the real vllm code path (installed by make engines)
    out = tmp_path / "run"
    r = subprocess.run(_cmd(out, "1,2"), cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stderr
    for lv in ("closed-1", "closed-2"):
        meta = json.loads((out / lv / "run.json").read_text())
        assert meta["engine"] == "vllm-bench-serve" and meta["options"]["arrivals"]["mode"] == "closed"
        assert (out / lv / "metrics_before.txt").is_file() and (out / lv / "metrics_after.txt").is_file()
    assert json.loads((out / "closed-2" / "run.json").read_text())["options"]["arrivals"]["users"] == 2
    prov = json.loads((out / "provenance.json").read_text())
    assert {"server", "bench", "versions", "hardware", "vllm_version"} <= set(prov) and prov["hardware"]["cpu_count"] >= 1
    assert not list(out.glob(".*.partial")) and not (out / "server.pid").exists()
    pids = _pids(tmp_path)
    assert len(pids) == 2 and _wait_dead(pids) == []
    # resuming a complete folder starts nothing; other server arguments are refused, nothing touched
    r = subprocess.run(_cmd(out, "1,2"), cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=100)
    assert r.returncode == 0 and "kept" in r.stdout and len(_pids(tmp_path)) == 2
    r = subprocess.run(_cmd(out, "1,2") + ["--max-model-len", "1024"], cwd=ROOT, env=_env(tmp_path),
                       capture_output=True, text=True, timeout=100)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "provenance.json: server" in r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_killed_mid_ladder_leaves_no_server_and_resumes(tmp_path, sig):
    """Kill serve-bench while level 2 runs: no server or child left; the rerun keeps level 1 and measures 2 and 3."""
    pytest.importorskip("vllm")  # runs the real vllm code path (installed by make engines)
    out = tmp_path / "run"
    p = subprocess.Popen(_cmd(out), cwd=ROOT, env=_env(tmp_path, bench_sleep="3"), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while not (out / "closed-1" / "run.json").is_file() or not (out / ".closed-2.partial").is_dir():
        assert p.poll() is None, p.stderr.read()
        assert time.monotonic() - t0 < 60, "level 1 never completed"
        time.sleep(0.1)
    p.send_signal(sig)
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0, err
    pids = _pids(tmp_path)
    assert len(pids) == 2 and _wait_dead(pids) == [], "server processes left after the kill"
    assert not (out / "closed-2").exists()  # only its .partial folder
    first = (out / "closed-1" / "run.json").stat().st_mtime_ns
    r = subprocess.run(_cmd(out), cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=100)
    assert r.returncode == 0, r.stderr
    assert (out / "closed-1" / "run.json").stat().st_mtime_ns == first
    assert all((out / lv / "run.json").is_file() for lv in ("closed-2", "closed-3"))
    assert not list(out.glob(".*.partial"))
    assert _wait_dead(_pids(tmp_path)) == []


def test_bad_options_exit_2_nothing_written(tmp_path):
    out = tmp_path / "run"
    for extra in (["--gamma", "2"], ["--concurrency", "0"]):
        r = subprocess.run(_cmd(out) + extra, cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0, r.stderr
    assert not out.exists() and _pids(tmp_path) == []


def test_server_cpu_is_read_per_process_and_its_descendants():
    """cpu_seconds: the process's own CPU apart from its live descendants'; a busy child adds to the second only."""
    from calibrate.measure.server_process import cpu_seconds, cpu_used

    pytest.importorskip("psutil")
    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.4: pass\ntime.sleep(30)"])
    try:
        before = cpu_seconds(os.getpid())
        t = time.process_time()
        while time.process_time() - t < 0.2:  # the parent's own work
            pass
        deadline = time.monotonic() + 20
        while cpu_used(before, cpu_seconds(os.getpid()))["engine"] < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
        used = cpu_used(before, cpu_seconds(os.getpid()))
        assert set(used) == {"front_end", "engine"}
        assert used["front_end"] >= 0.15 and used["engine"] >= 0.3
    finally:
        child.kill()
        child.wait()
    assert cpu_seconds(child.pid) == {} and cpu_used({"front_end": 1.0}, {}) == {}
