"""GPU kernel profiles: importers, the kernel cost model, fits and transfer.

Real third-party data (../shared/data) is read where present; those tests skip cleanly without it.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from calibrate.gpu_priors.import_vidur import OP_KIND, SHAPE_COLUMNS, STATS, gemm_shape, import_vidur
from calibrate.contracts.op_records import RECORD_COLUMNS, read_records, sidecar_path, write_records
from simulator.errors import InputError

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"


def _specsim(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "import sys; from specsim_cli.main import main; sys.exit(main())", *map(str, args)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def write_vidur_mlp(root: Path, gpu="a100", model="meta-llama/tiny", tp=(1, 2), tokens=(1, 8, 64)) -> Path:
    """A tiny Vidur-layout mlp.csv: hidden 256, 4 heads, 2 KV heads, ffn 512, gated."""
    rows = []
    for t in tp:
        for m in tokens:
            r = {}
            for op in OP_KIND:
                for s in STATS:
                    r[f"time_stats.{op}.{s}"] = 0.01 + 1e-4 * m / t
            r.update(n_head=4, n_kv_head=2, n_embd=256, n_expanded_embd=512, vocab_size=1000, use_gated_mlp=True,
                     num_tokens=m, num_tensor_parallel_workers=t)
            rows.append(r)
    p = root / "compute" / gpu / model / "mlp.csv"
    p.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(p, index=False)
    return p


# ---- importers -------------------------------------------------------------------------------------
def test_gemm_shard_shapes_by_hand():
    # Llama-2-70B: H 8192, 64 heads / 8 KV, d 128, F 28672, gated; TP=4
    assert gemm_shape("attn_pre_proj", 8192, 64, 8, 28672, True, 4) == ((16 + 2 * 2) * 128, 8192)
    assert gemm_shape("attn_post_proj", 8192, 64, 8, 28672, True, 4) == (8192, 16 * 128)
    assert gemm_shape("mlp_up_proj", 8192, 64, 8, 28672, True, 4) == (2 * 7168, 8192)
    assert gemm_shape("mlp_down_proj", 8192, 64, 8, 28672, True, 4) == (8192, 7168)
    # more TP than KV heads: one KV head per GPU, never zero
    assert gemm_shape("attn_pre_proj", 4096, 32, 4, 11008, True, 8) == ((4 + 2) * 128, 4096)


def test_import_vidur_tiny_folder_roundtrip(tmp_path):
    write_vidur_mlp(tmp_path / "in")
    df, prov = import_vidur(tmp_path / "in")
    assert len(df) == 6 * len(OP_KIND)
    g = df[(df.source_op == "attn_pre_proj") & (df.tp == 2)].iloc[0]
    assert (g.op, g.n, g.k, g.gpu, g.model) == ("gemm", (2 + 2 * 1) * 64, 256, "a100-80gb", "meta-llama/tiny")
    t = df[(df.source_op == "add") & (df.tp == 2) & (df.tokens == 64)].time_s.iloc[0]
    assert t == pytest.approx((0.01 + 1e-4 * 64 / 2) * 1e-3)
    out = write_records(df, tmp_path / "r.csv", prov)
    back = read_records(out)
    assert list(back.columns) == list(RECORD_COLUMNS) and len(back) == len(df)
    assert np.allclose(back.time_s, df.time_s)
    assert sidecar_path(out).is_file()


@pytest.mark.parametrize("edit,field", [
    (lambda d: d.assign(extra_col=1), "header: column extra_col: unknown column"),
    (lambda d: d.drop(columns=[f"time_stats.attn_pre_proj.{s}" for s in STATS]), "missing op 'attn_pre_proj'"),
    (lambda d: d.assign(**{"time_stats.mlp_act.median": ["x"] + [0.1] * (len(d) - 1)}),
     "row 1: column time_stats.mlp_act.median: not a number"),
])
def test_bad_vidur_csv_exits_2_one_line_nothing_written(tmp_path, edit, field):
    p = write_vidur_mlp(tmp_path / "in")
    edit(pd.read_csv(p)).to_csv(p, index=False)
    out = tmp_path / "o.csv"
    r = _specsim("import", "vidur", tmp_path / "in", "--out", out)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {p}: ") and field in lines[0]
    assert "Traceback" not in r.stderr
    assert not out.exists() and not sidecar_path(out).exists()


def test_read_records_rejects_bad_rows(tmp_path):
    write_vidur_mlp(tmp_path / "in")
    df, prov = import_vidur(tmp_path / "in")
    p = write_records(df, tmp_path / "r.csv", prov)
    raw = pd.read_csv(p, dtype=str, keep_default_na=False)
    raw.loc[4, "time_s"] = "fast"
    raw.to_csv(p, index=False)
    with pytest.raises(InputError, match=r"row 5: column time_s: not a number"):
        read_records(p)
    raw.loc[4, "time_s"] = "inf"
    raw.to_csv(p, index=False)
    with pytest.raises(InputError, match=r"row 5: column time_s: not finite"):
        read_records(p)
    raw.loc[4, "time_s"] = "1e-3"
    raw.loc[3, "tokens"] = "-5"
    raw.to_csv(p, index=False)
    with pytest.raises(InputError, match=r"row 4: column tokens: expected a value >= 0"):
        read_records(p)
    raw.loc[3, "tokens"] = "5"
    raw.loc[2, "op"] = "conv"
    raw.to_csv(p, index=False)
    with pytest.raises(InputError, match=r"row 3: column op: unknown op 'conv'"):
        read_records(p)


def test_import_aiconfigurator_tiny_tables(tmp_path):
    pytest.importorskip("pyarrow")
    from calibrate.gpu_priors.import_aiconfigurator import import_aiconfigurator

    common = dict(framework="VLLM", version="0.14.0", device="NVIDIA L40S", kernel_source="k")
    g = tmp_path / "l40s" / "gemm" / "vllm" / "0.14.0"
    g.mkdir(parents=True)
    pd.DataFrame([{**common, "op_name": "gemm", "gemm_dtype": "bfloat16", "m": 8, "n": 1024, "k": 512, "latency": 0.01}]
                 ).to_parquet(g / "gemm_perf.parquet")
    c = tmp_path / "l40s" / "comm" / "vllm" / "0.14.0"
    c.mkdir(parents=True)
    pd.DataFrame([{**common, "op_name": "all_reduce", "allreduce_dtype": "bfloat16", "num_gpus": 2, "message_size": 1024,
                   "latency": 0.02, "backend": "vllm_graph"}]).to_parquet(c / "custom_allreduce_perf.parquet")
    df, prov = import_aiconfigurator(tmp_path)
    ar = df[df.op == "allreduce"].iloc[0]
    assert (ar.message_bytes, ar.link, ar.gpu, ar.time_s) == (2048.0, "pcie", "l40s", pytest.approx(2e-5))
    assert df[df.op == "gemm"].iloc[0].tokens == 8
    # a non-numeric latency names file, row and column; exit 2
    pd.DataFrame([{**common, "op_name": "gemm", "gemm_dtype": "bfloat16", "m": 8, "n": 1024, "k": 512, "latency": "slow"}]
                 ).to_parquet(g / "gemm_perf.parquet")
    r = _specsim("import", "aiconfigurator", tmp_path, "--out", tmp_path / "o.csv")
    assert r.returncode == 2 and r.stderr.strip() == f"error: {g / 'gemm_perf.parquet'}: row 1: column latency: not a number ('slow')"


def _named_gpus() -> set[str]:
    """Catalog hardware names plus the documented non-catalog ones: what a record's ``gpu`` may be."""
    from calibrate.contracts.op_records import NON_CATALOG_GPUS
    from simulator.catalog import hardware_catalog

    return set(hardware_catalog()) | set(NON_CATALOG_GPUS)


