"""validate/moe_shapes.py: the catalog's MoE terms against measured layers of the served models' shapes."""

import numpy as np
import pandas as pd
import pytest

from calibrate.gpu_priors.moe_fit import predict, with_layer_shape
from simulator.catalog import get_model
from simulator.catalog import moe_kernels as mk
from simulator.errors import InputError
from validate.moe_shapes import ROOT, TOKENS, catalog_terms, shape_ratios, summarize, write_report


def table(root, rows, gpu="h100_sxm", version="0.24.0"):
    d = root / gpu / "moe" / "vllm" / version
    d.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(d / "moe_perf.parquet")


def layer(model, n, tp, dtype="bfloat16", ms=1.0, experts=None):
    m = get_model(model)
    return {"num_tokens": n, "hidden_size": m.hidden, "inter_size": m.expert_intermediate,
            "num_experts": experts or m.experts, "topk": m.experts_per_token, "moe_tp_size": tp, "moe_ep_size": 1,
            "distribution": "balanced", "moe_dtype": dtype, "latency": ms}


def test_known_ratio_and_only_the_models_shapes(tmp_path):
    """Rows measured at twice the catalog's prediction give ratio 0.5; another shape, EP > 1, skewed routing and
    other token counts are not read."""
    m = get_model("qwen3-235b-a22b")
    want = pd.DataFrame([dict(tokens=n, hidden=m.hidden, inter=m.expert_intermediate, experts=m.experts,
                              topk=m.experts_per_token, tp=8, ep=1, distribution="balanced", dtype="bfloat16",
                              gpu="h100-sxm", unit="h100-sxm", source="aic", mats=3.0, bytes_per_weight=2.0, rate="bf16")
                         for n in TOKENS])
    pred = predict(with_layer_shape(want), catalog_terms("h100-sxm", "0.24.0"))
    rows = [layer("qwen3-235b-a22b", n, 8, ms=2e3 * p) for n, p in zip(TOKENS, pred)]
    rows += [layer("qwen3-235b-a22b", 2048, 8, experts=64), layer("qwen3-235b-a22b", 100, 8),
             {**layer("qwen3-235b-a22b", 2048, 8), "moe_ep_size": 8},
             {**layer("qwen3-235b-a22b", 2048, 8), "distribution": "power_law_1.2"}]
    table(tmp_path, rows)
    f = shape_ratios(tmp_path)
    assert len(f) == len(TOKENS) and set(f["model"]) == {"qwen3-235b-a22b"}
    assert np.allclose(f["ratio"], 0.5, rtol=1e-9)
    assert "0.5" in summarize(f)


def test_older_tables_take_the_catalogs_older_terms():
    """A vLLM version older than a GPU's newest table reads that table's terms where the catalog has them."""
    new, old = catalog_terms("h100-sxm", "0.24.0"), catalog_terms("h100-sxm", "0.14.0")
    terms = lambda t: {k: v for k, v in t.items() if "|" not in k}  # noqa: E731  (the kinds: the table's own)
    assert set(terms(new)) == set(terms(old)) and terms(new) != terms(old)
    assert {k for k in old if "|" in k} == {f"h100-sxm|{n}" for n in mk.moe_kind_params("h100-sxm", "vllm", "0.14.0")}


def test_no_tables_or_no_shapes_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="moe_perf.parquet"):
        shape_ratios(tmp_path / "none")
    table(tmp_path, [layer("qwen3-235b-a22b", 2048, 8, experts=64)])
    with pytest.raises(InputError, match="no table holds the layer"):
        shape_ratios(tmp_path)


@pytest.mark.skipif(not ROOT.is_dir(), reason="../shared/data/aiconfigurator-vllm-kernels absent")
def test_the_shared_tables(tmp_path):
    """On the shared tables: finite positive ratios for several models and GPUs, written beside a summary."""
    text = write_report(ROOT, tmp_path / "r")
    f = pd.read_csv(tmp_path / "r" / "ratios.csv")
    assert f["ratio"].gt(0).all() and np.isfinite(f["ratio"]).all()
    assert f["model"].nunique() >= 3 and f["gpu"].nunique() >= 2
    assert (tmp_path / "r" / "summary.md").read_text(encoding="utf-8") == text
