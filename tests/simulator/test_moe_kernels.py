"""A vLLM older than a GPU's newest fused-MoE kernel table takes its own generation's MoE terms
(simulator/catalog/moe_kernels.yaml): the table at or below its version, else the oldest; the newest table, other
engines and GPUs without older tables keep gpu_priors.yaml's; a same-chip GPU takes its chip's."""

from __future__ import annotations

import pytest

from simulator.catalog import get_hardware
from simulator.catalog import moe_kernels as mk
from simulator.catalog.engine_hosts import ServingEngine
from simulator.catalog.hardware import PriorParam
from simulator.cost.cost_profile import prior_profile
from simulator.errors import InputError


def table(version, eta):
    return mk.KernelTable(version=version, terms={"moe_compute_efficiency": PriorParam(
        value=eta, kind="calibrated", source=f"table {version}")})


TABLES = mk.GpuTables(newest="0.24.0", older=[table("0.14.0", 0.24), table("0.19.0", 0.30)])


@pytest.mark.parametrize("version, want", [("0.10", "0.14.0"), ("0.11.2", "0.14.0"), ("0.14", "0.14.0"),
                                           ("0.15", "0.14.0"), ("0.19.0", "0.19.0"), ("0.22", "0.19.0"),
                                           ("0.24", None), ("0.30", None)])
def test_the_table_at_or_below_the_version_else_the_oldest(version, want):
    got = mk.pick_table(TABLES, version)
    assert (got.version if got else None) == want


@pytest.fixture
def catalog(tmp_path, monkeypatch):
    import yaml

    doc = {"provenance": {"command": "test"}, "gpus": {"h100-sxm": TABLES.model_dump()}}
    path = tmp_path / "moe_kernels.yaml"
    path.write_text(yaml.safe_dump(doc))
    monkeypatch.setattr(mk, "MOE_KERNELS_PATH", path)
    mk.catalog_file.cache_clear()
    yield path
    mk.catalog_file.cache_clear()


def test_terms_by_engine_version_and_same_chip(catalog):
    assert mk.moe_kernel_terms("h100-sxm", "vllm", "0.11")["moe_compute_efficiency"].value == 0.24
    h200 = mk.moe_kernel_terms("h200", "vllm", "0.11")["moe_compute_efficiency"]
    assert h200.value == 0.24 and "h100-sxm's" in h200.source and "vLLM 0.14.0" in h200.source
    assert mk.moe_kernel_terms("h100-sxm", "vllm", "0.30") == {}  # the newest table: gpu_priors.yaml's
    assert mk.moe_kernel_terms("h100-sxm", "sglang", "0.11") == {}
    assert mk.moe_kernel_terms("h100-sxm", "vllm", None) == {}
    assert mk.moe_kernel_terms("l40s", "vllm", "0.11") == {}  # no older tables in this catalog


def test_prior_profile_takes_the_generation_of_its_engine(catalog):
    hw = get_hardware("h100-sxm")
    old = prior_profile(hw, serving_engine=ServingEngine(version="0.11")).moe_compute_efficiency
    new = prior_profile(hw, serving_engine=ServingEngine()).moe_compute_efficiency
    named = prior_profile(hw, engine="vllm-0.11.0").moe_compute_efficiency
    assert old.value == named.value == 0.24 and "moe_kernels.yaml" in old.source
    assert new.value == hw.cost_prior["moe_compute_efficiency"].value  # the newest: gpu_priors.yaml's


@pytest.mark.parametrize("text, where", [("gpus: {h100-sxm: {newest: x, older: []}}\nprovenance: {}", "dotted"),
                                         ("gpus: 3\nprovenance: {}", "gpus"),
                                         ("gpus: {h100-sxm: {newest: '0.24', older: [{version: '0.14', terms: "
                                          "{moe_speed: {value: 1, kind: prior, source: s}}}]}}\nprovenance: {}",
                                          "unknown terms")])
def test_a_bad_catalog_is_an_input_error_naming_it(catalog, text, where):
    catalog.write_text(text)
    mk.catalog_file.cache_clear()
    with pytest.raises(InputError, match=where) as e:
        mk.moe_kernel_terms("h100-sxm", "vllm", "0.11")
    assert "moe_kernels.yaml" in str(e.value)


def test_the_shipped_catalog_holds_older_generations_of_fitted_gpus():
    tables = mk.moe_kernel_tables()
    assert tables, "simulator/catalog/moe_kernels.yaml is written by specsim fit moe"
    for gpu, t in tables.items():
        assert all(mk.table_version(k.version) < mk.table_version(t.newest) for k in t.older), gpu
        assert get_hardware(gpu).cost_prior, gpu
    assert any(t.older for t in tables.values())
