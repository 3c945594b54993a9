"""CLI contract: one-line errors with exit 2; a killed run resumes to the same set of records."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import REPO


def _cli(*args, timeout=600):
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    new = {"check-trace": ["validate", "trace"], "run": ["measure", "run"]}[str(args[0])]  # the commands' new names
    return subprocess.run([sys.executable, "-m", "specsim_cli", *new, *map(str, args[1:])], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _manifest():
    from calibrate.contracts.trace_schema import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "kind": "run", "created_at": "2026-01-01T00:00:00+00:00",
            "engine": "fake", "engine_version": "0", "hardware": {}, "models": {}, "dtype": "float32",
            "tensor_parallel": 1, "system": "vanilla-base", "gamma": 0, "threshold": 7.0, "first_n": 0,
            "budget_tokens": 100, "score_mode": "greedy", "sampling": {}, "seed": 0, "dataset": "x",
            "num_requests": 1, "command": "test", "options": {}}


def test_malformed_trace_line_is_one_line_error_exit_2(tmp_path):
    (tmp_path / "run.json").write_text(json.dumps(_manifest()))
    (tmp_path / "requests.jsonl").write_text('{"schema_version": 1, "kind": "request"}\n')
    r = _cli("check-trace", tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0
    assert f"{tmp_path}/requests.jsonl:1" in r.stderr and "missing field" in r.stderr
    (tmp_path / "requests.jsonl").write_text("not json\n")
    r = _cli("check-trace", tmp_path)
    assert r.returncode == 2 and "requests.jsonl:1: not valid JSON" in r.stderr


def test_missing_model_folder_is_one_line_error_exit_2(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "1+1?", "answer": "2"}\n')
    r = _cli("run", "--engine", "torch", "--base", tmp_path / "nope", "--system", "vanilla-base",
             "--dataset", f"jsonl:{prompts}", "--out", tmp_path / "run")
    assert r.returncode == 2, r.stderr
    assert r.stderr.startswith("error: ") and r.stderr.strip().count("\n") == 0
    assert "nope" in r.stderr and "does not exist" in r.stderr


def test_negative_warmup_is_one_line_error_exit_2(tmp_path):
    r = _cli("run", "--engine", "torch", "--base", tmp_path, "--system", "vanilla-base", "--warmup", "-1",
             "--out", tmp_path / "run")
    assert r.returncode == 2 and r.stderr.startswith("error: ") and "--warmup" in r.stderr


@pytest.mark.real_engine
def test_warmup_requests_are_discarded_and_recorded(model_cache, tmp_path):
    """Greedy: the measured request is the same with or without a discarded warm-up problem before it."""
    pytest.importorskip("torch")
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is {i} + 3?", "answer": str(i + 3)})
                               + "\n" for i in range(2)))
    args = ["run", "--engine", "torch", "--base", model_cache["base"], "--system", "vanilla-base",
            "--budget", "12", "--step-max-tokens", "6", "--temperature", "0", "--dtype", "float32",
            "--dataset", f"jsonl:{prompts}", "--requests", "1"]
    for name, extra in (("cold", []), ("warm", ["--warmup", "1"])):
        r = _cli(*args, *extra, "--out", tmp_path / name)
        assert r.returncode == 0, r.stderr[-2000:]
    warm = json.loads((tmp_path / "warm" / "run.json").read_text())
    assert warm["options"]["warmup_requests"] == 1
    assert "warmup_requests" not in json.loads((tmp_path / "cold" / "run.json").read_text())["options"]
    assert _records(tmp_path / "warm") == _records(tmp_path / "cold")


def _records(run_dir: Path) -> list[tuple]:
    steps = [json.loads(x) for x in (run_dir / "steps.jsonl").read_text().splitlines()]
    reqs = [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines()]
    return sorted((s["request_id"], s["step_index"], s["proposer"], s["text"]) for s in steps) + \
        sorted((r["request_id"], r["num_steps"], r["thinking_tokens"], r["answer"]) for r in reqs)


@pytest.mark.real_engine
@pytest.mark.parametrize("engine,system", [("torch", "specreason"), ("vllm", "vanilla-base")])
def test_killed_run_resumes_to_the_same_records(engine, system, model_cache, tmp_path):
    """vLLM runs vanilla-base (one engine per process start) to keep the suite short."""
    pytest.importorskip(engine)
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"q{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i)})
                               + "\n" for i in range(4)))
    args = ["run", "--engine", engine, "--base", model_cache["base"], "--small", model_cache["draft"],
            "--system", system, "--threshold", "5", "--budget", "24", "--step-max-tokens", "8",
            "--temperature", "0", "--dtype", "float32", "--max-model-len", "1024",
            "--dataset", f"jsonl:{prompts}", "--requests", "4"]
    full = tmp_path / "full"
    r = _cli(*args, "--out", full)
    assert r.returncode == 0, r.stderr[-2000:]
    # Kill a second run once it has written K = 2 records (steps or requests), then resume it.
    killed = tmp_path / "killed"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    p = subprocess.Popen([sys.executable, "-m", "specsim_cli", "calibrate", *map(str, args), "--out", str(killed)], cwd=REPO,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while time.time() < deadline and p.poll() is None:
        n = sum(len(f.read_text().splitlines()) for f in killed.glob("*.jsonl")) if killed.exists() else 0
        if n >= 2:
            p.send_signal(signal.SIGKILL)
            break
        time.sleep(0.05)
    p.wait()
    assert p.returncode == -signal.SIGKILL, "run finished before it could be killed"
    r = _cli(*args, "--out", killed)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _records(killed) == _records(full)
    assert _cli("check-trace", killed).returncode == 0