def _link_of(gpu: str) -> str | None:
    from simulator.catalog import hardware_catalog

    cat = hardware_catalog()
    return cat[gpu].interconnect if gpu in cat else None


def write_allreduce(root: Path, setup: str, rows=((2, 2048, 0.01), (2, 1 << 20, 0.05), (4, 1 << 20, 0.08))) -> Path:
    """A tiny Vidur-layout network/<setup>/all_reduce.csv (num_workers, size bytes, median ms)."""
    p = root / "network" / setup / "all_reduce.csv"
    p.parent.mkdir(parents=True, exist_ok=True)
    recs = [{"": i, **{f"time_stats.all_reduce.{s}": t for s in STATS}, "rank": 0, "num_workers": n, "size": size,
             "collective": "all_reduce", "devices_per_node": 8, "max_devices_per_node": 8}
            for i, (n, size, t) in enumerate(rows)]
    pd.DataFrame(recs).to_csv(p, index=False)
    return p


def test_vidur_allreduce_rows_carry_their_setups_gpu(tmp_path):
    write_allreduce(tmp_path / "in", "a100_pairwise_nvlink")
    write_allreduce(tmp_path / "in", "h100_dgx")
    write_allreduce(tmp_path / "in", "a40_pcie")
    df, _ = import_vidur(tmp_path / "in")
    by_setup = df.groupby("device")[["gpu", "link"]].agg(set).to_dict("index")
    assert by_setup == {"a100_pairwise_nvlink": {"gpu": {"a100-80gb"}, "link": {"nvlink"}},
                        "h100_dgx": {"gpu": {"h100-sxm"}, "link": {"nvlink"}},
                        "a40_pcie": {"gpu": {"a40"}, "link": {"pcie"}}}
    assert df["time_s"].iloc[0] == pytest.approx(1e-5)


