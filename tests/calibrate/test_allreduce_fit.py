"""The large-message all-reduce fit (calibrate/gpu_priors/allreduce_fit.py): a synthetic table whose pair is known,
only the eager rows of the fitted size range, clear errors, a catalog the simulator reads, and (data present) what
AIConfigurator's tables say about NCCL against the small-message pair."""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from calibrate.gpu_priors.allreduce_fit import (BACKEND, MAX_BYTES, MIN_BYTES, ROOT, fit_and_write, fit_gpus, fit_pair,
                                                load_rows)
from simulator.catalog import get_hardware
from simulator.catalog.allreduce import large_allreduce, read_allreduce_catalog
from simulator.errors import InputError


def table(root: Path, gpu: str, rows: list[dict], version: str = "0.19.0") -> Path:
    d = root / gpu / "comm" / "vllm" / version
    d.mkdir(parents=True)
    p = d / "custom_allreduce_perf.parquet"
    pd.DataFrame(rows).to_parquet(p)
    return p


def rows(tp: int, lat_s: float, bus: float, backend: str = BACKEND, sizes=None) -> list[dict]:
    """Rows of a linear all-reduce: t = lat + 2 (g-1)/g bytes / bus (message_size in bf16 elements, latency in ms)."""
    out = []
    for elems in sizes or [2**k for k in range(20, 29)]:
        b = 2.0 * elems
        out.append({"num_gpus": tp, "message_size": elems, "backend": backend, "allreduce_dtype": "bfloat16",
                    "latency": 1e3 * (lat_s + 2 * (tp - 1) / tp * b / bus)})
    return out


def test_known_pair_from_the_eager_rows_in_range(tmp_path):
    """A table built from t_L = 40 us, B_L = 300 GB/s gives them back; graph rows and sizes outside the range (where
    another line holds) do not enter."""
    table(tmp_path, "h100_sxm", rows(8, 40e-6, 300e9) + rows(8, 1e-6, 50e9, backend="vllm_graph")
          + rows(8, 1e-3, 1e9, sizes=[2**10, 2**29]))
    r = load_rows(tmp_path)
    assert set(r["gpu"]) == {"h100-sxm"} and r["bytes"].between(MIN_BYTES, MAX_BYTES).all()
    lat, bw, rms = fit_pair(r)
    assert lat == pytest.approx(40e-6, rel=1e-6) and bw == pytest.approx(300e9, rel=1e-6) and rms < 1e-9
    fits = fit_gpus(r)
    link = get_hardware("h100-sxm").datasheet_link_bandwidth_bytes_per_s
    assert fits["h100-sxm"]["tp"][8]["link_fraction"] == pytest.approx(300e9 / link, rel=1e-6)


def test_writes_a_catalog_the_simulator_reads(tmp_path):
    """The written file names its command and date; the simulator takes the measured GPU's pair, its same-chip twin's
    fraction on the twin's own link, the median for another NVLink GPU (the B200 here), none on PCIe or at TP 1."""
    table(tmp_path / "d", "h100_sxm", rows(2, 30e-6, 250e9) + rows(8, 35e-6, 350e9))
    table(tmp_path / "d", "a100_sxm", rows(8, 90e-6, 190e9), version="0.14.0")
    table(tmp_path / "d", "l40s", rows(2, 0.0, 18e9))
    out = tmp_path / "allreduce.yaml"
    text = fit_and_write(tmp_path / "d", out, "specsim fit allreduce --out x", "2026-12-02")
    assert "h100-sxm TP 8" in text and "NVLink transfer TP 8" in text
    doc = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert doc["provenance"]["date"] == "2026-12-02" and "l40s" in doc["not_applied"]
    cat = read_allreduce_catalog(out)
    h100, h200, b200 = (get_hardware(g) for g in ("h100-sxm", "h200", "b200"))
    lat, bw = large_allreduce(h100, 8, cat)
    assert lat == pytest.approx(35e-6, rel=1e-3) and bw == pytest.approx(350e9, rel=1e-3)
    assert large_allreduce(h100, 4, cat)[1] in (pytest.approx(250e9, rel=1e-3), pytest.approx(350e9, rel=1e-3))
    assert large_allreduce(h200, 8, cat)[1] == pytest.approx(350e9 / 450e9 * h200.datasheet_link_bandwidth_bytes_per_s,
                                                             rel=1e-3)
    frac = sorted([350e9 / h100.datasheet_link_bandwidth_bytes_per_s,
                   190e9 / get_hardware("a100-80gb").datasheet_link_bandwidth_bytes_per_s])
    assert b200.same_chip_as is None  # unmeasured here, no twin: the median of the measured NVLink GPUs at TP 8
    assert large_allreduce(b200, 8, cat)[1] / b200.datasheet_link_bandwidth_bytes_per_s == pytest.approx(
        sum(frac) / 2, rel=1e-3)
    assert large_allreduce(get_hardware("l40s"), 2, cat) is None and large_allreduce(h100, 1, cat) is None


def test_no_rows_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="no <gpu>/comm/vllm"):
        load_rows(tmp_path / "empty")
    table(tmp_path, "h100_sxm", rows(8, 40e-6, 300e9, backend="vllm_graph"))
    with pytest.raises(InputError, match="vllm_eager"):
        load_rows(tmp_path)


def test_missing_column_names_the_file(tmp_path):
    p = table(tmp_path, "h100_sxm", [{"num_gpus": 8, "message_size": 2**24, "backend": BACKEND}])
    with pytest.raises(InputError) as e:
        load_rows(tmp_path)
    assert str(p) in str(e.value) and "latency" in str(e.value)


@pytest.mark.skipif(not ROOT.is_dir(), reason="../shared/data/aiconfigurator-vllm-kernels absent")
def test_the_tables_say_nccl_beats_the_small_pair_on_large_messages():
    """On every measured NVLink GPU and TP degree, the large path's bus bandwidth is above the small-message pair's
    (what an extrapolation of the custom all-reduce would charge), within the physical link, and rises from TP 2 to 8."""
    fits = fit_gpus(load_rows(ROOT))
    nv = {g: v for g, v in fits.items() if v["interconnect"] == "nvlink"}
    assert len(nv) >= 2
    for g, v in nv.items():
        small = get_hardware(g).link_bandwidth_bytes_per_s
        for tp, e in v["tp"].items():
            assert small < e["bandwidth_bytes_per_s"] and 0.3 < e["link_fraction"] <= 1.0, (g, tp)
        if {2, 8} <= set(v["tp"]):
            assert v["tp"][8]["bandwidth_bytes_per_s"] > v["tp"][2]["bandwidth_bytes_per_s"], g
