"""The released `vllm bench serve` table importer (calibrate/fit/gpustack_import.py) and the host fit's pieces."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from calibrate.fit.gpustack_import import COLUMNS, GPUSTACK, TABLE, dataset_of, released_runs
from calibrate.fit.host_fit import nearest, summary
from simulator.errors import InputError

ROW = {"file": "qwen3-14b__h100.md", "hardware": "A single NVIDIA H100 SXM GPU.",
       "engine_versions": "- vLLM: v0.11.0 - SGLang: v0.5.5", "section": "s", "block_comment": "",
       "max_concurrency": None, "requests": 20, "in_tok": 20 * 128, "out_tok": 20 * 64, "duration_s": 1.0,
       "out_tps": 1000.0, "mean_ttft_ms": 100.0, "median_ttft_ms": 90.0, "mean_tpot_ms": 20.0, "median_tpot_ms": 19.0,
       "p99_tpot_ms": 30.0, "mean_itl_ms": 20.0, "median_itl_ms": 19.0, "accept_len": None, "accept_rate": None}


def _table(tmp_path, rows):
    pd.DataFrame(rows).to_csv(tmp_path / TABLE, index=False)
    return tmp_path


def test_row_parsing(tmp_path):
    rows = [dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B-FP8 -tp 2 --async-scheduling --max-num-batched-tokens 4096 "
                               "--gpu-memory-utilization 0.85 --kv-cache-dtype fp8"),
            dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B", max_concurrency=4),
            dict(ROW, serve_cmd="vllm serve zai-org/GLM-4.6 -tp 8"),
            dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B -pp 2"),
            dict(ROW, serve_cmd="python3 -m sglang.launch_server --model Qwen/Qwen3-14B"),
            dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B --max-num-batched-tokens 128 --max-num-seqs 256")]
    runs, skipped = released_runs(_table(tmp_path, rows))
    assert len(runs) == 2 and sum(skipped.values()) == 4
    assert any(k.startswith("scheduler limits vLLM refuses (max_num_batched_tokens (128) must be") for k in skipped)
    a, b = runs
    assert (a.model, a.weight_dtype, a.kv_dtype, a.tp, a.async_scheduling) == ("qwen3-14b", "fp8", "fp8", 2, True)
    assert (a.max_num_batched_tokens, a.gpu_memory_utilization, a.concurrency) == (4096, 0.85, None)
    # the doc's hardware line says H100 SXM; this doc is read as the H100 PCIe its decode steps show (MEASURED_ON)
    assert (a.input_tokens, a.output_tokens, a.version, a.gpu, a.labelled_gpu) == (128, 64, "0.11", "h100-pcie",
                                                                                  "h100-sxm")
    # vLLM's defaults for an 80 GB H100 (not an A100): 8192 tokens, 1024 sequences; closed loop of 4
    assert (b.max_num_batched_tokens, b.max_num_seqs, b.gpu_memory_utilization, b.concurrency) == (8192, 1024, 0.9, 4)


def test_gpu_as_measured_or_as_labelled(tmp_path):
    """A doc in MEASURED_ON is read as the GPU its runs show, unless as_labelled; any other doc keeps its label."""
    from calibrate.fit.gpustack_import import MEASURED_ON

    rows = [dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B"),
            dict(ROW, file="qwen3-235b-a22b__h100.md", hardware="8 x NVIDIA H100 SXM GPUs on a single node.", out_tps=900.0,
                 serve_cmd="vllm serve Qwen/Qwen3-235B-A22B-Instruct-2507 -tp 8")]
    folder = _table(tmp_path, rows)
    measured, _ = released_runs(folder)
    labelled, _ = released_runs(folder, as_labelled=True)
    assert [r.gpu for r in measured] == [MEASURED_ON["qwen3-14b__h100.md"], "h100-sxm"]
    assert [r.gpu for r in labelled] == ["h100-sxm", "h100-sxm"]
    assert [r.labelled_gpu for r in measured] == [r.labelled_gpu for r in labelled] == ["h100-sxm", "h100-sxm"]
    # the H100 PCIe a doc is read as: vLLM's large defaults, as for the SXM it is labelled (both report >= 70 GiB)
    assert [(r.max_num_batched_tokens, r.max_num_seqs) for r in measured] == [(8192, 1024)] * 2


@pytest.mark.skipif(not (GPUSTACK / TABLE).is_file(), reason="released table not in ../shared/data")
def test_relabelled_docs_decode_at_a_pcie_bandwidth():
    """The model-free evidence behind MEASURED_ON: where an H100 doc has a 32k-context decode step beside its A100
    sibling's, their ITL ratio is nearer the PCIe / A100 bandwidth ratio exactly when the doc is read as a PCIe."""
    from calibrate.fit.gpustack_import import MEASURED_ON
    from validate.serving.gpu_labels import itl_ratios

    runs, _ = released_runs()
    t = itl_ratios(runs)
    assert t.doc.isin(list(MEASURED_ON)).any()
    for r in t.to_dict("records"):  # a doc read as measured on a PCIe card decodes like one; the others like an SXM
        ratio = r["a100_over_h100"]
        nearer_pcie = abs(ratio - r["h100-pcie_bw_over_a100"]) < abs(ratio - r["h100-sxm_bw_over_a100"])
        assert nearer_pcie == (r["doc"] in MEASURED_ON), r


