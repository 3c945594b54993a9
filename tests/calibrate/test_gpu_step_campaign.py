"""The GPU step campaign: the bench runs for real (CPU dry run of the same code), the plan covers the
issue's points, the before-run predictions are the pass formula's device part, our committed records load, and
the committed step model predicts them once the bench's own fixed costs are fitted."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibrate.gpu_priors import step_plan as gsp
from validate.gpu_step_summary import summarize
from calibrate.gpu_priors import engine_data as ed, engine_fit as ef
from simulator.errors import InputError

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "calibrate" / "measure" / "gpu_step_bench.py"


def tiny_plan(tmp_path: Path, allow_cpu: bool = True) -> Path:
    plan = gsp.make_plan(["llama-3.1-8b"])
    m = plan["models"][0]
    m["spec"].update(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=500)
    m["points"] = [p for p in m["points"] if p["context"] <= 1024 and p["batch"] <= 4 and p["new"] <= 256]
    plan.update(allow_cpu=allow_cpu, dtype="float32", reserve_bytes=0)
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    return f


def test_bench_runs_every_planned_point_on_cpu(tmp_path):
    pytest.importorskip("torch")  # runs the real torch code path (installed by make engines)
    plan = tiny_plan(tmp_path)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(BENCH), str(plan), str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    planned = json.loads(plan.read_text())["models"][0]["points"]
    got = {(x["op"], x["batch"], x["new"], x["context"]) for x in recs}
    assert got == {(p["op"], p["batch"], p["new"], p["context"]) for p in planned}
    assert all(x["time_s"] > 0 for x in recs)
    run = json.loads((out / "run.json").read_text())
    assert run["provenance"]["torch"] and run["provenance"]["device"] == "cpu" and run["skipped"] == []
    assert "finished_utc" in run


def test_bench_refuses_cpu_unless_the_plan_allows_it(tmp_path):
    pytest.importorskip("torch")  # runs the real torch code path (installed by make engines)
    plan = tiny_plan(tmp_path, allow_cpu=False)
    r = subprocess.run([sys.executable, str(BENCH), str(plan), str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=120)
    if "cuda" in r.stdout:  # a GPU machine runs it
        pytest.skip("CUDA present")
    assert r.returncode == 2 and r.stderr.strip().startswith("error:") and "Traceback" not in r.stderr


def test_plan_covers_the_issue_points():
    plan = gsp.make_plan()
    pts = [p for m in plan["models"] for p in m["points"]]
    dec = [p for p in pts if p["op"] == "decode"]
    assert min(p["batch"] for p in dec) == 1 and max(p["batch"] for p in dec) == 256
    assert {1024, 16384} <= {p["context"] for p in dec}
    assert set(range(2, 10)) <= {p["new"] for p in pts if p["op"] == "verify"}
    assert any(p["op"] == "head" for p in pts)
    for m in plan["models"]:
        assert set(gsp.SPEC_FIELDS) <= set(m["spec"])


def test_predictions_are_the_pass_without_host_terms_and_grow_with_load():
    df = gsp.predict(gsp.make_plan(["llama-3.1-8b"]), "h100-sxm")
    parts = df[[f"{k}_ms" for k in ("weights", "kv", "compute", "allreduce", "step", "layers", "sequences")]].sum(axis=1)
    assert np.allclose(parts, df["pass_ms"], rtol=1e-9)
    assert np.allclose(df["device_ms"], df["pass_ms"] - df["step_ms"] - df["sequences_ms"])
    dec = df[df["op"] == "decode"]
    for _, g in dec.groupby("context"):
        assert np.all(np.diff(g.sort_values("batch")["device_ms"].to_numpy()) >= -1e-12)
    for _, g in dec.groupby("batch"):
        assert np.all(np.diff(g.sort_values("context")["device_ms"].to_numpy()) >= -1e-12)
    head, dec1 = df[df["op"] == "head"], dec[(dec["batch"] == 1) & (dec["context"] == 1024)]
    assert (head["device_ms"] < float(dec1["device_ms"].iloc[0]) / 4).all()  # one layer, not 32


def test_committed_campaign_records_load():
    d = ed.load_ours()
    if d.empty:
        pytest.skip("no campaign records committed")
    from simulator.catalog import hardware_catalog

    assert set(d["gpu"]) <= set(hardware_catalog())
    assert (d["time_s"] > 0).all() and (d["runs"] >= 1).all()
    assert set(d["op"]) <= set(ed.OURS_FIT_OPS)
    v = ed.load_ours_verify()
    assert set(v["op"]) == {"verify"} and (v["new"] >= 2).all()


def test_a_corrupt_record_is_one_clear_error(tmp_path):
    src = next((f for f in sorted(REPO.glob(ed.CAMPAIGN_RECORDS)) if '"decode"' in f.read_text()), None)
    if src is None:
        pytest.skip("no campaign records with a decode committed")
    dst = tmp_path / "reports" / "gpu-campaign-x" / "run-1"
    dst.mkdir(parents=True)
    shutil.copy(src.parent / "run.json", dst / "run.json")
    lines = src.read_text().splitlines()
    bad = json.loads(next(x for x in lines if '"decode"' in x))
    bad["time_s"] = -1.0
    (dst / "records.jsonl").write_text("\n".join(lines[:3] + [json.dumps(bad)]) + "\n")
    with pytest.raises(InputError, match="time_s"):
        ed.load_ours(tmp_path)
    (dst / "records.jsonl").write_text("{not json\n")
    with pytest.raises(InputError, match="line 1"):
        ed.load_ours(tmp_path)


def test_committed_step_model_predicts_our_records_once_the_bench_costs_are_fitted():
    """The catalog's step model (shape, efficiencies) with only the bench's own two fixed costs fitted on the
    records: the steps' growth with batch, context, model size and GPU is the model's, not the fit's."""
    d = ed.load_ours()
    if d.empty:
        pytest.skip("no campaign records committed")
    from simulator.catalog import get_hardware
    from simulator.cost.cost_profile import prior_profile

    frozen = {}
    for g in sorted(set(d["gpu"])):
        p = prior_profile(get_hardware(g)).params(get_hardware(g))
        frozen[f"{g}.mem_efficiency"] = p.mem_efficiency
        frozen[f"{g}.compute_efficiency"] = p.compute_efficiency
        for n in ed.SHAPE:
            frozen[n] = getattr(p, n)
    obs = {"ours": ed.Obs("ours", d, ed.predict_ours)}
    fr = ef.fit(obs, frozen=frozen, only=("ours.step_overhead_s", "ours.layer_overhead_s"))
    err = ef.ape(ed.predict_ours(d, fr.values), d["time_s"])
    assert np.median(err) < 0.06 and np.quantile(err, 0.9) < 0.15


