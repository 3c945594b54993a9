"""The capacity search on a serving benchmark's workload (``--bench-serve`` / ``serving_workload``,
``simulator.studies.capacity.bench``) and the SLO terms of such benchmarks (TPOT, ITL, ``simulator.engines.serving.slo``):

- a capacity is found and never lies above the throughput simulated at it (the sustain law of
  ``test_capacity_sustain``);
- shared system prompts sustain a higher rate than the same tokens unshared, with prefix caching on (and not with it
  off);
- specdecode serves the same requests as vanilla-base, its iterations adding up to each request's output;
- ``--bench-serve`` errors exit 2 naming the option; the help documents it; a rate in the line is ignored with a note.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.studies.capacity import IntervalSpec, LoadSpec, Point, capacity_interval, evaluate
from simulator.errors import InputError
from simulator.engines.serving.bench_workload import ServingWorkload
from simulator.engines.serving.slo import parse_slo
from simulator.inputs.systems import SystemConfig
from specsim_cli.main import main
from tests.simulator.test_capacity_sustain import check_row, fixed_scenario
from tests.conftest import examples

VANILLA = SystemConfig(system="vanilla-base")
SC = "scenarios/cpu-smollm2.yaml"


def workload(count: int | None = 1, prefix: int = 4096, rate: float = 1.0) -> str:
    d = {"input_tokens": {"kind": "uniform", "tokens": 128, "range_ratio": 0.5}, "output_tokens": {"kind": "fixed", "tokens": 32},
         "request_rate": rate}
    if count:
        d["system_prompts"] = {"count": count, "tokens": prefix}
    return ServingWorkload.model_validate(d).model_dump_json()


def small_scenario(tmp_path, prefix_caching: bool = True) -> str:
    path = fixed_scenario(tmp_path, 512, 64, gpu="h100-sxm", model="qwen3-1.7b", small="qwen3-1.7b", tp=1)
    if not prefix_caching:
        d = yaml.safe_load(open(path))
        d["execution"] = {"prefix_caching": False}
        path = path.replace(".yaml", "-nocache.yaml")
        open(path, "w").write(yaml.safe_dump(d))
    return path


def cap(sc: str, js: str, slo: str = "p99_ttft<=0.5s", cfg=VANILLA) -> dict:
    p = Point(sc, "h100-sxm", 1, cfg, LoadSpec(requests=80, seed=1), slo, serving=js)
    return capacity_interval(p, IntervalSpec(min_reps=2, max_reps=2))


# ---- the search ------------------------------------------------------------------------------------
@pytest.mark.parametrize("slo", ["p99_ttft<=0.5s", "p99_latency<=1s,p99_tpot<=20ms", "mean_itl<=15ms"])
def test_capacity_found_and_never_above_its_throughput(tmp_path, slo):
    row = cap(small_scenario(tmp_path), workload(), slo)
    assert row["max_qps"] > 0 and row["bracketed"]
    check_row(row)
    for t in parse_slo(slo).terms:  # the terms hold at the representative replication's max rate
        assert row[t.name] <= t.limit_s


def test_shared_prefix_sustains_more_with_prefix_caching(tmp_path):
    sc = small_scenario(tmp_path)
    shared, unshared = cap(sc, workload(1)), cap(sc, workload(1_000_000))  # the same tokens; drawn from 10^6 prompts
    assert shared["prefix_cache_hit_rate"] > 0.5 and unshared["prefix_cache_hit_rate"] < 0.05
    # every replication (the same requests and arrival gaps in both: common random numbers)
    assert min(shared["capacities"]) > 1.5 * max(unshared["capacities"]), (shared["capacities"], unshared["capacities"])
    off = cap(small_scenario(tmp_path, prefix_caching=False), workload(1))
    assert off["max_qps"] < 1.1 * unshared["max_qps"]  # without the cache sharing buys nothing


def test_a_tighter_ttft_slo_never_sustains_more(tmp_path):
    sc = small_scenario(tmp_path)
    assert cap(sc, workload(), "p99_ttft<=0.2s")["max_qps"] <= cap(sc, workload(), "p99_ttft<=0.5s")["max_qps"]


def test_specdecode_serves_the_same_requests(tmp_path):
    from simulator.studies.capacity.bench import plans
    from simulator.inputs.scenario import load_scenario

    rs = load_scenario(small_scenario(tmp_path))
    js = workload()
    v = plans(rs, VANILLA, js, 50, 7)
    s = plans(rs, SystemConfig(system="specdecode", gamma=4), js, 50, 7)
    for a, b in zip(v, s):
        (ca,), (cb,) = a.calls, b.calls
        assert (ca.new_tokens, ca.out_tokens, ca.prefix) == (cb.new_tokens, cb.out_tokens, cb.prefix)
        assert ca.spec_cum is None and cb.spec_cum[-1] == cb.out_tokens - 1 and np.all(np.diff(cb.spec_cum) >= 1)
        assert np.all(np.diff(cb.spec_cum, prepend=0) <= 5)  # at most γ + 1 tokens per iteration
    row = evaluate(Point(str(rs.path), "h100-sxm", 1, SystemConfig(system="specdecode", gamma=4), LoadSpec(requests=60),
                         "p99_latency<=10s", serving=js), 5.0)
    assert row["requests"] >= 60 and row["mean_itl_ms"] > row["mean_tpot_ms"]  # a chunk holds several tokens


# ---- SLO terms of serving benchmarks ---------------------------------------------------------------
def test_parse_tpot_and_itl():
    s = parse_slo("p99_tpot<=50ms, mean_itl<=40ms and p99_ttft<=2s")
    assert [(t.stat, t.metric, t.limit_s) for t in s.terms] == [("p99", "tpot_s", 0.05), ("mean", "itl_s", 0.04),
                                                                ("p99", "ttft_s", 2.0)]
    assert not s.stops_early and parse_slo("p99_e2el<=3s,p90_ttft<=1").stops_early
    with pytest.raises(InputError, match="--slo.*tpot or itl"):
        parse_slo("p99_tbt<=50ms")


@settings(max_examples=examples(40), deadline=None)
@given(lat=st.lists(st.floats(0.5, 50), min_size=1, max_size=30), share=st.floats(0.0, 0.9),
       out=st.lists(st.integers(1, 400), min_size=30, max_size=30), gaps=st.lists(st.floats(1e-3, 1.0), min_size=1, max_size=40),
       w=st.lists(st.integers(0, 9), min_size=40, max_size=40), stat=st.sampled_from(["mean", "p50", "p90", "p99"]))
def test_tpot_and_itl_are_vllms(lat, share, out, gaps, w, stat):
    lat = np.array(lat)
    req = pd.DataFrame({"latency_s": lat, "ttft_s": share * lat, "output_tokens": out[: len(lat)]})
    many = req.output_tokens > 1
    tpot = ((req.latency_s - req.ttft_s) / (req.output_tokens - 1))[many].to_numpy()
    (t,) = parse_slo(f"{stat}_tpot<=1s").terms
    v = parse_slo(f"{stat}_tpot<=1s").values(req)[t.name]
    q = {"mean": None, "p50": 50, "p90": 90, "p99": 99}[stat]
    want = (np.nan if not len(tpot) else tpot.mean() if q is None else np.percentile(tpot, q))
    assert (math.isnan(v) and math.isnan(want)) or v == pytest.approx(want)
    ok = parse_slo(f"{stat}_tpot<=0.1s").per_request_ok(req)  # a one-token request has no TPOT: never a miss
    assert list(ok) == [not m or x <= 0.1 for m, x in zip(many, (req.latency_s - req.ttft_s) / np.maximum(req.output_tokens - 1, 1))]
    # ITL: every (gap, weight w) is w pooled gaps, as vLLM lists them
    g, wt = np.array(gaps), np.array(w[: len(gaps)])
    s = parse_slo(f"{stat}_itl<=1s")
    pooled = np.repeat(g, wt)
    got = s.values(req, (g, wt))[s.terms[0].name]
    if not len(pooled):
        return
    want = pooled.mean() if q is None else np.percentile(pooled, q, method="inverted_cdf")
    assert got == pytest.approx(want)
    assert s.met(req, (g, wt)) == bool(want <= 1.0) and not s.met(req)  # no ITL samples: not met


# ---- the command -----------------------------------------------------------------------------------
@pytest.mark.parametrize("line, option", [("vllm bench serve --random-input-len x", "--random-input-len"),
                                          ("vllm bench serve --dataset-name sonnet", "--dataset-name"),
                                          ("vllm bench serve --frobnicate 3", "--frobnicate"),
                                          ("vllm bench serve --request-rate fast", "--request-rate")])
def test_bench_serve_errors_exit_2_naming_the_option(capsys, line, option):
    assert main(["simulate", "capacity", SC, "--bench-serve", line, "--qps", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: --bench-serve: {option}") and "\n" not in err


def test_bench_serve_refuses_what_it_cannot_search(capsys):
    line = "vllm bench serve --random-input-len 64 --random-output-len 8"
    assert main(["simulate", "capacity", SC, "--bench-serve", line, "--system", "specreason"]) == 2
    assert capsys.readouterr().err.startswith("error: --system: specreason has no plain-serving form")
    assert main(["simulate", "capacity", SC, "--bench-serve", line, "--arrival", "bursty"]) == 2
    assert capsys.readouterr().err.startswith("error: --arrival")


def test_capacity_help_documents_bench_serve(capsys):
    assert main(["simulate", "capacity", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.replace("│", " ").split())  # rich's panel borders out
    assert "--bench-serve" in out and "vllm bench serve" in out and "tpot" in out


def test_a_rate_in_the_line_is_ignored_with_a_note(capsys):
    line = ("vllm bench serve --dataset-name random --random-input-len 256 --random-output-len 16 --random-prefix-len 128 "
            "--request-rate 7 --num-prompts 50 --model x")
    assert main(["simulate", "capacity", SC, "--bench-serve", line, "--qps", "0.2", "--slo", "p99_ttft<=60s", "--requests", "40",
                 "--format", "json", "--workers", "1"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert "ignored: its request rate 7/s, its 50 prompts" in res["meta"]["workload_note"]
    rows = res["results"]
    # the scenario's systems without a plain-serving form (specreason...) are left out, the others run the workload
    assert {r["system"] for r in rows} == {"vanilla-base", "specdecode"}
    assert all(r["rate_qps"] == 0.2 and r["prefix_cache_hit_rate"] > 0 for r in rows)


def test_report_searches_and_plots_the_workload(tmp_path):
    line = "vllm bench serve --random-input-len 256 --random-output-len 16 --random-prefix-len 128 --request-rate 7"
    out = tmp_path / "rep"
    assert main(["simulate", "report", SC, "--out", str(out), "--bench-serve", line, "--system", "vanilla-base", "--requests", "40",
                 "--max-replications", "3", "--slo", "p99_ttft<=30s", "--workers", "1"]) == 0
    cap, curves = pd.read_csv(out / "capacity.csv"), pd.read_csv(out / "latency_vs_load.csv")
    assert list(cap.label) == ["vanilla-base"] and cap.max_qps.iloc[0] > 0
    # the load curves serve the workload too: its shared prefix is hit at every load
    assert len(curves) >= 5 and (curves.prefix_cache_hit_rate > 0).all()
    md = (out / "report.md").read_text()
    assert "ignored: its request rate 7/s" in md and "--bench-serve 'vllm bench serve --random-input-len 256" in md
    assert json.loads((out / "resolved.json").read_text())["serving_workload"]["system_prompts"]["tokens"] == 128
    # benchmark traffic is decoded exactly by every configuration: the reasoning workload's accuracy is not quoted
    assert "Accuracy: benchmark traffic" in md and "Accuracy floor" not in md and "Pareto" not in md
    head = md.splitlines()[2]  # the headline
    assert "accuracy unknown" not in head and "accuracy does not separate them" in head