def test_vidur_allreduce_of_an_unknown_gpu_names_the_file_exit_2(tmp_path):
    write_allreduce(tmp_path / "in", "a100_dgx")
    bad = write_allreduce(tmp_path / "in", "mi300_xgmi")
    with pytest.raises(InputError, match="unknown GPU prefix 'mi300'"):
        import_vidur(tmp_path / "in")
    out = tmp_path / "o.csv"
    r = _specsim("import", "vidur", tmp_path / "in", "--out", out)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {bad}: ") and not out.exists()


@pytest.mark.skipif(not (SHARED / "vidur-gpu-profiles").is_dir(), reason="../shared/data/vidur-gpu-profiles absent")
def test_import_vidur_real_shared_data():
    from calibrate.gpu_priors.import_vidur import GPU_NAMES

    df, prov = import_vidur(SHARED / "vidur-gpu-profiles")
    # properties, not today's list of GPUs: the shared data keeps growing
    assert set(df.gpu) <= _named_gpus() and {"a100-80gb", "a40"} <= set(df.gpu)
    assert prov["source_repo"] == "microsoft/vidur" and len(prov.get("source_commit", "")) == 40
    assert (df.time_s > 0).all() and set(df.tp.dropna().unique()) >= {1, 2, 4, 8}
    ar = df[df.op == "allreduce"]
    assert len(ar) and (ar.gpu == ar.device.str.split("_").str[0].map(GPU_NAMES)).all()
    for gpu, links in ar.groupby("gpu")["link"].agg(set).items():  # the GPU's own link inside a node
        assert links <= {"pcie" if _link_of(gpu) == "pcie" else "nvlink", "internode"}, gpu


@pytest.fixture(scope="module")
def aic_real():
    if not (SHARED / "aiconfigurator-vllm-kernels").is_dir():
        pytest.skip("../shared/data/aiconfigurator-vllm-kernels absent")
    pytest.importorskip("pyarrow")
    from calibrate.gpu_priors.import_aiconfigurator import import_aiconfigurator

    return import_aiconfigurator(SHARED / "aiconfigurator-vllm-kernels")