def test_summary_and_profile_of_a_campaign_folder(tmp_path):
    src = REPO / "reports" / "gpu-campaign-h100"
    if not (src / "predicted-before-fit.csv").is_file():
        pytest.skip("no campaign folder committed")
    dst = tmp_path / "gpu-campaign-h100"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("summary.md", "before-fit.csv", "profile-*.yaml"))
    text = summarize(dst)
    assert "Before the fit" in text and "| all | graph steps |" in text
    b = __import__("pandas").read_csv(dst / "before-fit.csv")
    assert np.allclose(b["error"], b["device_ms"] / b["measured_ms"] - 1, atol=1e-4)
    from simulator.cost.cost_profile import load_profile

    assert load_profile(dst / "profile-h100-sxm.yaml").hardware == "h100-sxm"
    with pytest.raises(InputError):
        summarize(tmp_path / "empty")


@pytest.mark.parametrize("gpu,hardware", [("h100", "h100-sxm"), ("h200", "h200")])
def test_heldout_grid_is_never_fitted_and_its_summary_reproduces_the_before_run_comparison(tmp_path, gpu, hardware):
    """The held-out GPU check (reports/gpu-step-heldout): its records never reach the engine fit, its plan holds
    verification passes beyond the fitted batches on models whose decodes and verifications no fit has seen, and the
    summary's errors are the committed
    before-the-run predictions against the records."""
    src = REPO / "reports" / "gpu-step-heldout" / gpu
    if not (src / "run-1" / "records.jsonl").is_file():
        pytest.skip("no held-out check committed")
    fit_files = set(REPO.glob(ed.CAMPAIGN_RECORDS))
    assert fit_files and not any(src.parent in f.parents for f in fit_files)
    plan = json.loads((src / "plan.json").read_text())
    assert plan["grid"] == "heldout"
    # models no fit has seen in the ops the check times: round two's causal prefills of Qwen3-8B / Qwen3-32B reach
    # the fit (per-GPU parameters, none per model), their decodes and verifications never do
    ours = ed.load_ours()
    checked = {m["spec"]["name"] for m in plan["models"]} - {"llama-3.1-8b"}
    assert checked and set(ours[ours["model"].isin(checked)]["op"]) <= {"prefill"}
    campaign_batches = {p["batch"] for g in gsp.CAMPAIGN.values() for p in g["points"] if p["op"] == "verify"}
    assert max(p["batch"] for m in plan["models"] for p in m["points"] if p["op"] == "verify") > max(campaign_batches)
    dst = tmp_path / "h"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("summary.md", "before-fit.csv"))
    text = summarize(dst)
    assert "never fitted" in text and "engine fit's values" in text and not list(dst.glob("profile-*.yaml"))
    import pandas as pd

    b = pd.read_csv(dst / "before-fit.csv")
    pred = pd.read_csv(src / f"predicted-before-fit-{hardware}.csv")
    assert len(b) == len(pred)  # every planned point measured and compared
    assert np.allclose(b["fitted_error"], b["fitted_ms"] / b["measured_ms"] - 1, atol=1e-4)


