"""The Triton / FlashAttention prefill ratio (calibrate/gpu_priors/attention_fit.py): matched shapes only, the fit on
a synthetic table whose answer is known, clear errors, and (data present) the AIConfigurator tables' own ratio."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from calibrate.gpu_priors.attention_fit import MIN_ISL, ROOT, fit_and_write, fit_ratio, load_pairs
from simulator.catalog.attention_kernels import read_attention_catalog
from simulator.errors import InputError


def table(root: Path, rows: list[dict], gpu: str = "l40s", version: str = "0.24.0") -> Path:
    d = root / gpu / "attention" / "vllm" / version
    d.mkdir(parents=True)
    p = d / "context_attention_perf.parquet"
    pd.DataFrame(rows).to_parquet(p)
    return p


def row(src, isl, lat, window=0, batch=1, heads=32):
    return {"kernel_source": src, "batch_size": batch, "isl": isl, "num_heads": heads, "num_key_value_heads": 8,
            "head_dim": 128, "window_size": window, "kv_cache_dtype": "bfloat16", "latency": lat}


def test_known_ratio_from_matched_shapes(tmp_path):
    """Triton at 3x FlashAttention on every compute-bound shape; short prompts, windows and unmatched shapes are not
    pairs."""
    rows = []
    for isl in (1024, 4096, 16384):
        rows += [row("vllm_flash_attn_fa2", isl, isl / 100), row("vllm_triton_attn", isl, 3 * isl / 100)]
    rows += [row("vllm_flash_attn_fa2", 256, 1.0), row("vllm_triton_attn", 256, 9.0)]  # below MIN_ISL
    rows += [row("vllm_flash_attn_fa2", 4096, 1.0, window=128), row("vllm_triton_attn", 4096, 9.0, window=128)]
    rows += [row("vllm_triton_attn", 8192, 50.0, heads=64)]  # no FlashAttention twin
    table(tmp_path, rows)
    pairs = load_pairs(tmp_path)
    assert len(pairs) == 3 and (pairs["isl"] >= MIN_ISL).all()
    fit = fit_ratio(pairs)
    assert fit["value"] == pytest.approx(3.0) and fit["stderr"] == pytest.approx(0.0, abs=1e-12)


def test_writes_a_catalog_the_simulator_reads(tmp_path):
    table(tmp_path / "data", [row("vllm_flash_attn_fa2", 2048, 1.0), row("vllm_triton_attn", 2048, 2.5),
                              row("vllm_flash_attn_fa2", 8192, 4.0), row("vllm_triton_attn", 8192, 10.0)])
    out = tmp_path / "attention_kernels.yaml"
    text = fit_and_write(tmp_path / "data", out, "specsim fit attention --out x", "2026-12-02")
    assert "2.500" in text
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert doc["provenance"]["date"] == "2026-12-02" and doc["provenance"]["command"].startswith("specsim fit attention")
    assert read_attention_catalog(out).triton_prefill_ratio.value == pytest.approx(2.5)


def test_no_pairs_is_a_clear_error(tmp_path):
    table(tmp_path, [row("vllm_flash_attn_fa2", 2048, 1.0)])
    with pytest.raises(InputError, match="vllm_triton_attn"):
        load_pairs(tmp_path)
    with pytest.raises(InputError, match="no <gpu>/attention"):
        load_pairs(tmp_path / "empty")


def test_missing_column_names_the_file(tmp_path):
    p = table(tmp_path, [{"kernel_source": "vllm_triton_attn", "isl": 2048}])
    with pytest.raises(InputError) as e:
        load_pairs(tmp_path)
    assert str(p) in str(e.value) and "latency" in str(e.value)


@pytest.mark.skipif(not ROOT.is_dir(), reason="../shared/data/aiconfigurator-vllm-kernels absent")
def test_the_tables_say_triton_prefill_is_slower():
    """Wherever the tables hold both kernels at the same shapes, Triton's prefill is slower, and more so for longer
    prompts (the band medians rise)."""
    fit = fit_ratio(load_pairs(ROOT))
    assert fit["pairs"] >= 20 and 1.2 < fit["value"] < 5.0
    medians = [e["median"] for e in fit["evidence"] if e["pairs"] >= 10]
    assert medians == sorted(medians)
