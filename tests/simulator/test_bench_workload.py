"""Serving workloads as benchmarks define them (simulator/engines/serving/bench_workload.py): vllm bench serve command
lines in and out, lengths, early EOS, arrivals, errors naming file and field."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving import ClosedLoopUsers, PoissonArrivals
from simulator.engines.serving.arrivals import BurstyArrivals, CappedArrivals, StagedArrivals
from simulator.engines.serving.bench_workload import Lengths, ServingWorkload
from tests.conftest import examples


@settings(max_examples=examples(60), deadline=None)
@given(i=st.integers(1, 100_000), o=st.integers(1, 100_000), r=st.sampled_from([0.0, 0.1, 0.5, 0.9]),
       p=st.integers(0, 5000), rate=st.one_of(st.just("inf"), st.floats(0.01, 1000)),
       b=st.sampled_from([1.0, 0.5, 2.0]), c=st.one_of(st.none(), st.integers(1, 512)), n=st.integers(1, 100_000))
def test_command_line_round_trips(i, o, r, p, rate, b, c, n):
    line = (f"vllm bench serve --model Qwen/Qwen3-32B --dataset-name random --random-input-len {i} "
            f"--random-output-len {o} --random-range-ratio {r} --random-prefix-len {p} --request-rate {rate} "
            f"--burstiness {b} --num-prompts {n} --save-result" + (f" --max-concurrency {c}" if c else ""))
    w = ServingWorkload.from_command(line)
    back = ServingWorkload.from_command(w.to_command())
    assert back.model_dump(exclude={"source"}) == w.model_dump(exclude={"source"})
    assert w.input_tokens.tokens == i and w.num_prompts == n and (w.system_prompts is None) == (p == 0)


def test_command_defaults_and_arrivals():
    w = ServingWorkload.from_command("vllm bench serve --random-input-len 2048 --random-output-len 256 "
                                     "--request-rate 4 --num-prompts 500")
    assert w.arrivals() == PoissonArrivals(4.0) and w.num_prompts == 500
    assert ServingWorkload.from_command("vllm bench serve").arrivals() == PoissonArrivals(math.inf)  # a burst
    assert ServingWorkload.from_command("vllm bench serve --max-concurrency 8").arrivals() == ClosedLoopUsers(8, 0.0)
    capped = ServingWorkload.from_command("vllm bench serve --request-rate 3 --max-concurrency 4").arrivals()
    assert capped == CappedArrivals(PoissonArrivals(3.0), 4) and capped.label == "poisson(3/s) at most 4 in flight"
    bursty = ServingWorkload.from_command("vllm bench serve --request-rate 2 --burstiness 0.25").arrivals()
    assert isinstance(bursty, BurstyArrivals) and bursty.cv == pytest.approx(2.0)
    assert (PoissonArrivals(math.inf).times(5, np.random.default_rng(0)) == 0).all()


@pytest.mark.parametrize("line, field", [
    ("vllm bench serve --random-input-len x", "--random-input-len"),
    ("vllm bench serve --dataset-name sonnet", "--dataset-name"),
    ("vllm bench serve --dataset-name sharegpt --sharegpt-output-len 0", "--sharegpt-output-len"),
    ("vllm bench serve --frobnicate 3", "--frobnicate"),
    ("vllm bench serve --random-input-len 0", "input_tokens.tokens"),
    ("vllm serve Qwen/Qwen3-8B --max-num-seqs 8", None),
    ("echo hello", None),
    ("bench serve --num-prompts 4", None),
])
def test_bad_command_lines_name_the_option(line, field):
    with pytest.raises(InputError) as e:
        ServingWorkload.from_command(line)
    assert e.value.file == "--bench-serve"
    if field is None:
        assert "not a vllm bench serve command" in e.value.message
    if field:
        assert e.value.field == field


@settings(max_examples=examples(30), deadline=None)
@given(kind=st.sampled_from(["fixed", "uniform", "lognormal"]), t=st.integers(1, 5000), r=st.floats(0, 0.95),
       sigma=st.floats(0, 1.5), seed=st.integers(0, 2**31))
def test_lengths_stay_in_their_bounds(kind, t, r, sigma, seed):
    L = Lengths(kind=kind, tokens=t, range_ratio=r, sigma=sigma, max=10 * t)
    x = L.sample(np.random.default_rng(seed), 2000)
    assert (x >= 1).all() and (x <= 10 * t).all()
    if kind == "uniform":  # vLLM's random dataset: integers in [floor(t(1-r)), ceil(t(1+r))]
        assert x.min() >= max(math.floor(t * (1 - r)), 1) and x.max() <= math.ceil(t * (1 + r))
    if kind == "fixed":
        assert (x == t).all()


def test_early_eos_shortens_outputs_by_its_law():
    w = ServingWorkload.model_validate({"input_tokens": {"tokens": 10}, "output_tokens": {"tokens": 400},
                                        "eos_per_token": 0.01, "num_prompts": 4000})
    plans, _, _ = w.plans(4000, 1)
    out = np.array([p.output_tokens for p in plans])
    assert out.max() <= 400
    # min(cap, Geometric(p)): mean (1 - (1-p)^cap) / p
    expect = (1 - 0.99**400) / 0.01
    assert abs(out.mean() - expect) < 4 * out.std() / np.sqrt(len(out))
    assert {p.stop_reason for p in plans} == {"eos", "length"}


def test_stages_bring_their_rates():
    a = StagedArrivals(((2.0, 500.0), (10.0, 200.0)))
    t = a.times(10**9, np.random.default_rng(0))
    first, second = (t < 500).sum(), (t >= 500).sum()
    assert abs(first - 1000) < 4 * math.sqrt(1000) and abs(second - 2000) < 4 * math.sqrt(2000)
    assert (np.diff(t) >= 0).all() and t[-1] < 700
    w = ServingWorkload.model_validate({"input_tokens": {"tokens": 10}, "output_tokens": {"tokens": 4},
                                        "stages": [{"rate_per_s": 2, "duration_s": 5}]})
    assert isinstance(w.arrivals(), StagedArrivals)


def test_scenario_field_errors_name_file_and_field(tmp_path):
    src = load_scenario("cpu-smollm2").path.read_text()
    good = tmp_path / "good.yaml"
    good.write_text(src.replace("workload:", "serving_workload: \"vllm bench serve --random-input-len 256 "
                                "--random-output-len 32 --request-rate 2\"\nworkload:", 1))
    assert load_scenario(good).scenario.serving_workload.input_tokens.tokens == 256
    bad = tmp_path / "bad.yaml"
    bad.write_text(src.replace("workload:", "serving_workload:\n  input_tokens: {kind: uniform}\n"
                               "  output_tokens: {tokens: 8}\nworkload:", 1))
    with pytest.raises(InputError) as e:
        load_scenario(bad)
    assert e.value.file == str(bad) and e.value.field.startswith("serving_workload.input_tokens")
    worse = tmp_path / "worse.yaml"
    worse.write_text(src.replace("workload:", "serving_workload: \"vllm bench serve --dataset-name sonnet\"\nworkload:", 1))
    with pytest.raises(InputError) as e:
        load_scenario(worse)
    assert e.value.file == str(worse) and e.value.field.startswith("serving_workload")


# ---- ShareGPT ------------------------------------------------------------------------------------------
@settings(max_examples=examples(60), deadline=None)
@given(mean=st.floats(5.0, 1000.0), sigma=st.sampled_from([0.3, 0.7, 1.0, 1.5]), lo=st.integers(1, 4),
       hi=st.sampled_from([None, 1024, 2044]))
def test_lognormal_with_mean_hits_the_clipped_mean(mean, sigma, lo, hi):
    """The solved median gives the asked mean after clipping (to the whole-token rounding of the median), and the
    analytic clipped mean agrees with a large sample."""
    L = Lengths.lognormal_with_mean(mean, sigma, lo, hi)
    assert L.min == lo and L.max == hi and L.sigma == sigma
    # the median m is rounded to a whole token (m >= tokens - 1/2): the clipped mean moves by at most m's relative
    # rounding, 0.5 / m
    assert L.mean == pytest.approx(mean, rel=0.5 / (L.tokens - 0.5) + 1e-6)
    x = L.sample(np.random.default_rng(0), 200_000)
    assert x.min() >= lo and (hi is None or x.max() <= hi)
    assert x.mean() == pytest.approx(L.mean, rel=0.02)


def test_lognormal_mean_grows_with_the_median_and_stays_in_its_clip():
    means = [Lengths(kind="lognormal", tokens=t, sigma=1.0, min=4, max=1024).mean for t in (1, 10, 100, 1000, 10**6)]
    assert all(b > a for a, b in zip(means, means[1:])) and 4 <= means[0] and means[-1] <= 1024
    assert means[-1] == pytest.approx(1024, rel=1e-3)


def test_sharegpt_command_line():
    """--dataset-name sharegpt: vLLM's filter bounds, the released runs' means, the assumed spread; a fixed
    --sharegpt-output-len replaces the replies' lengths; --dataset-path is not a shape option."""
    from simulator.engines.serving.bench_workload import SHAREGPT_MEANS, SHAREGPT_SIGMA

    w = ServingWorkload.from_command("vllm bench serve --dataset-name sharegpt --dataset-path ShareGPT_V3.json "
                                     "--num-prompts 200 --request-rate 4")
    i, o = w.input_tokens, w.output_tokens
    assert (i.kind, i.min, i.max, i.sigma) == ("lognormal", 4, 1024, SHAREGPT_SIGMA) and o.max == 2044
    assert i.mean == pytest.approx(SHAREGPT_MEANS[0], rel=0.01) and o.mean == pytest.approx(SHAREGPT_MEANS[1], rel=0.01)
    plans, _, _ = w.plans(2000, seed=1)
    prompts = np.array([p.calls[0].new_tokens for p in plans])
    assert prompts.std() > 0.5 * prompts.mean()  # a spread, not one length
    fixed = ServingWorkload.from_command("vllm bench serve --dataset-name sharegpt --sharegpt-output-len 64")
    assert fixed.output_tokens == Lengths(kind="fixed", tokens=64)
    with pytest.raises(InputError):  # no random-dataset line for it
        w.to_command()


