"""``specsim fit front-end-cpu``: the API server's CPU per engine step, streamed token and request from serve-bench
levels (calibrate/fit/front_end_cpu.py). Levels here are written from known costs (the measured ones are
docs/serve-bench.md's); the real levels' fields are held by tests/calibrate/test_serve_bench_real.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fit.front_end_cpu import COSTS, TERMS, fit, held_out, read_level
from simulator.errors import InputError
from specsim_cli.main import main
from tests.conftest import error_lines, examples

LABELS = 'engine="0",model_name="m"'


def _metrics(steps: float, tokens: float, requests: float) -> str:
    return (f"# HELP vllm:iteration_tokens_total x\nvllm:iteration_tokens_total_sum{{{LABELS}}} 1.0\n"
            f"vllm:iteration_tokens_total_count{{{LABELS}}} {steps}\n"
            f"vllm:generation_tokens_total{{{LABELS}}} {tokens}\n"
            f'vllm:request_success_total{{{LABELS},finished_reason="length"}} {requests}\n'
            f'vllm:request_success_total{{{LABELS},finished_reason="stop"}} 0.0\n')


def _level(folder, steps, tokens, requests, wall, cpu, server_cpu=True):
    folder.mkdir(parents=True)
    opts = {"wall_s": wall} | ({"server_cpu_s": {"front_end": cpu, "engine": 10.0 * cpu}} if server_cpu else {})
    (folder / "run.json").write_text(json.dumps({"options": opts}))
    (folder / "metrics_before.txt").write_text(_metrics(100.0, 1000.0, 5.0))  # counters from earlier levels
    (folder / "metrics_after.txt").write_text(_metrics(100.0 + steps, 1000.0 + tokens, 5.0 + requests))
    return folder


DESIGN = [(1029, 4096, 16, 55.0), (70, 2048, 64, 28.0), (524, 16384, 64, 68.0), (68, 512, 32, 44.0),
          (516, 4096, 32, 141.0), (300, 9600, 48, 30.0)]


def _levels(tmp_path, costs, design=DESIGN):
    return [_level(tmp_path / f"l{i}", *row, cpu=float(np.dot(costs, row))) for i, row in enumerate(design)]


@settings(max_examples=examples(25), deadline=None)
@given(st.tuples(*(st.floats(0.0, hi) for hi in (5e-3, 5e-4, 2e-2, 2e-2))))
def test_costs_behind_the_levels_come_back_and_predict_each_level_held_out(costs):
    """Noise-free levels of a full-rank design: the fit returns the costs (non-negative), each level held out is
    predicted from the others."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        levels = [read_level(f) for f in _levels(Path(d), costs)]
    got = fit(levels)
    assert all(got[c] >= 0.0 for c in COSTS)
    scale = np.array([max(lv[t] for lv in levels) for t in TERMS])
    assert np.allclose([got[c] for c in COSTS] * scale, np.array(costs) * scale, atol=1e-6 * max(1e-3, max(costs) * scale.max()))
    if min(lv["front_end_cpu_s"] for lv in levels) > 1e-3:
        assert max(abs(r["error"]) for r in held_out(levels)) < 1e-4


def test_the_counters_are_the_increase_over_the_level(tmp_path):
    lv = read_level(_level(tmp_path / "l", 10, 200, 3, 5.0, 0.5))
    assert (lv["steps"], lv["tokens"], lv["requests"], lv["wall_s"], lv["front_end_cpu_s"]) == (10, 200, 3, 5.0, 0.5)


def test_the_command_writes_the_fit_and_refuses_what_it_cannot_fit(tmp_path, capsys):
    folders = [str(f) for f in _levels(tmp_path, (1e-3, 1.25e-4, 5e-3, 6e-3))]
    assert main(["fit", "front-end-cpu", *folders, "--out", str(tmp_path / "rep")]) == 0
    out = capsys.readouterr().out
    assert "125.0 us per streamed token" in out and "1.000 ms per engine step" in out
    doc = json.loads((tmp_path / "rep" / "fit.json").read_text())
    assert doc["costs"]["c_tok_s"] == pytest.approx(1.25e-4) and len(doc["held_out"]) == len(DESIGN)
    # too few levels for a held-out check; a level without the server's CPU; a scrape without the counters
    assert main(["fit", "front-end-cpu", *folders[:4]]) == 2
    assert error_lines(capsys.readouterr().err) == ["error: levels: a held-out check needs at least 5 levels (got 4)"]
    old = _level(tmp_path / "old", 1, 1, 1, 1.0, 1.0, server_cpu=False)
    assert main(["fit", "front-end-cpu", *folders, str(old)]) == 2
    err = error_lines(capsys.readouterr().err)
    assert len(err) == 1 and "old/run.json: options.server_cpu_s" in err[0]
    (tmp_path / "l0" / "metrics_after.txt").write_text("vllm:other_total 1.0\n")
    with pytest.raises(InputError, match="vllm:iteration_tokens_total_count"):
        read_level(tmp_path / "l0")
