"""KV-bound bursts: the serving simulator's engine against vLLM's scheduler in engine steps, on the committed
measurement (reports/kv-waves/records.json, vLLM 0.32 on CPU); its bad-input handling. The real-engine measurement
itself is tests/calibrate/test_kv_waves_real.py."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from simulator.errors import InputError
from validate.kv_waves import compare, load_records, simulate_burst
from specsim_cli.main import main
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "reports" / "kv-waves" / "records.json"


@pytest.fixture(scope="module")
def measured():
    return compare(load_records(RECORDS))


def test_the_simulated_waves_are_vllms(measured):
    """Every burst: the engine steps in all within 3%, each request's finish step within 2% of the burst's steps on
    average, and the preemptions within a few of vLLM's (the bursts need 2-4x the cache at their peak: waves of admission,
    preemption and decode-only stretches)."""
    bursts, reqs = measured
    assert len(bursts) >= 4 and (bursts.demand_tokens > 1.9 * bursts.kv_tokens).all()
    assert (bursts.steps_error.abs() <= 0.03).all(), bursts
    assert (bursts.finish_mean_abs_steps <= 0.02 * bursts.steps_measured).all(), bursts
    plain = ~bursts.burst.str.startswith("speculative")
    assert plain.sum() >= 4 and (~plain).sum() >= 2
    # a speculating engine preempts less often than vLLM's (its slots for drafts are an average, not per block)
    assert ((bursts.preemptions_simulated - bursts.preemptions_measured)[plain].abs() <= 3).all(), bursts
    assert (bursts.preemptions_measured > 0).all()  # KV-bound for real
    # a request's finish step is its own, not only the burst's length: the order of finishes is vLLM's
    for _name, g in reqs.groupby("burst"):
        assert np.corrcoef(g.finish_measured, g.finish_simulated)[0, 1] > 0.98


def test_the_draft_slots_are_what_closes_the_speculative_gap(measured, monkeypatch):
    """Without the slots a speculating sequence holds for its drafts (vLLM allocates the gamma drafts it verifies and
    gamma lookahead slots every step), the speculative bursts' requests finish several steps off on average."""
    from simulator.engines.serving import replica

    doc = load_records(RECORDS)
    spec = [r for r in doc["runs"] if r["burst"].get("gamma")]
    err = lambda r, sim: float(np.mean(np.abs(np.asarray(sim["finish_step"]) - np.asarray(r["finish_step"]))))  # noqa: E731
    with_slots = [err(r, simulate_burst(r)) for r in spec]
    monkeypatch.setattr(replica, "speculative_slots", lambda drafting, gamma: 0)
    without = [err(r, simulate_burst(r)) for r in spec]
    assert max(with_slots) < 2.0 and max(without) > 1.5 * max(with_slots)


def test_the_partial_last_block_is_what_closes_the_gap(measured, monkeypatch):
    """Without the expected unfilled half block per running sequence, the tightest bursts finish 5-6% early."""
    from simulator.cost import memory_plan

    monkeypatch.setattr(memory_plan.MemoryPlan, "partial_block_tokens", property(lambda self: 0))
    doc = load_records(RECORDS)
    early = [simulate_burst(r)["steps"] / len(r["steps"]) - 1.0 for r in doc["runs"] if not r["burst"].get("gamma")]
    with_block = measured[0].steps_error.abs().max()  # every burst, speculative ones too
    assert min(early) < -0.04 and with_block < 0.03


@settings(max_examples=examples(15), deadline=None)
@given(st.integers(4, 30), st.integers(20, 400), st.integers(2, 120), st.integers(20, 200),
       st.sampled_from([16, 32]), st.integers(0, 9))
def test_any_kv_bound_burst_finishes_within_the_cache(n, p, o, blocks, block, seed):
    """Random bursts on random caches: every request finishes with all its tokens, in order of steps, and the
    simulated cache never holds more than its blocks (an oversized request runs alone, as vLLM runs it)."""
    rng = np.random.default_rng(seed)
    ins = [int(x) for x in rng.integers(max(p // 2, 1), p * 3 // 2 + 1, n)]
    outs = [int(x) for x in rng.integers(max(o // 2, 1), o * 3 // 2 + 1, n)]
    run = {"input_tokens": ins, "output_tokens": outs, "blocks": blocks, "block_size": block,
           "engine_limits": {"max_num_batched_tokens": 256, "max_num_seqs": 256}}
    sim = simulate_burst(run)
    assert all(1 <= f <= d <= sim["steps"] for f, d in zip(sim["first_token_step"], sim["finish_step"]))
    assert sim["steps"] >= max(outs)  # a request needs at least its outputs' steps


def test_bad_records_are_one_clear_line(tmp_path, capsys):
    bad = tmp_path / "records.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="records JSON"):
        load_records(bad)
    bad.write_text(json.dumps({"runs": [{"burst": {}}]}), encoding="utf-8")
    with pytest.raises(InputError, match="missing"):
        load_records(bad)
    good = load_records(RECORDS)["runs"][0]
    for field, value in (("blocks", "100"), ("input_tokens", [0] * len(good["input_tokens"])),
                         ("finish_step", good["finish_step"][:-1])):
        bad.write_text(json.dumps({"runs": [{**good, field: value}]}), encoding="utf-8")
        with pytest.raises(InputError) as e:
            load_records(bad)
        assert e.value.field.startswith("runs[0]"), e.value.field
    assert main(["validate", "kv-waves", "--records", str(bad), "--out", str(tmp_path / "rep")]) == 2
    err = capsys.readouterr().err
    assert "records.json" in err and "Traceback" not in err
    assert not (tmp_path / "rep").exists() or not any((tmp_path / "rep").iterdir())