@pytest.mark.parametrize("comment, i, o, want", [
    ("# ShareGPT batch size 4", 229.0, 214.0, "sharegpt"),  # the comment says so
    ("# random 4K input", 3995.1, 104.6, "random"),  # ... or names a random length
    (None, 217.4, 201.4, "sharegpt"),  # no round prompt length, inside ShareGPT's filter
    ("# Benchmark on random dataset (fixed seed)", 216.4, 197.0, "sharegpt"),  # a stale comment; the lengths decide
    (None, 127.7, 4.0, "random"), (None, 2000.0, 100.0, "random"), (None, 1009.9, 2000.0, "random"),
    (None, 342.1, 1900.0, "random"),  # beyond ShareGPT's 2048-token filter
])
def test_dataset_of(comment, i, o, want):
    assert dataset_of(comment, i, o) == want


def test_sharegpt_runs_replay_a_spread_of_lengths_at_their_means(tmp_path):
    """A ShareGPT run's requests are not one length: the plans' means are the run's, their prompts vary."""
    import numpy as np

    from calibrate.fit.released_predict import run_workload

    runs, _ = released_runs(_table(tmp_path, [dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B", requests=1000,
                                                   in_tok=217_400, out_tok=201_400),
                                              dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B")]))
    share, rand = runs
    assert (share.dataset, rand.dataset) == ("sharegpt", "random")
    plans, _, _ = run_workload(share).plans(share.requests, seed=0)
    new = np.array([p.calls[0].new_tokens for p in plans])
    out = np.array([p.calls[0].out_tokens for p in plans])
    assert new.mean() == pytest.approx(217, rel=0.08) and out.mean() == pytest.approx(201, rel=0.08)
    assert new.std() > 0.5 * new.mean() and 4 <= new.min() and new.max() <= 1024
    plans, _, _ = run_workload(rand).plans(rand.requests, seed=0)
    assert {(p.calls[0].new_tokens, p.calls[0].out_tokens) for p in plans} == {(128, 64)}


def test_missing_column_is_an_input_error(tmp_path):
    df = pd.DataFrame([dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B")]).drop(columns=["out_tps"])
    df.to_csv(tmp_path / TABLE, index=False)
    with pytest.raises(InputError, match="out_tps"):
        released_runs(tmp_path)
    with pytest.raises(InputError, match="not found"):
        released_runs(tmp_path / "nowhere")


@pytest.mark.skipif(not (GPUSTACK / TABLE).is_file(), reason="released table not in ../shared/data")
def test_released_table_properties():
    runs, skipped = released_runs()
    total = len(pd.read_csv(GPUSTACK / TABLE))
    assert len(runs) + sum(skipped.values()) == total
    assert runs and all(r.requests > 0 and r.input_tokens >= 1 and r.output_tokens >= 1 for r in runs)
    assert all(r.measured["out_tps"] > 0 for r in runs)
    assert set(COLUMNS) <= set(pd.read_csv(GPUSTACK / TABLE).columns)
    # every closed-loop 4-user block is ShareGPT (the docs say so above each), every "random N input" block random
    assert all(r.dataset == "sharegpt" for r in runs if r.concurrency == 4)
    assert {r.dataset for r in runs} <= {"sharegpt", "random"}


def test_nearest_version_and_summary():
    fitted = {"0.10": {"a": 1}, "0.13": {"a": 2}}
    assert nearest("0.10", fitted) == {"a": 1} and nearest("0.12", fitted) == {"a": 2}
    assert nearest("0.11", {}) is None
    t = pd.DataFrame({"gpu": ["x", "x", "y"], "in_fit": [True, True, False],
                      **{f"err_{f}": [0.1, -0.3, 5.0] for f in ("tpot_ms", "itl_ms", "ttft_ms", "out_tps")}})
    s = summary(t, "gpu").set_index("gpu")
    assert s.loc["all", "runs"] == 2 and s.loc["all", "tpot_ms median |err| %"] == pytest.approx(20.0)
    assert s.loc["x", "tpot_ms bias %"] == pytest.approx(-10.0)


def test_prediction_laws(tmp_path):
    """More concurrent host latency per request never shortens TTFT; more per sequence never speeds up a token. The
    serial share t_fe is pinned in both: pacing a burst's arrivals can shorten its mean TTFT (smaller prefill steps)."""
    from calibrate.fit.released_predict import predict_released

    runs, _ = released_runs(_table(tmp_path, [dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B")]))
    r = runs[0]
    base = {"seq_overhead_s": 1e-5, "call_overhead_s": 1e-3, "front_end_serial_s": 1e-3, "async_overlap": 0.0}
    p0 = predict_released(r, base)
    p1 = predict_released(r, {**base, "call_overhead_s": 2e-2})
    p2 = predict_released(r, {**base, "seq_overhead_s": 2e-4})
    p3 = predict_released(r, {**base, "call_overhead_s": 2e-2, "front_end_serial_s": 2e-2})
    assert p1["ttft_ms"] >= p0["ttft_ms"] and p2["tpot_ms"] >= p0["tpot_ms"] and p2["itl_ms"] >= p0["itl_ms"]
    # the whole of t_call serial (a burst passes the front end in turn) never admits faster than its concurrent part
    assert p3["ttft_ms"] >= p1["ttft_ms"] and p3["out_tps"] <= p1["out_tps"] + 1e-9
    assert p0["out_tps"] > 0 and 1 <= p0["batch_mean"] <= r.requests
    assert 0 < p0["itl_ms"] <= p0["mean_itl_ms"] * 10


def test_serial_bound_and_catalog_terms(tmp_path):
    """The serial front end's upper bound is the fastest burst's 2 x mean TTFT / (N - 1); the catalog's t_call is
    the fit's concurrent latency plus its serial part."""
    from dataclasses import replace as dc_replace

    from calibrate.fit.host_fit import UPPER, catalog_terms, serial_bound

    runs, _ = released_runs(_table(tmp_path, [dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B")]))
    r = runs[0]
    assert serial_bound([r]) == pytest.approx(min(1.0 / 20, 2e-3 * 100.0 / 19))  # duration 1 s, mean TTFT 100 ms
    assert serial_bound([dc_replace(r, measured={**r.measured, "duration_s": 0.02})]) == pytest.approx(0.001)
    assert serial_bound([dc_replace(r, concurrency=4)]) == UPPER["front_end_serial_s"]
    c = catalog_terms({"seq_overhead_s": 1e-5, "tp_step_overhead_s": 0.0, "call_latency_s": 0.02,
                       "front_end_serial_s": 0.003, "async_overlap": 0.2})
    assert c["call_overhead_s"] == pytest.approx(0.023) and c["front_end_serial_s"] == 0.003


def test_a_version_of_one_model_gets_no_terms_of_its_own(tmp_path):
    """Host terms fitted on one model's runs would carry its GPU-step error to every model of the version: a version
    needs runs of two models (MIN_MODELS); fewer, and it maps to [] and its old catalog entry is dropped."""
    import yaml

    from calibrate.fit.host_fit import MIN_MODELS, put_versions, supported_versions

    assert MIN_MODELS == 2
    rows = [dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B"),
            dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-32B", file="qwen3-32b__h100.md", out_tps=900.0),
            dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B", engine_versions="- vLLM: v0.13.0", out_tps=800.0),
            dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B -tp 2", engine_versions="- vLLM: v0.13.0", out_tps=700.0)]
    runs, _ = released_runs(_table(tmp_path, rows))
    sup = supported_versions(runs)
    assert len(sup["0.11"]) == 2 and sup["0.13"] == []
    cat = tmp_path / "hosts.yaml"
    entry = lambda v: {"version": v, "seq_overhead_s": {"value": 1e-5, "kind": "prior", "source": "t"}}  # noqa: E731
    cat.write_text("# head\n" + yaml.safe_dump({"provenance": {}, "engines": {"vllm": [entry("0.11"), entry("0.13")]}}))
    put_versions(cat, [entry("0.11")], drop=("0.13",))
    kept = yaml.safe_load(cat.read_text())["engines"]["vllm"]
    assert [e["version"] for e in kept] == ["0.11"] and cat.read_text().startswith("# head")


def test_sharegpt_spread_summary_groups_by_spread():
    """The sensitivity's summary: per spread, one row per GPU x load and one over all runs, the median |error| of
    each figure (host_fit.summary's), so a table of errors e gives |e|'s median."""
    from validate.serving.sharegpt_sensitivity import summarise

    rows = []
    for sigma in (0.0, 1.0):
        for gpu, load, e in (("h200", "burst", 0.1), ("h200", "burst", -0.3), ("a100-80gb", "4 users", 0.5)):
            rows.append({"sigma": sigma, "gpu": gpu, "load": load, "in_fit": True,
                         **{f"err_{f}": e * (1 + sigma) for f in ("tpot_ms", "itl_ms", "ttft_ms", "out_tps")}})
    s = summarise(pd.DataFrame(rows)).set_index(["group", "sigma"])
    assert len(s) == 6 and s.loc[("all", 0.0), "runs"] == 3 and s.loc[("h200 burst", 1.0), "runs"] == 2
    assert s.loc[("h200 burst", 0.0), "ttft_ms median |err| %"] == pytest.approx(20.0)
    assert s.loc[("all", 1.0), "out_tps median |err| %"] == pytest.approx(60.0)


@pytest.mark.skipif(not (GPUSTACK / TABLE).is_file(), reason="released table not in ../shared/data")
def test_step_model_agrees_with_the_gpu_each_h100_doc_is_read_as():
    """The step model's evidence (validate/serving/gpu_labels.py): each H100 doc's long-prompt decode steps are
    predicted closer on the GPU it is read as than on the other H100 (no host term fitted on these runs)."""
    from validate.serving.gpu_labels import label_evidence

    runs, _ = released_runs()
    ev = label_evidence(runs)
    assert len(ev) >= 2 and (ev.read_as != ev.labelled).any() and (ev.read_as == ev.labelled).any()
    for r in ev.to_dict("records"):
        closer = "other" if abs(r["itl_bias_as_other"]) < abs(r["itl_bias_as_labelled"]) else "labelled"
        assert closer == ("labelled" if r["read_as"] == r["labelled"] else "other"), r


def test_first_share_is_measured_from_the_versions_4_token_bursts_and_reaches_the_catalog(tmp_path):
    """The two-stage front end's share s: the median over a version's 4-token bursts of 2 x TTFT / duration - 1,
    model-free, fixed in the fit, carried by catalog_terms and written to the catalog as its own entry."""
    import yaml

    from calibrate.fit.host_fit import first_share
    from calibrate.fit.host_fit import catalog_terms, write_catalog

    probe = dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B", requests=1000, in_tok=128_000, out_tok=4000,
                 duration_s=20.0, out_tps=200.0)
    rows = [dict(probe, mean_ttft_ms=16_000.0),
            dict(probe, mean_ttft_ms=14_000.0, serve_cmd="vllm serve Qwen/Qwen3-14B --async-scheduling"),
            dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B")]
    runs, _ = released_runs(_table(tmp_path, rows))
    assert first_share(runs) == pytest.approx(np.median([0.6, 0.4]))
    assert first_share([runs[-1]]) is None  # no 4-token burst: no share
    f = {"seq_overhead_s": 1e-5, "tp_step_overhead_s": 0.0, "call_latency_s": 0.02, "front_end_serial_s": 0.003,
         "async_overlap": 0.2, "front_end_first_share": 0.5, "rms_log": 0.1, "runs": 3,
         "front_end_serial_max_s": 0.004}
    assert catalog_terms(f)["front_end_first_share"] == 0.5
    assert "front_end_first_share" not in catalog_terms({k: v for k, v in f.items() if k != "front_end_first_share"})
    cat = tmp_path / "hosts.yaml"
    cat.write_text(yaml.safe_dump({"provenance": {}, "engines": {"vllm": []}}))
    write_catalog({"0.11": f}, cat, "test", "2026-11-29")
    ent = yaml.safe_load(cat.read_text())["engines"]["vllm"][0]
    assert ent["front_end_first_share"]["value"] == 0.5 and "model-free" in ent["front_end_first_share"]["source"]


def test_the_catalog_keeps_its_t_call_where_the_refit_does_not_identify_t_lat(tmp_path):
    """write_catalog: a fitted t_lat whose standard error is at least its value leaves the version's t_call as the
    catalog had it (noted once, however often rerun); an identified one, or a version new to the catalog, is written."""
    import yaml

    from calibrate.fit.host_fit import KEPT_NOTE, write_catalog

    f = {"seq_overhead_s": 1e-5, "tp_step_overhead_s": 0.0, "call_latency_s": 0.004, "call_latency_s_stderr": 0.014,
         "front_end_serial_s": 0.003, "async_overlap": 0.2, "rms_log": 0.1, "runs": 3, "front_end_serial_max_s": 0.004}
    cat = tmp_path / "hosts.yaml"
    cat.write_text(yaml.safe_dump({"provenance": {}, "engines": {"vllm": []}}))
    call = lambda: yaml.safe_load(cat.read_text())["engines"]["vllm"][0]["call_overhead_s"]  # noqa: E731
    write_catalog({"0.11": f}, cat, "test", "2026-11-29")
    assert call()["value"] == pytest.approx(0.007)  # new to the catalog: the fit's t_lat + t_fe
    raw = yaml.safe_load(cat.read_text())
    raw["engines"]["vllm"][0]["call_overhead_s"].update(value=0.025, source="earlier fit")
    cat.write_text(yaml.safe_dump(raw))
    for t_lat in (0.004, 0.005):  # rerun: one note, naming the latest refit's t_lat
        write_catalog({"0.11": dict(f, call_latency_s=t_lat)}, cat, "test", "2026-11-30")
        assert call()["value"] == 0.025 and call()["source"].count(KEPT_NOTE) == 1
        assert call()["source"].endswith("earlier fit") and f"({t_lat:.3g} +- " in call()["source"]
    write_catalog({"0.11": dict(f, call_latency_s_stderr=0.001)}, cat, "test", "2026-11-30")  # identified: written
    assert call()["value"] == pytest.approx(0.007)


def test_output_caps_and_early_ends_of_random_runs(tmp_path):
    """The random dataset's max_tokens is the largest mean output among the table's runs of the same asked prompt
    length (tokenizers move 2000 to 1996-2000) and request count; a run below it replays, with early ends, capped
    requests whose mean is the run's; ShareGPT runs have no cap; without early ends every request is the mean."""
    from calibrate.fit.gpustack_import import output_caps, round_length
    from calibrate.fit.released_predict import run_workload

    rand = dict(ROW, block_comment="# random 2K input", requests=500)
    rows = [dict(rand, serve_cmd="vllm serve Qwen/Qwen3-14B", in_tok=500 * 1996, out_tok=500 * 100),
            dict(rand, serve_cmd="vllm serve openai/gpt-oss-20b", file="gpt-oss-20b__h100.md", in_tok=500 * 1998,
                 out_tok=500 * 94, out_tps=900.0),  # other figures than the first row's (else a copy, dropped)
            dict(ROW, serve_cmd="vllm serve Qwen/Qwen3-14B", block_comment="# ShareGPT", requests=1000,
                 in_tok=1000 * 217, out_tok=1000 * 201, out_tps=800.0)]
    pd.DataFrame(rows).to_csv(tmp_path / TABLE, index=False)
    assert round_length(1996) == 2000 and round_length(217) is None
    assert output_caps(pd.read_csv(tmp_path / TABLE)) == {(2000, 500): 100}
    runs, _ = released_runs(tmp_path)
    by = {(r.model, r.dataset): r for r in runs}
    early, full, sharegpt = by[("gpt-oss-20b", "random")], by[("qwen3-14b", "random")], by[("qwen3-14b", "sharegpt")]
    assert (early.output_cap, full.output_cap, sharegpt.output_cap) == (100, 100, None)
    out = np.array([p.calls[0].out_tokens for p in run_workload(early, early_end=True).plans(500, seed=0)[0]])
    assert out.max() == 100 and out.min() < 50 and abs(out.mean() / 94 - 1) < 0.03
    same = np.array([p.calls[0].out_tokens for p in run_workload(early).plans(500, seed=0)[0]])
    assert (same == 94).all()
    at_cap = np.array([p.calls[0].out_tokens for p in run_workload(full, early_end=True).plans(500, seed=0)[0]])
    assert (at_cap == 100).all()
