"""Engine-level measurement importers: LLMServingSim layer profiles and LLM-Inference-Bench runs.

Tiny synthetic folders pin the layouts and the hand-computed shapes; the real third-party data
(../shared/data/engine-measurements) is checked for properties and for the facts the importers' docstrings
state (time units, what Throughput counts, GPU naming); those tests skip cleanly without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate.gpu_priors.import_llm_inference_bench import (BENCH_COLUMNS, THROUGHPUT_COUNTS,
                                                               import_llm_inference_bench, load_llm_inference_bench)
from calibrate.gpu_priors.import_llmservingsim import (MODELS, import_llmservingsim,
                                                         load_llmservingsim_attention, load_llmservingsim_layers)
from calibrate.contracts.op_records import DENSE_OPS, NON_CATALOG_GPUS, read_records, sidecar_path, write_records
from simulator.catalog import hardware_catalog
from simulator.errors import InputError

BANDWIDTH_BYTES_PER_S = {n: h.memory_bandwidth_bytes_per_s for n, h in hardware_catalog().items()}  # datasheet

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"
LSS = SHARED / "engine-measurements" / "llmservingsim-layer-profiles"
LIB = SHARED / "engine-measurements" / "llm-inference-bench" / "All_results.csv"
DENSE_MODULES = ("embedding", "input_layernorm", "q_proj", "k_proj", "v_proj", "rope", "attn", "o_proj",
                 "post_layernorm", "gate_proj", "up_proj", "act_fn", "down_proj", "final_layernorm", "lm_head")
MOE_MODULES = ("embedding", "input_layernorm", "q_proj", "k_proj", "v_proj", "rope", "o_proj", "post_layernorm",
               "gate", "expert.w1", "expert.w3", "act_fn", "expert.w2", "final_layernorm", "lm_head")
ATTN_HEADER = ([f"time_stats.attn_{p}.{s}" for p in ("prefill", "decode") for s in ("min", "max", "mean", "median", "std")]
               + ["n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "max_model_len", "batch_size",
                  "prefill_chunk_size", "kv_cache_size", "is_prefill", "attention_backend"])


def _specsim(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from specsim_cli.main import main; sys.exit(main())",
                           *map(str, args)], cwd=REPO, capture_output=True, text=True, timeout=120)


# ---- LLMServingSim: tiny folders -------------------------------------------------------------------
def write_layers(root: Path, gpu: str, model: str, tp: int, modules=DENSE_MODULES, tokens=(1, 8)) -> Path:
    p = root / gpu / model / f"tp{tp}" / "layers.csv"
    p.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"layer_name": m, "input": t, "kv_cache": 0, "tp_size": tp, "latency(ns)": 50_000 + 1_000 * t}
            for t in tokens for m in modules]
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


def write_attention(root: Path, gpu: str, model: str, tp: int, rows: list[tuple]) -> Path:
    """rows: (is_prefill, batch, chunk, kv_cache_size, median_ms)."""
    p = root / gpu / model / f"tp{tp}" / "attention.csv"
    p.parent.mkdir(parents=True, exist_ok=True)
    recs = []
    for pre, b, chunk, kv, ms in rows:
        phase, other = ("prefill", "decode") if pre else ("decode", "prefill")
        r = {**{f"time_stats.attn_{phase}.{s}": ms for s in ("min", "max", "mean", "median", "std")},
             **{f"time_stats.attn_{other}.{s}": "" for s in ("min", "max", "mean", "median", "std")},
             "n_embd": 4096, "n_q_head": 32, "n_kv_head": 8, "num_tensor_parallel_workers": tp,
             "max_model_len": 131072, "batch_size": b, "prefill_chunk_size": chunk, "kv_cache_size": kv,
             "is_prefill": pre, "attention_backend": "FLASH_ATTENTION"}
        recs.append(r)
    pd.DataFrame(recs, columns=ATTN_HEADER).to_csv(p, index=False)
    return p


@pytest.fixture
def lss_folder(tmp_path) -> Path:
    root = tmp_path / "perf_models"
    write_layers(root, "H100", "meta-llama/Llama-3.1-8B", 2)
    write_layers(root, "A6000", "mistralai/Mixtral-8x7B-v0.1", 2, modules=MOE_MODULES)
    write_attention(root, "H100", "meta-llama/Llama-3.1-8B", 2,
                    [(True, 1, 32, 64, 0.01), (False, 4, 0, 4096, 0.2), (False, 8, 0, 4, 0.003)])
    return root


def test_llmservingsim_loaders_read_the_layout(lss_folder):
    layers = load_llmservingsim_layers(lss_folder)
    assert len(layers) == 2 * len(DENSE_MODULES) + 2 * len(MOE_MODULES)
    row = layers[(layers.module == "q_proj") & (layers.gpu == "h100-sxm") & (layers.tokens == 8)].iloc[0]
    assert (row.model, row.tp, row.kv_tokens, row.time_s) == ("meta-llama/Llama-3.1-8B", 2, 0, pytest.approx(58e-6))
    assert set(layers.gpu) == {"h100-sxm", "rtx-a6000"}
    att = load_llmservingsim_attention(lss_folder)
    assert list(att.phase) == ["prefill", "decode", "decode"]
    assert list(att.tokens) == [32, 1, 1] and list(att.kv_tokens) == [64, 1024, 0]  # keys per sequence
    assert att.time_s.tolist() == pytest.approx([1e-5, 2e-4, 3e-6])
    assert (att.heads == 32).all() and (att.kv_heads == 8).all() and (att.hidden == 4096).all()


def test_llmservingsim_records_hand_computed(lss_folder):
    df, prov = import_llmservingsim(lss_folder)
    assert set(df.op) <= set(DENSE_OPS) and set(df.source) == {"llmservingsim"} and set(df.dtype) == {"float16"}

    def one(**kw):
        sel = np.ones(len(df), dtype=bool)
        for k, v in kw.items():
            sel &= (df[k] == v).to_numpy()
        assert sel.sum() >= 1, kw
        return df[sel].iloc[0]

    # Llama-3.1-8B at TP 2: 32 heads / 8 KV heads of 128, hidden 4096, F 14336, V 128256
    for module, n, k in (("q_proj", 16 * 128, 4096), ("k_proj", 4 * 128, 4096), ("o_proj", 4096, 16 * 128),
                         ("gate_proj", 7168, 4096), ("down_proj", 4096, 7168), ("lm_head", 64128, 4096)):
        r = one(source_op=module, model="meta-llama/Llama-3.1-8B")
        assert (r.op, r.n, r.k, r.tp) == ("gemm", n, k, 2), module
    a = one(source_op="attn", model="meta-llama/Llama-3.1-8B")
    assert (a.op, a.batch, a.kv_tokens, a.heads, a.kv_heads, a.head_dim) == ("attn_prefill", 1, 0, 16, 4, 128)
    assert one(source_op="act_fn", model="meta-llama/Llama-3.1-8B").tp == 2
    # Mixtral's experts are not TP-sharded in these profiles: whole expert, tp 1; the router is skipped
    w1 = one(source_op="expert.w1")
    assert (w1.op, w1.n, w1.k, w1.tp, w1.experts, w1.topk) == ("gemm", 14336, 4096, 1, 8, 2)
    assert (one(source_op="expert.w2").n, one(source_op="expert.w2").k) == (4096, 14336)
    act = one(source_op="act_fn", model="mistralai/Mixtral-8x7B-v0.1")
    assert (act.tp, act.intermediate) == (1, 14336)
    assert "gate" not in set(df.source_op) and prov["rows_skipped"]["gate"] == 2 and prov["rows_skipped_why"]["gate"]
    # attention.csv: keys split over the batch; prefill prior = keys - chunk; the empty decode row skipped
    dec = one(op="attn_decode")
    assert (dec.batch, dec.tokens, dec.kv_tokens, dec.heads, dec.kv_heads, dec.time_s) == (4, 1, 1023, 16, 4, pytest.approx(2e-4))
    pre = one(op="attn_prefill", source_op="attn_prefill")
    assert (pre.batch, pre.tokens, pre.kv_tokens, pre.time_s) == (1, 32, 32, pytest.approx(1e-5))
    assert prov["rows_skipped"]["empty_decode"] == 1 and (df.op == "attn_decode").sum() == 1
    assert one(source_op="q_proj").time_s == pytest.approx(51e-6)


def test_llmservingsim_cli_writes_records_with_provenance(lss_folder, tmp_path):
    out = tmp_path / "r.csv"
    r = _specsim("import", "llmservingsim", lss_folder, "--out", out)
    assert r.returncode == 0, r.stderr
    back = read_records(out)
    assert len(back) and set(back.source) == {"llmservingsim"} and sidecar_path(out).is_file()


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.assign(**{"latency(ns)": ["fast"] + list(d["latency(ns)"][1:])}), "row 1: column latency(ns): not a number"),
    (lambda d: d.assign(tp_size=4), "row 1: column tp_size: 4 in folder tp2"),
    (lambda d: d.drop(columns=["kv_cache"]), "header: column kv_cache: missing column"),
])
def test_bad_llmservingsim_layers_exit_2_one_line(lss_folder, tmp_path, edit, field):
    p = lss_folder / "H100" / "meta-llama" / "Llama-3.1-8B" / "tp2" / "layers.csv"
    edit(pd.read_csv(p)).to_csv(p, index=False)
    out = tmp_path / "o.csv"
    r = _specsim("import", "llmservingsim", lss_folder, "--out", out)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {p}") and field in lines[0], lines
    assert not out.exists() and not sidecar_path(out).exists()


def test_llmservingsim_skips_and_names_what_it_cannot_interpret(lss_folder, tmp_path):
    """A GPU folder with no catalog name, a model without a shape table: files skipped and named; a module it does
    not map: rows skipped and named; one stderr warning line, the rest imported, exit 0."""
    write_layers(lss_folder, "TPU-v6e-1", "meta-llama/Llama-3.1-8B", 1)
    write_layers(lss_folder, "H100", "Qwen/Qwen3-32B", 1)
    p = lss_folder / "H100" / "meta-llama" / "Llama-3.1-8B" / "tp2" / "layers.csv"
    d = pd.read_csv(p)
    d.loc[0, "layer_name"] = "mystery_proj"
    d.to_csv(p, index=False)
    skipped = {}
    assert "TPU" not in "".join(load_llmservingsim_layers(lss_folder, skipped).source_file)
    assert "GPU folder 'TPU-v6e-1' has no catalog name" in skipped["TPU-v6e-1/meta-llama/Llama-3.1-8B/tp1/layers.csv"]
    df, prov = import_llmservingsim(lss_folder)
    assert set(prov["files_skipped"]) == {"TPU-v6e-1/meta-llama/Llama-3.1-8B/tp1/layers.csv",
                                          "H100/Qwen/Qwen3-32B/tp1/layers.csv"}
    assert "no shape table" in prov["files_skipped"]["H100/Qwen/Qwen3-32B/tp1/layers.csv"]
    assert prov["modules_unknown"] == {"mystery_proj": 1} and "mystery_proj" not in set(df.source_op)
    out = tmp_path / "r.csv"
    r = _specsim("import", "llmservingsim", lss_folder, "--out", out)
    assert r.returncode == 0, r.stderr
    warn = r.stderr.strip().splitlines()
    assert len(warn) == 1 and warn[0].startswith("warning: skipped 2 table(s)") and "mystery_proj" in warn[0]
    assert len(read_records(out)) == len(df)


def test_llmservingsim_empty_folder_is_an_input_error(tmp_path):
    (tmp_path / "b").mkdir()
    with pytest.raises(InputError, match="no <GPU>/<org>/<model>/tp<N>/layers.csv"):
        import_llmservingsim(tmp_path / "b")
    write_layers(tmp_path / "c", "TPU-v6e-1", "meta-llama/Llama-3.1-8B", 1)
    with pytest.raises(InputError, match="no layer or attention profile this importer can interpret"):
        import_llmservingsim(tmp_path / "c")


# ---- LLMServingSim: the real profiles -------------------------------------------------------------
needs_lss = pytest.mark.skipif(not LSS.is_dir(), reason="../shared/data/engine-measurements/llmservingsim-layer-profiles absent")


@pytest.fixture(scope="module")
def lss_real():
    if not LSS.is_dir():
        pytest.skip("llmservingsim-layer-profiles absent")
    return load_llmservingsim_layers(LSS), load_llmservingsim_attention(LSS)


@needs_lss
def test_llmservingsim_layer_time_unit_is_nanoseconds(lss_real):
    """The LM head at one token streams its weight shard (V/TP x H x 2 B): read in ns, every run takes between
    1x and 3x that over the datasheet bandwidth -- below it would be impossible, far above it not a 1-token GEMV."""
    layers, _ = lss_real
    assert set(layers.gpu) <= set(hardware_catalog()) and set(layers.model) <= set(MODELS)
    assert (layers.time_s > 0).all() and (layers.tokens >= 1).all() and (layers.tp >= 1).all()
    head = layers[(layers.module == "lm_head") & (layers.tokens == 1)]
    assert len(head)
    for r in head.itertuples():
        m = MODELS[r.model]
        bound = m["vocab"] / r.tp * m["hidden"] * 2 / BANDWIDTH_BYTES_PER_S[r.gpu]
        assert 1.0 <= r.time_s / bound < 3.0, (r.gpu, r.model, r.tp, r.time_s, bound)


@needs_lss
def test_llmservingsim_attention_time_unit_is_milliseconds(lss_real):
    """A decode reads every key and value once: time >= batch x keys x 2 x kv_heads/TP x head_dim x 2 B / BW.
    Read as ms every non-empty decode row clears that bound; read as us nearly all the long ones would beat it
    (impossible); read as s one layer would take up to seconds."""
    _, att = lss_real
    dec = att[(att.phase == "decode") & (att.kv_tokens > 0)]
    assert len(dec)
    head_dim = dec.hidden // dec.heads
    bound = dec.batch * dec.kv_tokens * 2 * (dec.kv_heads // dec.tp) * head_dim * 2 / dec.gpu.map(BANDWIDTH_BYTES_PER_S)
    assert (dec.time_s >= bound).all()                                   # ms: physically possible everywhere
    long = bound > 20e-6
    assert long.sum() > 100 and ((dec.time_s * 1e-3)[long] < bound[long]).mean() > 0.99  # us: impossible
    assert att.time_s.max() < 0.05                                       # s: 1000x this, seconds per layer
    # the empty rows (fewer keys than sequences) are a flat few microseconds whatever the batch
    empty = att[(att.phase == "decode") & (att.kv_tokens == 0)]
    if len(empty):
        assert empty.time_s.max() < 10e-6


@needs_lss
def test_import_llmservingsim_real_shared_data(lss_real, tmp_path):
    from calibrate.gpu_priors.fit import fit_rows

    df, prov = import_llmservingsim(LSS)
    assert set(df.gpu) <= set(hardware_catalog()) and set(df.op) <= set(DENSE_OPS)
    assert (df.time_s > 0).all() and df[df.op == "gemm"][["n", "k", "tokens"]].gt(0).all().all()
    assert len(fit_rows(df)) == len(df)  # fp16, catalog GPUs, kernel-model ops: the fitter can use every row
    assert len(prov.get("source_commit", "")) == 40 and prov["files"]
    experts = df[df.source_op.str.startswith("expert.")]
    assert (experts.tp == 1).all()
    seventy = df[(df.model == "meta-llama/Llama-3.1-70B") & (df.source_op == "q_proj") & (df.source_file.str.contains("/tp4/"))]
    if len(seventy):
        assert set(zip(seventy.n, seventy.k)) == {(16 * 128, 8192)}
    layers, att = lss_real
    assert len(df) == len(layers) + len(att) - sum(prov["rows_skipped"].values())
    sample = df.groupby(["gpu", "op"]).head(20)
    back = read_records(write_records(sample, tmp_path / "r.csv", prov))
    assert len(back) == len(sample)


# ---- LLM-Inference-Bench ---------------------------------------------------------------------------
def write_bench(path: Path, rows: list[tuple]) -> Path:
    """rows: (hardware, gpus, framework, model, length, batch, latency_s, throughput)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cols = ["Hardware", "Num of Hardware", "Framework", "Model", "Input Output Length", "Batch Size", "Latency", "Throughput"]
    pd.DataFrame(rows, columns=cols).to_csv(path, index=False)
    return path