def test_import_aiconfigurator_real_shared_data(aic_real, tmp_path):
    from calibrate.gpu_priors.fit import fit_rows
    from calibrate.contracts.op_records import DENSE_OPS, OPS
    from simulator.catalog import hardware_catalog

    df, prov = aic_real
    root = SHARED / "aiconfigurator-vllm-kernels"
    assert set(df.gpu) <= _named_gpus() and {"a100-80gb", "l40s"} <= set(df.gpu)
    assert {"gemm", "attn_decode", "attn_prefill", "allreduce"} <= set(df.op) <= set(OPS)
    assert (df.time_s > 0).all() and df.time_s.notna().all()
    # every table is either imported or skipped with its reason, never silently dropped
    tables = {str(p.relative_to(root)) for p in root.glob("*/*/*/*/*.parquet")}
    assert set(prov["files"]) | set(prov["files_skipped"]) == tables
    assert not set(prov["files"]) & set(prov["files_skipped"])
    assert all(isinstance(why, str) and why for why in prov["files_skipped"].values())
    assert set(df.source_file) <= set(prov["files"])
    assert len(prov.get("source_commit", "")) == 40
    # the link follows the GPU's interconnect: PCIe cards never get nvlink
    ar = df[df.op == "allreduce"]
    for gpu, links in ar.groupby("gpu")["link"].agg(set).items():
        assert links == {"pcie" if _link_of(gpu) == "pcie" else "nvlink"}, gpu
    assert (ar.message_bytes > 0).all() and set(ar.num_gpus) >= {2, 4, 8}
    # MoE / MLA rows carry their own shape columns; downstream fits see only dense ops of catalog GPUs
    moe = df[df.op == "moe"]
    if len(moe):
        assert moe[["tokens", "hidden", "expert_intermediate", "topk", "experts", "tp", "ep"]].notna().all().all()
        assert (moe.topk <= moe.experts).all() and (moe.distribution != "").all()
    mla = df[df.op.isin(["mla_decode", "mla_prefill"])]
    assert mla[["batch", "tokens", "kv_tokens", "heads"]].notna().all().all()
    fr = fit_rows(df)
    assert len(fr) and set(fr.op) <= set(DENSE_OPS) and set(fr.gpu) <= set(hardware_catalog())
    # a sample of every op round-trips through the contract
    sample = df.groupby("op").head(50)
    back = read_records(write_records(sample, tmp_path / "r.csv", prov))
    assert len(back) == len(sample) and set(back.op) == set(df.op)


def _aic_common(**kw) -> dict:
    return dict(framework="VLLM", version="0.14.0", device="NVIDIA L40S", kernel_source="k", **kw)


def _parquet(root: Path, rel: str, rows: list[dict], meta_version: str | None = None) -> Path:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(p)
    if meta_version is not None:
        (p.parent / "collection_meta.yaml").write_text(
            f"schema_version: 1\nprovenance: legacy\nruntime:\n  framework: nccl\n  version: '{meta_version}'\n")
    return p


