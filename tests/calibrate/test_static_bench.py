"""Static-KV-cache torch microbenchmark (issue 7's GPU path), exercised on CPU with tiny settings."""

import json

import pytest

from specsim_cli.main import main
from tests.conftest import error_lines

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.real_engine
def test_static_bench_writes_valid_records_and_bandwidth(tmp_path, capsys):
    out = tmp_path / "sb"
    code = main(["measure", "static-bench", "--arch", "smollm2-135m", "--layers", "2", "--out", str(out),
                 "--context", "32,96", "--batch", "1,2", "--new-tokens", "16", "--cached-tokens", "0,32",
                 "--gamma", "1,3", "--decode-tokens", "3", "--repeats", "1", "--dtype", "float32"])
    assert code == 0, capsys.readouterr().err
    assert main(["validate", "trace", str(out)]) == 0
    recs = [json.loads(l) for l in (out / "microbench.jsonl").read_text().splitlines()]
    ops = {r["op"] for r in recs}
    assert ops == {"decode", "prefill", "score", "verify"}
    assert sum(r["op"] == "decode" for r in recs) == 4 and sum(r["op"] == "verify" for r in recs) == 4
    bw = json.loads((out / "bandwidth.json").read_text())
    assert bw["catalog_hardware"] == "cpu" and bw["compile"] == "none" and len(bw["decode"]) == 4
    for d in bw["decode"]:
        assert d["step_s"] > 0 and d["bytes"] > 0
        assert d["fraction_of_datasheet"] == pytest.approx(d["bytes"] / d["step_s"] / bw["datasheet_bytes_per_s"])


def test_static_bench_bad_options_exit_2(tmp_path, capsys):
    code = main(["measure", "static-bench", "--arch", "smollm2-135m", "--out", str(tmp_path / "x"), "--context", "0,5"])
    err = capsys.readouterr().err
    assert code == 2 and "--context: must lie in 1..10000000 (got 0)" in err and len(error_lines(err)) == 1
    code = main(["measure", "static-bench", "--arch", "nope-1b", "--out", str(tmp_path / "y"), "--layers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown architecture" in err


@pytest.mark.real_engine
def test_chunked_cache_fill_equals_one_pass():
    """The untimed fill of a long context goes in chunks (a batch x 16k-token pass would need tens of GB of
    activations on a GPU); the cache it leaves gives the next token the same logits as one whole pass."""
    import torch

    from calibrate.measure.static_bench import StaticRunner

    r = StaticRunner("smollm2-135m", 2, "float32", "cpu", "none", 64)
    ids = r._ids(2, 40)
    one, chunked = r._cache(2, 48), r._cache(2, 48)
    with torch.inference_mode():
        r._forward(ids, one, torch.arange(40), keep=1)
        for lo in range(0, 40, 16):  # what _fill does with chunk=16
            r._forward(ids[:, lo:lo + 16], chunked, torch.arange(lo, min(40, lo + 16)), keep=1)
        nxt = r._ids(2, 1)
        a = r._forward(nxt, one, torch.tensor([40]))
        b = r._forward(nxt, chunked, torch.tensor([40]))
    assert torch.allclose(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.real_engine
def test_points_past_the_time_budget_are_skipped_and_listed(tmp_path):
    from calibrate.measure.static_bench import StaticPlan, run_static_bench

    plan = StaticPlan(contexts=[16], batches=[1], new_tokens=[8], cached_tokens=[0], gammas=[1], decode_tokens=2,
                      repeats=1)
    bw = run_static_bench("smollm2-135m", plan, tmp_path / "sb", layers=1, dtype="float32", device="cpu",
                          log=lambda *_: None, max_seconds=-1.0)
    assert {s["op"] for s in bw["skipped"]} == {"decode", "prefill", "verify"} and bw["decode"] == []
    assert all("time budget" in s["reason"] for s in bw["skipped"])
    assert json.loads((tmp_path / "sb" / "bandwidth.json").read_text())["skipped"] == bw["skipped"]


@pytest.mark.real_engine
def test_compiled_decode_step_runs_whole_graph(tmp_path):
    """The GPU path compiles the decode step with fullgraph=True (CUDA graphs come on top on a GPU): a graph
    break in the model's forward with a static cache would fail every GPU point; here inductor compiles it on CPU."""
    from calibrate.measure.static_bench import StaticPlan, run_static_bench

    plan = StaticPlan(contexts=[24], batches=[1], new_tokens=[8], cached_tokens=[0], gammas=[1], decode_tokens=2,
                      repeats=1)
    bw = run_static_bench("smollm2-135m", plan, tmp_path / "sb", layers=1, dtype="float32", device="cpu",
                          compile_mode="reduce-overhead", log=lambda *_: None)
    assert bw["compile"] == "reduce-overhead" and len(bw["decode"]) == 1 and bw["skipped"] == []


@pytest.mark.real_engine
def test_pass_times_give_every_pass_its_repeats():
    from calibrate.measure.static_bench import StaticRunner

    r = StaticRunner("smollm2-135m", 1, "float32", "cpu", "none", 64)
    times = r.pass_times(24, [(8, 1), (3, 3)], repeats=2)
    assert [len(t) for t in times] == [2, 2] and all(x > 0 for t in times for x in t)
