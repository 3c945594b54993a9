"""calibrate/fit/burst_probe.py: the raw per-engine burst table (B_eff = output tok/s x median ITL) and the prefill
share of peak, on small tables written here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibrate.fit.burst_probe import engines_table, intake_table, is_burst


def _table(tmp_path, rows):
    cols = ["file", "serve_cmd", "max_concurrency", "requests", "out_tok", "out_tps", "median_itl_ms", "mean_ttft_ms",
            "duration_s"]
    pd.DataFrame(rows, columns=cols).to_csv(tmp_path / "serving_benchmarks.csv", index=False)
    return tmp_path


def test_engines_table_is_littles_law_at_the_median_step_over_bursts_only(tmp_path):
    folder = _table(tmp_path, [
        ("m__h100.md", "vllm serve m", None, 1000, 200_000, 4000.0, 50.0, 10_000.0, 50.0),
        ("m__h100.md", "vllm serve m", None, 1000, 200_000, 6000.0, 50.0, 5_000.0, 25.0),
        ("m__h100.md", "python3 -m sglang.launch_server --model-path m", None, 1000, 200_000, 5000.0, 40.0, 4_000.0, 40.0),
        ("m__h100.md", "vllm serve m", 4, 100, 20_000, 400.0, 10.0, 50.0, 50.0),  # closed loop: not a burst
        ("m__h100.md", "vllm serve m", None, 1000, 4_000, 900.0, 200.0, 3_000.0, 4.0),  # 4 tokens each: not one
    ])
    t = engines_table(folder).set_index("engine")
    assert t.loc["vllm", "bursts"] == 2 and t.loc["sglang", "bursts"] == 1
    assert t.loc["vllm", "b_eff_median"] == pytest.approx((200 + 300) / 2)
    assert t.loc["vllm", "ttft_share_median"] == pytest.approx(0.2)
    assert t.loc["sglang", "b_eff_max"] == pytest.approx(200.0)


def test_intake_table_is_time_per_request_of_the_4_token_bursts_per_engine_and_doc(tmp_path):
    folder = _table(tmp_path, [
        ("m__h200.md", "vllm serve m -tp 8", None, 1000, 4_000, 200.0, 300.0, 18_000.0, 20.0),
        ("m__h200.md", "vllm serve m -tp 8 --async-scheduling", None, 1000, 4_000, 200.0, 300.0, 16_000.0, 10.0),
        ("m__h200.md", "python3 -m sglang.launch_server --model m", None, 1000, 4_000, 600.0, 90.0, 3_000.0, 6.0),
        ("m__h200.md", "vllm serve m -tp 8", 4, 100, 20_000, 200.0, 20.0, 120.0, 100.0),  # 4 users: its TTFT
        ("m__h200.md", "vllm serve m -tp 8", None, 1000, 200_000, 3000.0, 60.0, 15_000.0, 70.0),  # not 4 tokens
        ("m__a100.md", "trtllm-serve m", None, 1000, 4_000, 300.0, 100.0, 5_000.0, 10.0),
    ])
    t = intake_table(folder).set_index(["file", "engine"])
    assert t.loc[("m__h200.md", "vllm"), "bursts"] == 2
    assert t.loc[("m__h200.md", "vllm"), "ms_per_request"] == pytest.approx(15.0)  # median of 20 and 10 ms
    assert t.loc[("m__h200.md", "vllm"), "ttft_share"] == pytest.approx((0.9 + 1.6) / 2)
    assert t.loc[("m__h200.md", "vllm"), "ttft_ms_4_users"] == pytest.approx(120.0)
    assert t.loc[("m__h200.md", "sglang"), "ms_per_request"] == pytest.approx(6.0)
    assert pd.isna(t.loc[("m__h200.md", "sglang"), "ttft_ms_4_users"])
    assert t.loc[("m__a100.md", "trtllm"), "ttft_share"] == pytest.approx(0.5)


@pytest.mark.parametrize("req,out,conc,want", [(1000, 200_000, None, True), (984, 190_000, float("nan"), True),
                                               (1000, 4_000, None, False), (500, 100_000, None, False),
                                               (1000, 200_000, 64, False)])
def test_is_burst(req, out, conc, want):
    assert is_burst(req, out, conc) is want


def test_burst_probe_command_refuses_bad_tables_and_folders(tmp_path, capsys):
    from specsim_cli.main import main

    assert main(["measure", "burst-probe", "nope"]) == 2
    assert "table" in capsys.readouterr().err
    assert main(["measure", "burst-probe", "engines", "--released", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "serving_benchmarks.csv" in err and "Traceback" not in err


def test_probe_intake_reads_cost_and_first_share():
    from calibrate.fit.host_fit import probe_intake

    class Probe:
        requests = 1000
        measured = {"duration_s": 20.0, "mean_ttft_ms": 17_000.0}

    c, s = probe_intake(Probe())
    assert c == pytest.approx(0.02) and s == pytest.approx(0.7)
    Probe.measured = {"duration_s": 20.0, "mean_ttft_ms": 8_000.0}  # earlier than a one-stage front end: s = 0
    assert probe_intake(Probe())[1] == 0.0


def test_two_stage_prediction_waits_for_the_first_stage(tmp_path):
    """A burst through a deployment's own two-stage front end (the replica's ``front_end_first_share``): no first
    token before the whole burst's first stage (n s c), the run no shorter than n c; s = 0 at the same c never
    later; a closed loop of 4 users at the same c pays it once per request."""
    from calibrate.fit.gpustack_import import TABLE, released_runs
    from calibrate.fit.released_predict import predict_released
    from tests.calibrate.test_gpustack_import import ROW

    pd.DataFrame([dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B"),
                  dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B", max_concurrency=4)]).to_csv(tmp_path / TABLE, index=False)
    runs, _ = released_runs(tmp_path)
    burst, loop = runs
    n, c = burst.requests, 0.05
    p1 = predict_released(burst, intake=(c, 1.0))
    p0 = predict_released(burst, intake=(c, 0.0))
    assert p1["ttft_ms"] / 1e3 >= n * c and p0["ttft_ms"] <= p1["ttft_ms"]
    out = burst.requests * burst.output_tokens
    assert out / p1["out_tps"] >= n * c and out / p0["out_tps"] >= n * c
    q = predict_released(loop, intake=(c, 0.5))
    assert q["ttft_ms"] / 1e3 >= c and q["out_tps"] > 0


def test_two_stage_command_refuses_a_bad_fits_file(tmp_path, capsys):
    from calibrate.fit.gpustack_import import TABLE
    from specsim_cli.main import main
    from tests.calibrate.test_gpustack_import import ROW

    pd.DataFrame([dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B")]).to_csv(tmp_path / TABLE, index=False)
    bad = tmp_path / "fits.json"
    for text in ("{not json", "[1, 2]"):
        bad.write_text(text)
        assert main(["measure", "burst-probe", "two-stage", "--released", str(tmp_path), "--fits", str(bad)]) == 2
        err = capsys.readouterr().err
        assert "fits.json" in err and "Traceback" not in err
    assert main(["measure", "burst-probe", "two-stage", "--released", str(tmp_path)]) == 0  # no probe: an empty table


def test_every_what_if_variant_predicts_on_the_catalog(tmp_path):
    """Each assumption of the what-if table runs on the engine catalog as it is (a streaming cost with the catalog's
    two-stage front end, or with one stage as the older variants set it), and the streaming cost slows a burst down,
    never speeds it up: each streaming variant against the same host terms without it."""
    from calibrate.fit.burst_probe import VARIANTS, predict
    from calibrate.fit.gpustack_import import TABLE, released_runs
    from tests.calibrate.test_gpustack_import import ROW

    pd.DataFrame([dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B")]).to_csv(tmp_path / TABLE, index=False)
    (burst,), _ = released_runs(tmp_path)
    got = {v: predict(burst, **kw) for v, kw in VARIANTS.items()}
    for v, p in got.items():
        assert all(np.isfinite(p[f]) and p[f] > 0 for f in ("out_tps", "ttft_ms", "itl_ms")), v
    slow = [v for v, kw in VARIANTS.items() if kw.get("host", {}).get("front_end_token_s")]
    assert len(slow) >= 2 and any("front_end_first_share" not in VARIANTS[v]["host"] for v in slow)
    for v in slow:
        free = predict(burst, host={k: x for k, x in VARIANTS[v]["host"].items() if k != "front_end_token_s"})
        assert got[v]["out_tps"] <= free["out_tps"] * (1 + 1e-9), v


def test_typical_table_reads_each_burst_as_its_median_request_sees_it(tmp_path):
    """Only bursts (>= 900 requests, > 100 tokens out each) are in it; the medians come from the measured table and
    the simulator's requests; the admission share is 2 x median TTFT over the run's duration, in (0, ~2]."""
    from calibrate.fit.burst_probe import typical_table
    from calibrate.fit.gpustack_import import TABLE, released_runs
    from tests.calibrate.test_gpustack_import import ROW

    burst = dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B", requests=900, in_tok=900 * 128, out_tok=900 * 120,
                 duration_s=40.0, median_ttft_ms=8000.0, median_tpot_ms=30.0, mean_tpot_ms=45.0)
    pd.DataFrame([burst, dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B")]).to_csv(tmp_path / TABLE, index=False)
    runs, _ = released_runs(tmp_path)
    t = typical_table(runs)
    assert len(t) == 1 and t.admission_share.iloc[0] == pytest.approx(2 * 8.0 / 40.0)
    assert t.median_ratio.iloc[0] == pytest.approx(30.0 / t.pred_median_tpot_ms.iloc[0])
    assert 0 < t.pred_admission_share.iloc[0] <= 2 and t.pred_median_tpot_ms.iloc[0] > 0
    from calibrate.fit.burst_probe import typical_summary

    sm = typical_summary(t)
    assert list(sm.gpus) == ["h100/h200"] and sm.bursts.iloc[0] == 1
    assert sm.median_tpot_ratio.iloc[0] == pytest.approx(t.median_ratio.iloc[0])


def test_admission_table_sets_each_burst_beside_its_docs_probe(tmp_path):
    """A burst of >= 16 tokens out is in the table only with a 4-token burst of its doc at its TP (the probe); its
    ratios are measured / predicted; the probe's ratio is its measured over predicted duration, so a probe measured
    twice as long has twice the ratio; the predicted KV peak share is a share of the cache the run held."""
    from calibrate.fit.burst_probe import admission_summary, admission_table
    from calibrate.fit.gpustack_import import TABLE, released_runs
    from calibrate.fit.released_predict import predict_released
    from tests.calibrate.test_gpustack_import import ROW

    cmd = "vllm serve Qwen/Qwen3-14B"
    probe = dict(ROW, serve_cmd=cmd, requests=900, in_tok=900 * 128, out_tok=900 * 4, duration_s=6.0)
    other_tp = dict(ROW, serve_cmd=cmd + " -tp 2")
    rows = [dict(ROW, serve_cmd=cmd), probe, other_tp]
    pd.DataFrame(rows).to_csv(tmp_path / TABLE, index=False)
    runs, _ = released_runs(tmp_path)
    t = admission_table(runs)
    burst = next(r for r in runs if r.tp == 1 and r.output_tokens >= 16)
    p = predict_released(burst)
    assert list(t.run) == [burst.key] and t.probe.iloc[0] == runs[1].key
    assert t.ttft_ratio.iloc[0] == pytest.approx(ROW["mean_ttft_ms"] / p["ttft_ms"])
    assert t.out_tps_ratio.iloc[0] == pytest.approx(ROW["out_tps"] / p["out_tps"])
    assert 0 < t.kv_peak_share.iloc[0] <= 1 and t.preemptions.iloc[0] >= 0
    assert t.prompts_per_step.iloc[0] == pytest.approx(burst.max_num_batched_tokens / burst.input_tokens)
    pd.DataFrame([rows[0], dict(probe, duration_s=12.0)]).to_csv(tmp_path / TABLE, index=False)
    twice = admission_table(released_runs(tmp_path)[0])
    assert twice.probe_ratio.iloc[0] == pytest.approx(2 * t.probe_ratio.iloc[0])
    s = admission_summary(t).set_index("bursts")
    assert s.loc["all", "runs"] == 1 and np.isnan(s.loc["all", "probe_ratio ~ ttft"])  # too few bursts to rank