def test_aiconfigurator_older_and_newer_layouts(tmp_path):
    """Older NCCL tables without runtime columns (from collection_meta.yaml), extra power columns, MoE, MLA
    and MLA-BMM tables, and B200 -> b200: all read."""
    pytest.importorskip("pyarrow")
    from calibrate.gpu_priors.import_aiconfigurator import import_aiconfigurator

    _parquet(tmp_path, "h100_sxm/comm/nccl/2.23/nccl_perf.parquet",
             [{"nccl_dtype": "half", "num_gpus": 8, "message_size": 1024, "kernel_source": "NCCL", "op_name": op,
               "latency": 0.02} for op in ("all_reduce", "all_gather")], meta_version="2.23")
    _parquet(tmp_path, "b200_sxm/gemm/vllm/0.22.0/gemm_perf.parquet",
             [_aic_common(op_name="gemm", gemm_dtype="bfloat16", m=16, n=4096, k=4096, latency=0.01, power=612.5,
                          power_limit=1000.0)])
    _parquet(tmp_path, "h100_sxm/moe/vllm/0.19.0/moe_perf.parquet",
             [_aic_common(op_name="moe", moe_dtype="fp8", num_tokens=64, hidden_size=4096, inter_size=14336, topk=2,
                          num_experts=8, moe_tp_size=2, moe_ep_size=4, distribution="power_law_1.2", latency=0.3)])
    _parquet(tmp_path, "h100_sxm/mla/vllm/0.14.0/generation_mla_perf.parquet",
             [_aic_common(op_name="generation_mla", mla_dtype="bfloat16", kv_cache_dtype="fp8", num_heads=16,
                          batch_size=8, isl=1, tp_size=8, step=4095, latency=0.05)])
    _parquet(tmp_path, "h100_sxm/mla/vllm/0.24.0/mla_context_module_perf.parquet",
             [_aic_common(op_name="mla_context_module", model="deepseek-ai/DeepSeek-V3",
                          architecture="DeepseekV3ForCausalLM", mla_dtype="bfloat16", kv_cache_dtype="bfloat16",
                          gemm_type="fp8_block", num_heads=128, batch_size=2, isl=512, tp_size=1, step=0, latency=0.4)])
    _parquet(tmp_path, "h100_sxm/mla_bmm/vllm/0.24.0/mla_bmm_perf.parquet",
             [_aic_common(op_name="mla_gen_pre", bmm_dtype="bfloat16", num_tokens=32, num_heads=128, latency=0.01)])
    df, prov = import_aiconfigurator(tmp_path)
    assert prov["files_skipped"] == {}
    by = {op: g.iloc[0] for op, g in df.groupby("op")}
    ar = by["allreduce"]
    assert (ar.gpu, ar.version, ar.backend, ar.message_bytes, ar.num_gpus, ar.link) == (
        "h100-sxm", "2.23", "nccl", 2048.0, 8, "nvlink")
    assert (df.op == "allreduce").sum() == 1  # all_gather rows are not all-reduces
    g = by["gemm"]
    assert (g.gpu, g.device, g.tokens, g.n, g.k, g.time_s) == ("b200", "b200_sxm", 16, 4096, 4096, pytest.approx(1e-5))
    m = by["moe"]
    assert (m.tokens, m.hidden, m.expert_intermediate, m.topk, m.experts, m.tp, m.ep, m.distribution, m["dtype"]) == (
        64, 4096, 14336, 2, 8, 2, 4, "power_law_1.2", "fp8")
    d = by["mla_decode"]
    assert (d.batch, d.tokens, d.kv_tokens, d.heads, d.tp, d.kv_dtype, d.source_op) == (8, 1, 4095, 16, 8, "fp8", "generation_mla")
    pf = by["mla_prefill"]
    assert (pf.model, pf.gemm_dtype, pf.tokens, pf.source_op) == ("deepseek-ai/DeepSeek-V3", "fp8_block", 512, "mla_context_module")
    b = by["mla_bmm"]
    assert (b.tokens, b.heads, b.source_op) == (32, 128, "mla_gen_pre")