BENCH_ROWS = [("Nvidia H100 GPU", 1, "vLLM", "meta-llama/Meta-Llama-3-8B", 128, 16, 2.0, 16 * 256 / 2.0),
              ("Nvidia A100 GPU", 4, "TensorRT-LLM", "meta-llama/Llama-2-70b-hf", 256, 1, 4.0, 512 / 4.0),
              ("Nvidia GH200 GPU", 1, "vLLM", "mistralai/Mistral-7B-v0.1", 128, 1, 1.0, 256.0),
              ("AMD MI300X GPU", 2, "vLLM", "Qwen/Qwen2-7B", 512, 32, 10.0, 32 * 1024 / 10.0),
              ("Nvidia A100 GPU", 1, "llama.cpp", "meta-llama/Llama-2-7b-hf", 128, 16, 2.0, 256 / 2.0)]


def test_llm_inference_bench_tiny_table(tmp_path):
    p = write_bench(tmp_path / "bench" / "All_results.csv", BENCH_ROWS)
    (p.parent / "SOURCE_COMMIT").write_text("4211f5d4e9bc0145ed541b6d372d5d8223b44235\n")
    d = load_llm_inference_bench(p)
    assert list(d.columns) == list(BENCH_COLUMNS)
    assert list(d.gpu) == ["h100-sxm", "a100-40gb", "gh200", "", "a100-40gb"]
    assert list(d.consistent) == [True, True, True, True, False]
    assert d.throughput_counts.iloc[-1] == "(input + output) / latency" and d.throughput_counts.iloc[0] == THROUGHPUT_COUNTS
    assert (d.input_tokens == d.output_tokens).all() and list(d.tp) == [1, 4, 1, 2, 1] and list(d.source_row) == [1, 2, 3, 4, 5]
    df, prov = import_llm_inference_bench(p)
    assert len(df) == 4 and df.consistent.all()
    assert prov["rows_dropped"] == {"llama.cpp: Throughput = (input + output) / latency": 1}
    assert prov["source_commit"].startswith("4211f5d4") and prov["licence"].startswith("BSD-3-Clause")
    out = tmp_path / "runs.csv"
    r = _specsim("import", "llm-inference-bench", p, "--out", out)
    assert r.returncode == 0, r.stderr
    back = pd.read_csv(out, keep_default_na=False)
    assert list(back.columns) == list(BENCH_COLUMNS) and len(back) == 4
    assert "throughput_counts" in sidecar_path(out).read_text()


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.drop(columns=["Latency"]), "header: column Latency: missing column"),
    (lambda d: d.assign(**{"Batch Size": ["many"] + list(d["Batch Size"][1:])}), "row 1: column Batch Size: not a positive integer"),
    (lambda d: d.assign(Latency=[0.0] + list(d.Latency[1:])), "row 1: column Latency: not a positive number"),
    (lambda d: d.assign(GPU_Power=1), "header: column GPU_Power: unknown column"),
])
def test_bad_llm_inference_bench_exits_2_one_line(tmp_path, edit, field):
    p = write_bench(tmp_path / "All_results.csv", BENCH_ROWS)
    edit(pd.read_csv(p)).to_csv(p, index=False)
    out = tmp_path / "o.csv"
    r = _specsim("import", "llm-inference-bench", p, "--out", out)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {p}: ") and field in lines[0], lines
    assert not out.exists()


