"""Adding a GPU is one file (issue 29): a hardware.yaml entry with its datasheet figures and the `detect` / `data_labels`
/ `same_chip_as` / `l2_bytes` facts makes it detectable, nameable by every command and every dataset's importer."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

import simulator.catalog.hardware as hwcat
import specsim_cli.main as cli

REPO = Path(__file__).resolve().parents[2]
NEW = {"name": "h20", "display": "NVIDIA H20 96GB", "dense_bf16_flops_per_s": 148e12, "memory_bandwidth_bytes_per_s": 4.0e12,
       "memory_bytes": 96e9, "interconnect": "nvlink", "link_bandwidth_bytes_per_s": 450e9, "allreduce_latency_s": 6e-6,
       "source": "datasheet (NVIDIA H20), test entry", "detect": ["h20"], "data_labels": {"aiconfigurator": "h20_sxm"},
       "same_chip_as": "h100-sxm", "l2_bytes": 60e6}


@pytest.fixture
def catalog_with_h20(tmp_path, monkeypatch):
    entries = yaml.safe_load(hwcat.CATALOG_PATH.read_text(encoding="utf-8"))
    path = tmp_path / "hardware.yaml"
    path.write_text(yaml.safe_dump([*entries, NEW], sort_keys=False), encoding="utf-8")
    monkeypatch.setattr(hwcat, "CATALOG_PATH", path)
    hwcat.hardware_catalog.cache_clear()
    yield path
    hwcat.hardware_catalog.cache_clear()


def test_the_shipped_gpus_detect_and_label_as_before():
    hwcat.hardware_catalog.cache_clear()
    names = {"NVIDIA A100-SXM4-80GB": "a100-80gb", "NVIDIA A100-SXM4-40GB": "a100-40gb", "NVIDIA H100 80GB HBM3": "h100-sxm",
             "NVIDIA H100 PCIe": "h100-pcie", "NVIDIA H200": "h200", "NVIDIA GH200 480GB": "gh200", "NVIDIA RTX A6000": "rtx-a6000", "NVIDIA L40S": "l40s",
             "NVIDIA A40": "a40", "NVIDIA B200": "b200", "Tesla T4": None}
    for device, want in names.items():
        assert hwcat.hardware_for_device(device) == want, device
    assert hwcat.data_labels("vidur") == {"a100": "a100-80gb", "a40": "a40", "h100": "h100-sxm"}
    assert hwcat.same_chip() == {"a100-40gb": "a100-80gb", "h200": "h100-sxm", "gh200": "h100-sxm", "h100-pcie": "h100-sxm"}


def test_a_gpu_added_in_one_file_runs_end_to_end(catalog_with_h20, tmp_path, capsys):
    assert hwcat.hardware_for_device("NVIDIA H20") == "h20"
    assert hwcat.hardware_for_device("NVIDIA H200") == "h200"  # the longer pattern wins
    assert hwcat.data_labels("aiconfigurator")["h20_sxm"] == "h20" and hwcat.same_chip()["h20"] == "h100-sxm"
    from calibrate.gpu_priors.transfer import targets

    assert "h20" in targets()
    rc = cli.main(["simulate", "pass-time", "--model", "qwen3-8b", "--hardware", "h20", "--batch", "1,8", "--format", "csv"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    sc = yaml.safe_load((REPO / "scenarios" / "modern-h100-h200-qwen3.yaml").read_text(encoding="utf-8"))
    sc["hardware"] = {"gpu": "h20", "count": 4}
    sc["grid"].update(hardware=["h20"], gamma=[2], threshold=[7], tp=[2])
    sc["systems"] = ["vanilla-base", "specdecode"]
    f = tmp_path / "h20.yaml"
    f.write_text(yaml.safe_dump(sc, sort_keys=False), encoding="utf-8")
    rc = cli.main(["simulate", "whatif", str(f), "--format", "csv"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "h20" in out.out
