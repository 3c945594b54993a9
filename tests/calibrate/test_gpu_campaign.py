"""The GPU campaign script's CPU dry run: the same script and stages the device runs, tiny sizes."""

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_campaign.sh"


@pytest.mark.real_engine
def test_static_stage_dry_run_packs_valid_records(tmp_path):
    pytest.importorskip("torch")
    env = {**os.environ, "PY": sys.executable, "ARCHS": "r1-distill-qwen-1.5b"}
    r = subprocess.run(["bash", str(SCRIPT), "static", str(tmp_path / "out"), "--tiny"], capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    pack = tmp_path / "out" / "static-r1-distill-qwen-1.5b.tar.gz"
    with tarfile.open(pack) as tf:
        names = set(tf.getnames())
        assert {"static-r1-distill-qwen-1.5b/microbench.jsonl", "static-r1-distill-qwen-1.5b/bandwidth.json"} <= names
        bw = json.load(tf.extractfile("static-r1-distill-qwen-1.5b/bandwidth.json"))
    assert bw["catalog_hardware"] == "cpu" and len(bw["decode"]) == 4
    from calibrate.contracts.trace_schema import check_run_dir

    assert len(check_run_dir(tmp_path / "out" / "work" / "static-r1-distill-qwen-1.5b")["microbench"]) > 0


@pytest.mark.real_engine
def test_ops_stage_dry_run_reads_back_through_the_vidur_importer(tmp_path):
    pytest.importorskip("torch")
    env = {**os.environ, "PY": sys.executable}
    r = subprocess.run(["bash", str(SCRIPT), "ops", str(tmp_path / "out"), "--tiny"], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out" / "ops.tar.gz").is_file()
    from calibrate.gpu_priors.import_vidur import import_vidur

    records, _ = import_vidur(tmp_path / "out" / "work" / "vidur-ours")
    assert set(records["source_op"]) >= {"attn_pre_proj", "mlp_up_proj", "mlp_down_proj", "attn_post_proj"}
    assert (records["time_s"] > 0).all() and set(records["tp"]) == {1, 2}


def test_unknown_stage_exits_2():
    r = subprocess.run(["bash", str(SCRIPT), "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().startswith("error:")


@pytest.mark.real_engine
def test_e2e_and_analyze_stages_dry_run(tmp_path):
    """The e2e stage runs the five systems on the torch engine with random weights (arch:NAME, catalog names in
    run.json) and packs them; the analyze stage, here as after a device run, fits a profile on three of the
    configurations and replays the held-out ones."""
    pytest.importorskip("torch")
    env = {**os.environ, "PY": sys.executable}
    r = subprocess.run(["bash", str(SCRIPT), "e2e", str(tmp_path / "out"), "--tiny"], capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    pack = tmp_path / "out" / "e2e-smollm2-135m.tar.gz"
    runs = {"vanilla-base", "vanilla-small", "specdecode-g4", "specreason-t0", "specreason-t7", "specreason-decode-t7-g4"}
    with tarfile.open(pack) as tf:
        assert {f"e2e-smollm2-135m/{r}/run.json" for r in runs} <= set(tf.getnames())
        meta = json.load(tf.extractfile("e2e-smollm2-135m/specreason-decode-t7-g4/run.json"))
    assert meta["models"]["base"]["catalog_name"] == "smollm2-135m"
    assert meta["models"]["small"]["catalog_name"] == "smollm2-135m-cut6" and meta["models"]["base"]["dummy_weights"]
    r = subprocess.run(["bash", str(SCRIPT), "static", str(tmp_path / "out"), "--tiny"], capture_output=True,
                       text=True, env={**env, "ARCHS": "smollm2-135m"}, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    res = tmp_path / "res"
    res.mkdir()
    for p in (pack, tmp_path / "out" / "static-smollm2-135m.tar.gz"):
        p.rename(res / p.name)
    r = subprocess.run(["bash", str(SCRIPT), "analyze", str(res)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    a = res / "analysis"
    profile = a / "profile-e2e-smollm2-135m.yaml"
    assert "specreason-t0" in profile.read_text() and "specdecode-g4" not in profile.read_text().split("fit:")[-1]
    assert "specreason-decode-t7-g4" in (a / "configs-e2e-smollm2-135m" / "report.md").read_text()
    # the static-bench profile: fitted, its held-out folds reported, and it predicts the e2e requests
    assert (a / "bench.yaml").is_file() and (a / "static-bench" / "heldout.csv").is_file()
    assert "vanilla-base" in (a / "from-bench-e2e-smollm2-135m" / "report.md").read_text()
    for prior in ("prior", "datasheet"):
        assert f"--profile {prior}" in (a / f"from-{prior}-e2e-smollm2-135m" / "report.md").read_text()
    summary = (a / "summary.md").read_text()  # one row per held-out check, ready for the README's table
    for row in ("static-bench fit (cpu)", "| configs-e2e-smollm2-135m |", "| from-bench-e2e-smollm2-135m |",
                "| from-prior-e2e-smollm2-135m |", "| from-datasheet-e2e-smollm2-135m |"):
        assert row in summary, row