@pytest.mark.skipif(not LIB.is_file(), reason="../shared/data/engine-measurements/llm-inference-bench absent")
def test_llm_inference_bench_real_data_facts(tmp_path):
    d = load_llm_inference_bench(LIB)
    assert set(d.gpu) <= set(hardware_catalog()) | set(NON_CATALOG_GPUS) | {""}
    assert (d[d.hardware.str.startswith("Nvidia")].gpu != "").all()
    # Throughput counts input + output tokens of every sequence (engines that batch: all rows)
    ok = d[d.consistent]
    assert np.allclose(ok.throughput_tok_s, ok.batch * (ok.input_tokens + ok.output_tokens) / ok.latency_s, rtol=1e-3)
    assert d[d.framework.isin(["vLLM", "TensorRT-LLM"])].consistent.all() and d.consistent.mean() > 0.5
    # the flagged rows: batch not counted, and faster than the same configuration at batch 1
    key = ["hardware", "tp", "framework", "model_id", "input_tokens"]
    b1 = d[d.batch == 1].groupby(key).latency_s.median().rename("b1")
    bad = d[~d.consistent].join(b1, on=key)
    assert (bad.batch > 1).all() and (bad.latency_s < bad.b1).all()
    # H100 is not the PCIe card: one GPU streams Llama-2-7B's 13.5 GB faster than PCIe's 2.0 TB/s allows
    h = d[(d.gpu == "h100-sxm") & (d.tp == 1) & (d.batch == 1) & (d.model_id == "meta-llama/Llama-2-7b-hf")]
    if len(h):
        assert (h.latency_s / h.output_tokens).min() < 6.74e9 * 2 / 2.0e12
    # A100 is the 40 GB card: vLLM Llama-2-70B at TP 4 starves for KV cache at batch 16 where the 80 GB H100 does not
    def slowdown(gpu):
        g = d[(d.gpu == gpu) & (d.tp == 4) & (d.framework == "vLLM") & (d.model_id == "meta-llama/Llama-2-70b-hf")]
        g = g[g.input_tokens == g.input_tokens.max()].groupby("batch").latency_s.median()
        return g.get(16, np.nan) / g.get(1, np.nan)
    if not np.isnan(slowdown("a100-40gb")):
        assert slowdown("a100-40gb") > 3 > slowdown("h100-sxm")
    df, prov = import_llm_inference_bench(LIB)
    assert len(df) == int(d.consistent.sum()) and prov["rows_in_source"] == len(d)
    assert len(prov["source_commit"]) == 40 and prov["throughput_counts"] == THROUGHPUT_COUNTS