def test_aiconfigurator_skips_and_names_tables_it_cannot_read(tmp_path):
    """An unknown table, an unknown column, a missing column, a GPU with no name: each skipped with its reason
    (provenance + one stderr warning line); the rest imported, exit 0."""
    pytest.importorskip("pyarrow")
    from calibrate.gpu_priors.import_aiconfigurator import import_aiconfigurator

    gemm = _aic_common(op_name="gemm", gemm_dtype="bfloat16", m=8, n=1024, k=512, latency=0.01)
    _parquet(tmp_path, "l40s/gemm/vllm/0.14.0/gemm_perf.parquet", [gemm])
    skipped = {"l40s/gemm/vllm/0.19.0/gemm_perf.parquet": ([{**gemm, "quant_group": 128}], "unknown column 'quant_group'"),
               "l40s/gemm/vllm/0.22.0/gemm_perf.parquet": ([{k: v for k, v in gemm.items() if k != "n"}], "missing column 'n'"),
               "l40s/dsa/vllm/0.24.0/dsa_indexer_perf.parquet": ([gemm], "unknown table 'dsa_indexer_perf'"),
               "gb300/gemm/vllm/0.24.0/gemm_perf.parquet": ([gemm], "GPU folder 'gb300' has no catalog name")}
    for rel, (rows, _) in skipped.items():
        _parquet(tmp_path, rel, rows)
    df, prov = import_aiconfigurator(tmp_path)
    assert len(df) == 1 and prov["files"] == ["l40s/gemm/vllm/0.14.0/gemm_perf.parquet"]
    assert set(prov["files_skipped"]) == set(skipped)
    for rel, (_, why) in skipped.items():
        assert why in prov["files_skipped"][rel], rel
    out = tmp_path / "o.csv"
    r = _specsim("import", "aiconfigurator", tmp_path, "--out", out)
    assert r.returncode == 0, r.stderr
    warn = [line for line in r.stderr.strip().splitlines() if line]
    assert len(warn) == 1 and warn[0].startswith("warning: skipped 4 table(s)")
    assert all(rel in warn[0] for rel in skipped)
    assert len(read_records(out)) == 1


# ---- the kernel model: hand-computed cases, recovery from synthetic data ------------------------------
def _records(rows: list[dict]) -> pd.DataFrame:
    from calibrate.contracts.op_records import empty_row, frame

    return frame([{**empty_row(), "source": "synthetic", "dtype": "bfloat16", "model": "m", **r} for r in rows])


def test_kernel_model_hand_computed():
    from calibrate.gpu_priors.kernel_model import Datasheet, KernelParams, OpArrays

    hw = Datasheet(bandwidth=1e12, flops=100e12)
    p = KernelParams(mem_efficiency=0.5, compute_efficiency=0.5, gemm_tile_tokens=64, attn_compute_efficiency=0.25,
                     row_mem_efficiency=0.25, kernel_overhead_s=5e-6, allreduce_latency_s=10e-6,
                     allreduce_bandwidth_bytes_per_s=100e9)
    df = _records([
        {"op": "gemm", "gpu": "x", "tokens": 1, "n": 4096, "k": 4096},        # memory bound
        {"op": "gemm", "gpu": "x", "tokens": 65, "n": 4096, "k": 4096},       # compute bound, padded to 128
        {"op": "norm", "gpu": "x", "tokens": 10, "hidden": 1000, "tp": 1},
        {"op": "attn_decode", "gpu": "x", "batch": 2, "kv_tokens": 1000, "heads": 8, "kv_heads": 2, "head_dim": 128},
        {"op": "allreduce", "gpu": "x", "message_bytes": 1e6, "num_gpus": 4},
    ])
    t = OpArrays(df).time(p, hw)
    assert t[0] == pytest.approx(5e-6 + 2 * (4096 + 4096 * 4096 + 4096) / 0.5e12)
    assert t[1] == pytest.approx(5e-6 + 2 * 128 * 4096 * 4096 / 50e12)
    assert t[2] == pytest.approx(5e-6 + 10 * 2 * 1000 * 2 / 0.25e12)
    kv_bytes = 2 * (1001 * 2 * 2 * 128 * 2 + 2 * 1 * 8 * 128 * 2)
    assert t[3] == pytest.approx(5e-6 + max(kv_bytes / 0.5e12, 4 * 2 * 8 * 128 * 1001 / 25e12))
    assert t[4] == pytest.approx(10e-6 + 2 * 3 / 4 * 1e6 / 100e9)


