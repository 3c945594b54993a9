"""The GPU campaign script's CPU dry run (issue 15): the same script and stages the device runs, tiny sizes."""

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
    from calibrate.trace_schema import check_run_dir

    assert len(check_run_dir(tmp_path / "out" / "work" / "static-r1-distill-qwen-1.5b")["microbench"]) > 0


@pytest.mark.real_engine
def test_ops_stage_dry_run_reads_back_through_the_vidur_importer(tmp_path):
    pytest.importorskip("torch")
    env = {**os.environ, "PY": sys.executable}
    r = subprocess.run(["bash", str(SCRIPT), "ops", str(tmp_path / "out"), "--tiny"], capture_output=True, text=True,
                       env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (tmp_path / "out" / "ops.tar.gz").is_file()
    from calibrate.gpu_profiles.import_vidur import import_vidur

    records, _ = import_vidur(tmp_path / "out" / "work" / "vidur-ours")
    assert set(records["source_op"]) >= {"attn_pre_proj", "mlp_up_proj", "mlp_down_proj", "attn_post_proj"}
    assert (records["time_s"] > 0).all() and set(records["tp"]) == {1, 2}


def test_unknown_stage_exits_2():
    r = subprocess.run(["bash", str(SCRIPT), "nope"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.strip().startswith("error:")