def test_data_commit_reads_the_source_commit_file_then_the_readme(tmp_path):
    """Provenance of a shared data folder: its SOURCE_COMMIT file wins; else the full commit its README names;
    "?" (never an invented value) where neither records one."""
    from calibrate.gpu_priors.engine_data import data_commit

    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    (a / "SOURCE_COMMIT").write_text("1" * 40 + "\n")
    (a / "README.md").write_text("Source: x at commit " + "2" * 40 + "\n")
    (b / "README.md").write_text("Source: owner/repo `docs/**.md` at commit " + "ab" * 20 + " (Apache-2.0)\n")
    (c / "README.md").write_text("Source: fixtures at commits cac6246e and 528c4146\n")
    assert data_commit(a) == "1" * 40
    assert data_commit(b) == "ab" * 20
    assert data_commit(c) == "?"
    assert data_commit(tmp_path / "missing") == "?"


@pytest.mark.skipif(not LIB.is_file(), reason="../shared/data/engine-measurements/llm-inference-bench absent")
def test_an_import_that_finds_nothing_or_writes_its_own_input_is_refused(tmp_path):
    header = tmp_path / "header-only.csv"
    header.write_text(LIB.read_text().splitlines()[0] + "\n")
    r = _specsim("import", "llm-inference-bench", header, "--out", tmp_path / "o.csv")
    assert r.returncode == 2 and "no runs to import" in r.stderr and not (tmp_path / "o.csv").exists(), r.stderr
    same = tmp_path / "same.csv"
    same.write_bytes(LIB.read_bytes())
    r = _specsim("import", "llm-inference-bench", same, "--out", same, "--force")
    assert r.returncode == 2 and "also an input of this command" in r.stderr, r.stderr
    assert same.read_bytes() == LIB.read_bytes()  # the source is intact