@settings(max_examples=examples(40), deadline=None)
@given(cap=st.integers(2, 4000), share=st.floats(0.0, 1.0))
@example(cap=2, share=0.99999)  # a mean just under the cap: 1 - (1 - p)^cap cancels at the smallest p
@example(cap=4000, share=1.0 - 2e-9)  # within what the smallest p resolves of the cap
@example(cap=4000, share=1e-16)  # within what the largest p resolves of one token
def test_eos_for_mean_inverts_the_capped_geometric_mean(cap, share):
    """p = eos_for_mean(cap, m) gives E[min(cap, Geometric(p))] = m for any m in [1, cap]; p = 0 exactly at the cap,
    and p falls as the mean rises (a request that ends earlier on average has a larger EOS probability)."""
    from simulator.engines.serving.bench_workload import eos_for_mean

    m = 1.0 + share * (cap - 1)
    p = eos_for_mean(cap, m)
    assert 0.0 <= p < 1.0
    got = cap if p == 0 else (1.0 - (1.0 - p) ** cap) / p
    assert got == pytest.approx(m, rel=1e-6, abs=1e-6)
    if m < cap - 1:
        assert eos_for_mean(cap, m + 0.5) < p
    with pytest.raises(ValueError):
        eos_for_mean(cap, cap + 1.0)