def test_fit_recovers_known_parameters_from_synthetic_data():
    from calibrate.gpu_priors.fit import COMPUTE_PARAMS, Predictor, fit_params
    from calibrate.gpu_priors.kernel_model import KernelParams

    rng = np.random.default_rng(0)
    rows = []
    for gpu in ("a100-80gb", "l40s"):  # two datasheets, one set of fractions
        for m in (1, 4, 16, 48, 64, 100, 200, 512, 1024, 4096):
            for n, k in ((4096, 4096), (11008, 4096), (4096, 11008), (1536, 512)):
                rows.append({"op": "gemm", "gpu": gpu, "tokens": m, "n": n, "k": k})
            rows.append({"op": "norm", "gpu": gpu, "tokens": m, "hidden": 4096, "tp": 1})
            rows.append({"op": "add", "gpu": gpu, "tokens": m * 8, "hidden": 4096, "tp": 1})
        for b in (1, 8, 64):
            for c in (128, 2048, 16384):
                rows.append({"op": "attn_decode", "gpu": gpu, "batch": b, "kv_tokens": c, "heads": 32, "kv_heads": 8, "head_dim": 128})
                rows.append({"op": "attn_prefill", "gpu": gpu, "batch": b, "tokens": 512, "kv_tokens": c, "heads": 32,
                             "kv_heads": 8, "head_dim": 128})
    df = _records(rows)
    truth = KernelParams(mem_efficiency=0.7, compute_efficiency=0.65, gemm_tile_tokens=64.0, attn_compute_efficiency=0.35,
                         row_mem_efficiency=0.45, kernel_overhead_s=6e-6)
    df["time_s"] = Predictor(df)(truth) * np.exp(rng.normal(0, 0.01, len(df)))
    fit = fit_params(df, COMPUTE_PARAMS, start=KernelParams())
    # the tile is a step function of m: only pinned to the gaps of the token grid (here 48 < m_tile <= 64)
    assert 48 <= fit.params.gemm_tile_tokens <= 64.5
    for name in set(COMPUTE_PARAMS) - {"gemm_tile_tokens"}:
        assert getattr(fit.params, name) == pytest.approx(getattr(truth, name), rel=0.05), name
    assert np.median(np.abs(Predictor(df)(fit.params) / df["time_s"].to_numpy() - 1)) < 0.02


def test_allreduce_fit_recovers_latency_and_bandwidth():
    from calibrate.gpu_priors.fit import AR_PARAMS, Predictor, fit_params
    from calibrate.gpu_priors.kernel_model import KernelParams

    rows = [{"op": "allreduce", "gpu": "a100-80gb", "message_bytes": float(s), "num_gpus": g, "link": "nvlink",
             "backend": "vllm_graph"} for g in (2, 4, 8) for s in 2.0 ** np.arange(10, 28)]
    df = _records(rows)
    truth = KernelParams(allreduce_latency_s=7e-6, allreduce_bandwidth_bytes_per_s=150e9)
    df["time_s"] = Predictor(df)(truth)
    fit = fit_params(df, AR_PARAMS)
    assert fit.params.allreduce_latency_s == pytest.approx(7e-6, rel=1e-3)
    assert fit.params.allreduce_bandwidth_bytes_per_s == pytest.approx(150e9, rel=1e-3)


def test_shipped_gpu_profiles_have_provenance():
    import yaml

    for gpu in ("a100-80gb", "a40", "l40s"):
        prof = yaml.safe_load((REPO / "calibrate" / "gpu_priors" / "profiles" / f"gpu_{gpu}.yaml").read_text())
        assert prof["hardware"] == gpu and prof["provenance"]["kind"] == "fitted" and prof["provenance"]["sources"]
        for name, p in prof["params"].items():
            assert p["kind"] in ("calibrated", "prior") and p["source"], name
            # a calibrated parameter carries its stderr, except the GEMM tile (a step: no derivative)
            assert (p["kind"] == "calibrated") == ("stderr" in p or name == "gemm_tile_tokens"), name