def test_step_predict_with_an_engine_fit_adds_the_fitted_bench_step(tmp_path):
    plan = gsp.make_plan(["qwen3-8b"], grid="heldout")
    vals = gsp.load_fitted_values(REPO / "reports" / "gpu-step-model" / "params.yaml")
    df = gsp.predict(plan, "h100-sxm", fitted=vals)
    assert (df["fitted_ms"] > 0).all()
    # the fitted bench pays its own per-layer cost: slower than the host-free catalog pass at batch 1
    d1 = df[(df["op"] == "decode") & (df["batch"] == 1)]
    assert (d1["fitted_ms"] > d1["device_ms"]).all()
    bad = tmp_path / "p.yaml"
    bad.write_text("params: [1, 2]\n")
    with pytest.raises(InputError, match="params"):
        gsp.load_fitted_values(bad)


def test_prefill_grid_runs_causal_prefills_and_chunks_on_cpu(tmp_path):
    """The prefill grid: whole causal prompts and chunks on a cached context; the chunk's attention covers
    the cached keys too (timing is not asserted: it runs each kind of point once, on the CPU)."""
    pytest.importorskip("torch")  # runs the real torch code path (installed by make engines)
    plan = gsp.make_plan(["qwen3-8b"], grid="prefill")
    pts = plan["models"][0]["points"]
    assert {p["attention"] for p in pts} == {"causal"} and max(p["new"] for p in pts) == 16384
    assert any(p["context"] > 0 for p in pts)
    m = plan["models"][0]
    m["spec"].update(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=500)
    p = pts[0]
    m["points"] = [{**p, "new": 64, "context": 0}, {**p, "new": 16, "context": 0}, {**p, "new": 16, "context": 512}]
    plan.update(allow_cpu=True, dtype="float32", reserve_bytes=0, repeats=3)
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    r = subprocess.run([sys.executable, str(BENCH), str(f), str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    got = {(x["new"], x["context"]) for x in recs if x.get("op") == "prefill"}
    assert got == {(64, 0), (16, 0), (16, 512)}


def test_sustained_point_records_windows_on_cpu(tmp_path):
    """The sustained op replays one step for its seconds and records each window's step time (no nvidia-smi on a
    CPU: no samples); first_s / last_s are the means of the first and last tenth."""
    pytest.importorskip("torch")  # runs the real torch code path (installed by make engines)
    plan = gsp.make_plan(["qwen3-32b"], grid="sustained")
    m = plan["models"][0]
    assert m["points"][0]["op"] == "sustained" and m["points"][0]["seconds"] >= 60
    m["spec"].update(layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, intermediate=128, vocab=500)
    m["points"] = [{**m["points"][0], "new": 32, "seconds": 0.5, "window_s": 0.05}]
    plan.update(allow_cpu=True, dtype="float32", reserve_bytes=0)
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan))
    r = subprocess.run([sys.executable, str(BENCH), str(f), str(tmp_path / "out")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    (rec,) = [json.loads(x) for x in (tmp_path / "out" / "records.jsonl").read_text().splitlines()]
    assert rec["op"] == "sustained" and len(rec["windows"]) >= 2 and rec["smi"] == []
    assert all(w["step_s"] > 0 for w in rec["windows"]) and rec["first_s"] > 0 and rec["last_s"] > 0
    assert rec["windows"][-1]["t_s"] >= 0.5


def test_step_summary_rewrites_a_committed_campaign_only_with_force(capsys):
    """The summary is written into its campaign folder: a committed one (git tracks its summary.md) is refused
    without --force, one line, exit 2, the file untouched (docs/cli.md: nothing committed lost without --force)."""
    from specsim_cli.main import main

    folder = REPO / "reports" / "gpu-step-heldout" / "h100"
    tracked = subprocess.run(["git", "ls-files", "--error-unmatch", "summary.md"], cwd=folder, capture_output=True)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout with the campaign folder committed")
    before = (folder / "summary.md").read_bytes()
    assert main(["validate", "step-summary", str(folder)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: FOLDERS") and "--force" in err and "\n" not in err
    assert (folder / "summary.md").read_bytes() == before