def test_early_ends_reach_the_mean_and_the_cap():
    """A workload capped at 200 tokens with the EOS probability for a mean of 120: the sampled mean within 5% of 120
    (2000 requests: ~4 standard errors), no request above the cap, and a share of requests at the cap near
    (1 - p)^(cap - 1)."""
    from simulator.engines.serving.bench_workload import Lengths, ServingWorkload, eos_for_mean

    p = eos_for_mean(200, 120.0)
    w = ServingWorkload(input_tokens=Lengths(kind="fixed", tokens=64), output_tokens=Lengths(kind="fixed", tokens=200),
                        eos_per_token=p, num_prompts=2000)
    plans, _, _ = w.plans(2000, seed=0)
    out = np.array([pl.calls[0].out_tokens for pl in plans])
    assert out.max() <= 200 and abs(out.mean() / 120.0 - 1) < 0.05
    assert abs((out == 200).mean() - (1 - p) ** 199) < 0.03


def test_prefix_repetition_dataset():
    """vLLM's prefix_repetition dataset: num_prefixes shared prefixes of prefix_len tokens, a suffix_len-token suffix
    per prompt, fixed outputs, num_prompts rounded down to whole prefixes; vLLM's defaults where the line is silent."""
    w = ServingWorkload.from_command("vllm bench serve --dataset-name prefix_repetition --prefix-repetition-prefix-len "
                                     "8000 --prefix-repetition-suffix-len 200 --prefix-repetition-num-prefixes 16 "
                                     "--prefix-repetition-output-len 64 --num-prompts 130 --num-warmups 2")
    assert (w.system_prompts.count, w.system_prompts.tokens) == (16, 8000)
    assert (w.input_tokens.kind, w.input_tokens.tokens, w.output_tokens.tokens, w.num_prompts) == ("fixed", 200, 64, 128)
    d = ServingWorkload.from_command("vllm bench serve --dataset-name prefix_repetition")
    assert (d.system_prompts.count, d.system_prompts.tokens, d.input_tokens.tokens, d.output_tokens.tokens) == (
        10, 256, 256, 128)
    with pytest.raises(InputError) as e:
        ServingWorkload.from_command("vllm bench serve --dataset-name prefix_repetition --num-prompts 5")
    assert e.value.field == "--prefix-repetition-num-prefixes" and "(got 10)" in e.value.message


@pytest.mark.parametrize("strategy", ["linear", "exponential"])
def test_ramp_up_moves_the_rate_from_start_to_end(strategy):
    """--ramp-up-strategy: request i's gap is drawn at the rate of its place in the run (vLLM's formula); the line
    round-trips; the rate's ends are the options' and the early gaps are longer than the late ones."""
    line = (f"vllm bench serve --random-input-len 64 --random-output-len 16 --ramp-up-strategy {strategy} "
            f"--ramp-up-start-rps 1 --ramp-up-end-rps 16 --num-prompts 2000")
    w = ServingWorkload.from_command(line)
    back = ServingWorkload.from_command(w.to_command())
    assert back.model_dump(exclude={"source"}) == w.model_dump(exclude={"source"})
    arr = w.arrivals()
    rates = arr.rates(5)
    assert rates[0] == 1.0 and rates[-1] == pytest.approx(16.0)
    assert rates[2] == pytest.approx(8.5 if strategy == "linear" else 4.0)
    gaps = np.diff(arr.times(2000, np.random.default_rng(0)))
    assert gaps[:200].mean() > 3 * gaps[-200:].mean()


@pytest.mark.parametrize("line, words", [
    ("vllm bench serve --ramp-up-strategy linear --ramp-up-start-rps 1", "together"),
    ("vllm bench serve --ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 5 --request-rate 3",
     "leave request_rate at inf"),
    ("vllm bench serve --ramp-up-strategy cubic --ramp-up-start-rps 1 --ramp-up-end-rps 5", "linear"),
    ("vllm bench serve --ramp-up-strategy linear --ramp-up-start-rps 0 --ramp-up-end-rps 5", "greater than 0"),
])
def test_bad_ramp_ups_are_refused(line, words):
    with pytest.raises(InputError) as e:
        ServingWorkload.from_command(line)
    assert words in e.value.one_line(), e.value.one_line()


@pytest.mark.parametrize("line", ["vllm bench serve --num-prompts 4", "/opt/venv/bin/vllm bench serve --num-prompts 4",
                                  "python3 benchmarks/benchmark_serving.py --num-prompts 4", "--num-prompts 4"])
def test_bench_serve_invocations_are_recognised(line):
    assert ServingWorkload.from_command(line).num_prompts == 4


@pytest.mark.parametrize("line", ["", "   "])
def test_an_empty_bench_serve_line_is_refused_not_taken_for_defaults(line):
    with pytest.raises(InputError, match="empty") as e:
        ServingWorkload.from_command(line)
    assert e.value.file == "--bench-serve"
