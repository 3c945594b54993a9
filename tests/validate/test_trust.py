"""Validation a user can trust -- impossible fits are not calibrated, no silent pass, physical bounds on
durations, the mixture's point prediction, interval levels and coverage at several levels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibrate.fit.fit_cost import build_profile, fit_cost
from simulator.cost.cost_profile import profile_to_yaml
from simulator.cost.cost_profile import implausible
from simulator.cost.cost_profile import Param
from simulator.inputs.loading import write_atomic
from simulator.errors import InputError
from tests.calibrate.test_fit_cost import TRUE as FIT_TRUE, _setup as fit_setup, synthetic_calls
from tests.validate.test_validate import _true_profile, make_run_dir
from tests.conftest import examples, error_lines

ROOT = Path(__file__).resolve().parents[2]
SPECSIM = [sys.executable, "-m", "specsim_cli"]


def _run(args):
    return subprocess.run([*SPECSIM, *args], capture_output=True, text=True, cwd=ROOT)


# ---- physically impossible fits ------------------------------------------------------------------------------------
def test_fitted_efficiency_above_one_is_rejected_never_calibrated():
    calls = synthetic_calls(800, np.random.default_rng(5), truth={**FIT_TRUE, "compute_efficiency": 2.0})
    f = fit_cost(calls, fit_setup())
    assert "compute_efficiency" in f.fitted and f.values["compute_efficiency"] > 1.0
    prof = build_profile(f, fit_setup(), name="x", engine="vllm", inputs=["synthetic"], runs=["r0"], hardware_note="")
    p = prof.compute_efficiency
    assert p.kind == "rejected" and "physical" in p.source
    assert prof.mem_efficiency.kind == "calibrated"  # a plausible value keeps its kind
    assert "compute_efficiency" in prof.fit["rejected"] and not prof.fit["physically_plausible"]
    assert set(implausible(prof)) == {"compute_efficiency"}


def test_physical_maximum_follows_the_hardware_catalog():
    """A datasheet peak bounds an efficiency at 1; the CPU entry's bandwidth is a prior below what 2 vCPUs stream, so
    its memory efficiencies may reach ceiling / prior (the CI machine's torch walkthrough fitted 1.28) but not beyond."""
    from simulator.catalog import hardware_catalog
    from simulator.cost.cost_profile import PHYSICAL_MAX, physical_max

    for h in hardware_catalog().values():
        hi = physical_max(h)
        assert hi["compute_efficiency"] == 1.0
        if h.memory_bandwidth_ceiling_bytes_per_s is None:
            assert hi == PHYSICAL_MAX
        else:
            assert hi["mem_efficiency"] == pytest.approx(h.memory_bandwidth_ceiling_bytes_per_s / h.memory_bandwidth_bytes_per_s)
            assert hi["mem_efficiency"] >= 1.0
    assert physical_max("no-such-gpu") == PHYSICAL_MAX == physical_max(None)
    cpu = physical_max("cpu")["mem_efficiency"]
    assert 1.28 < cpu < 10  # a real 2-vCPU bound, not a switch-off

    from simulator.cost.setup import Setup

    setup = Setup.from_names("cpu", 1, "smollm2-135m", "smollm2-135m-cut6")
    for value, ok in ((1.28, True), (cpu * 1.05, False)):
        f = fit_cost(synthetic_calls(50, np.random.default_rng(1)), fit_setup())
        f.values["mem_efficiency"] = value
        prof = build_profile(f, setup, name="x", engine="torch", inputs=["synthetic"], runs=["r0"], hardware_note="")
        assert (prof.mem_efficiency.kind != "rejected") is ok
        assert ("mem_efficiency" in implausible(prof)) is (not ok)
        assert prof.fit["physically_plausible"] is ok


def _bad_profile(tmp_path: Path, kind: str) -> Path:
    from simulator.cost.cost_profile import load_profile

    good = _true_profile(tmp_path / "true.yaml", runs=["runA"])
    prof = load_profile(good).model_copy(
        update={"compute_efficiency": Param(value=2.13, kind=kind, source="test", stderr=1.03)})
    return write_atomic(tmp_path / f"bad-{kind}.yaml", profile_to_yaml(prof, "test"))


@pytest.mark.parametrize("kind", ["rejected", "calibrated"])
def test_validate_refuses_implausible_profile_unless_allowed(tmp_path, kind):
    from validate.validation import run_validation

    make_run_dir(tmp_path / "runA", np.random.default_rng(1))
    make_run_dir(tmp_path / "runB", np.random.default_rng(2))
    bad = _bad_profile(tmp_path, kind)  # "calibrated" 2.13: a profile written before kinds were checked
    with pytest.raises(InputError, match="compute_efficiency.*physical"):
        run_validation([str(tmp_path / "runB")], str(bad), distribution=False, n_boot=50)
    res = run_validation([str(tmp_path / "runB")], str(bad), distribution=False, n_boot=50, allow_implausible=True)
    assert any("--allow-implausible" in n for n in res.notes)


def test_cli_validate_implausible_exit_2_one_line_and_kinds_printed(tmp_path):
    make_run_dir(tmp_path / "runA", np.random.default_rng(1))
    make_run_dir(tmp_path / "runB", np.random.default_rng(2))
    bad = _bad_profile(tmp_path, "rejected")
    common = ["validate", "runs", str(tmp_path / "runB"), "--profile", str(bad), "--no-distribution"]
    r = _run([*common, "--out", str(tmp_path / "rep")])
    assert r.returncode == 2 and len(error_lines(r.stderr)) == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error: {bad}: compute_efficiency:") and not (tmp_path / "rep").exists()
    ok = _run([*common, "--out", str(tmp_path / "rep2"), "--allow-implausible"])
    # accepted: the run then is far slower than such a profile says, which the drift check flags (exit 2, report written)
    assert "physical" not in ok.stderr and (tmp_path / "rep2" / "report.md").exists(), ok.stderr
    assert "compute_efficiency 2.13 [rejected]" in ok.stdout and "mem_efficiency 0.7 [calibrated]" in ok.stdout


# ---- the mixture's point prediction --------------------------------------------------------------------------------
def test_mixture_point_prediction_is_the_mixture_mean():
    from simulator.engines.analytic import predict
    from simulator.cost.cost_model import Deployment
    from simulator.cost.cost_profile import prior_profile
    from simulator.cost.cost_tables import CostTables
    from simulator.inputs.systems import SystemConfig
    from simulator.inputs.workload import load_workload
    from validate.distribution import predict_config

    w = load_workload(ROOT / "simulator/profiles/workload_aime_qwq32b_r1-1.5b.yaml")
    assert w.is_mixture
    setup = fit_setup()
    prof = prior_profile(setup.hardware)
    cfg = SystemConfig(system="specreason", threshold=7)
    out = predict_config(cfg, w, prof, setup, n_requests=400, seed=0)
    params = prof.params(setup.hardware)
    dep = {r: Deployment(m, setup.hardware, setup.tp, params.for_role(r)) for r, m in setup.models.items()}
    first = w.components()[0][1]
    single = predict(cfg, CostTables(dep["base"], dep["small"], dep["draft"], first, None))["latency_s"]
    mix = predict(cfg, CostTables(dep["base"], dep["small"], dep["draft"], w, None))["latency_s"]
    assert out["predicted_s"] == pytest.approx(mix, rel=1e-9)
    assert abs(mix - single) / mix > 0.05  # the test can tell the two apart
    assert out["predicted_s"] == pytest.approx(out["des_mean_s"], rel=0.15)  # the interval's sampler agrees


# ---- no silent pass, physical bounds on durations -------------------------------------------------------------------
def _zero_times(run: Path) -> None:
    for name, fields in (("steps.jsonl", ("small_time_s", "score_time_s", "base_time_s")),
                         ("requests.jsonl", ("small_time_s", "score_time_s", "base_time_s", "latency_s"))):
        recs = [json.loads(x) for x in (run / name).read_text().splitlines()]
        for r in recs:
            r.update(dict.fromkeys(fields, 0.0))
        (run / name).write_text("".join(json.dumps(r) + "\n" for r in recs))


def test_no_usable_held_out_request_fails_with_nothing_to_validate(tmp_path):
    make_run_dir(tmp_path / "runA", np.random.default_rng(1))
    make_run_dir(tmp_path / "runB", np.random.default_rng(2))
    _zero_times(tmp_path / "runB")
    prof = _true_profile(tmp_path / "true.yaml", runs=["runA"])
    r = _run(["validate", "runs", str(tmp_path / "runB"), "--profile", str(prof), "--no-distribution",
              "--out", str(tmp_path / "rep")])  # no --max-median-ape: still a failure
    assert r.returncode == 1 and "nothing to validate" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert not (tmp_path / "rep").exists()


DATA = ROOT.parent / "shared" / "data" / "specreason-aime-traces"


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")
def test_trace_with_zero_timings_is_nothing_to_validate(tmp_path):
    lines = [json.loads(x) for x in (DATA / "problem60-runs0-7.jsonl").read_text().splitlines() if x.strip()]
    one = [r for r in lines if r["run"] == "results/60/5"]
    for r in one:
        for k in ("small_model_time", "eval_time", "base_model_time", "step_time"):
            if r.get(k) is not None:
                r[k] = 0.0
    f = tmp_path / "mine.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in one))
    r = _run(["validate", "runs", str(f), "--profile", "simulator/profiles/cost_a100-80gb-vllm082-specreason-runs0-3.yaml",
              "--out", str(tmp_path / "rep"), "--no-distribution"])
    assert r.returncode == 1 and "nothing to validate" in r.stderr and "Traceback" not in r.stderr, r.stderr


def _edit_step(run: Path, step: int, **upd) -> None:
    recs = [json.loads(x) for x in (run / "steps.jsonl").read_text().splitlines()]
    recs[step].update(upd)
    (run / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


@pytest.mark.parametrize("upd, field", [({"base_time_s": 1e9}, "base_time_s"), ({"small_time_s": -0.5}, "small_time_s"),
                                        ({"score_time_s": 1e4}, "score_time_s"),
                                        ({"started_at": -100.0}, "started_at")])
def test_impossible_durations_exit_2_naming_run_and_step(tmp_path, upd, field):
    run = make_run_dir(tmp_path / "runB", np.random.default_rng(2))
    if "started_at" in upd:  # steps that start in order, then one starting before its predecessor
        recs = [json.loads(x) for x in (run / "steps.jsonl").read_text().splitlines()]
        for i, rec in enumerate(recs):
            rec["started_at"] = 1000.0 + i
        (run / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
        upd = {"started_at": 1000.0 + 2 - 100.0}
    _edit_step(run, 3, **upd)
    r = _run(["validate", "runs", str(run), "--profile", "datasheet", "--out", str(tmp_path / "rep"), "--no-distribution"])
    assert r.returncode == 2 and len(error_lines(r.stderr)) == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.startswith(f"error: {run}/steps.jsonl:4: {field}:"), r.stderr  # step 3 is line 4
    assert not (tmp_path / "rep").exists()


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")
@pytest.mark.parametrize("key, value, what", [("base_model_time", 1e9, "a finite duration"),
                                              ("small_model_time", 50.0, "no longer than the step")])
def test_trace_call_of_1e9_s_exit_2(tmp_path, key, value, what):
    lines = [json.loads(x) for x in (DATA / "problem60-runs0-7.jsonl").read_text().splitlines() if x.strip()]
    i = next(i for i, r in enumerate(lines) if r["run"] == "results/60/2" and r.get("base_model_time"))
    lines[i][key] = value
    f = tmp_path / "t.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in lines))
    r = _run(["validate", "runs", str(f), "--profile", "datasheet", "--out", str(tmp_path / "rep"), "--no-distribution"])
    assert r.returncode == 2 and len(error_lines(r.stderr)) == 1 and "Traceback" not in r.stderr, r.stderr
    assert f"run results/60/2 step {lines[i]['step_id']}:" in r.stderr and what in r.stderr, r.stderr


# ---- inputs: dev and hold-out files, censored runs named, run identity by content ----------------------------------
def _split_traces(folder: Path, rename: dict[str, str] | None = None) -> tuple[Path, Path]:
    lines = [json.loads(x) for x in (DATA / "problem60-runs0-7.jsonl").read_text().splitlines() if x.strip()]
    dev = [r for r in lines if r["run"] in {f"results/60/{i}" for i in range(4)}]
    hold = [r for r in lines if r["run"] in {f"results/60/{i}" for i in range(4, 8)}]
    for old, new in (rename or {}).items():
        hold += [dict(r, run=new) for r in lines if r["run"] == old]
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, recs in (("dev.jsonl", dev), ("hold.jsonl", hold)):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in recs))
        out.append(folder / name)
    return out[0], out[1]


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")
def test_dev_and_holdout_files_run_distribution_mode_and_name_censored_runs(tmp_path):
    from validate.validation import run_validation

    dev, hold = _split_traces(tmp_path)
    res = run_validation([str(dev), str(hold)], str(ROOT / "simulator/profiles/cost_a100-80gb-vllm082-specreason-runs0-3.yaml"),
                         des_requests=100, n_boot=100, drift="flag")
    assert "distribution" in res.figures, res.notes  # was: silently skipped ("give --workload")
    assert not any("skipped" in n for n in res.notes)
    assert any("censored" in n and "results/60/4" in n for n in res.notes)  # run 4 never answers: named


def test_fit_run_renamed_into_the_holdout_is_the_same_run(tmp_path):
    import shutil

    rng = np.random.default_rng(3)
    for name in ("runA", "runB", "runC"):
        make_run_dir(tmp_path / name, rng, sigma=0.05)
    prof = tmp_path / "cost.yaml"
    r = _run(["fit", "cost", str(tmp_path / "runA"), str(tmp_path / "runB"), "--out", str(prof)])
    assert r.returncode == 0, r.stderr
    shutil.copytree(tmp_path / "runA", tmp_path / "hold" / "renamed")  # a fit run under another name
    r = _run(["validate", "runs", str(tmp_path / "runC"), str(tmp_path / "hold" / "renamed"), "--profile", str(prof),
              "--no-distribution", "--out", str(tmp_path / "rep")])
    assert r.returncode == 2 and "under another name" in r.stderr and "runA" in r.stderr, r.stderr
    assert len(error_lines(r.stderr)) == 1 and not (tmp_path / "rep").exists()
    r = _run(["validate", "runs", str(tmp_path / "runA"), str(tmp_path / "hold" / "renamed"), "--profile", str(prof),
              "--no-distribution", "--out", str(tmp_path / "rep")])  # the same run twice among the inputs
    assert r.returncode == 2 and "same content" in r.stderr, r.stderr


# ---- intervals: levels, coverage at four levels, leave-one-run-out spread --------------------------------------------
def test_loro_offsets_are_not_shrunk_like_in_sample_offsets():
    from calibrate.fit.fit_cost import goodness_of_fit, loro_run_offsets

    calls = synthetic_calls(1200, np.random.default_rng(7), sigma=0.02)
    shift = {"r0": 0.15, "r1": -0.1, "r2": 0.05, "r3": -0.12}  # per-run speed factors (log)
    calls["wall_s"] *= np.exp(calls["run_id"].map(shift).to_numpy())
    f = fit_cost(calls, fit_setup())
    ins = goodness_of_fit(f.residuals)
    loro = loro_run_offsets(calls, fit_setup(), start=f.values)
    for op in loro:
        a = np.array(list(ins[op]["run_offsets"].values()))
        b = np.array([loro[op][r] for r in ins[op]["run_offsets"]])
        assert b.std(ddof=1) > a.std(ddof=1)  # each run against a fit that never saw it lands farther out
    prof = build_profile(f, fit_setup(), name="x", engine="vllm", inputs=["s"], runs=list(shift), hardware_note="",
                         loro=loro)
    assert all("loro_run_offsets" in prof.fit["per_op"][op] for op in loro)


def test_level_option_and_coverage_at_four_levels(tmp_path):
    from validate.validation import run_validation

    for i, name in enumerate(("runA", "runB", "runC")):
        make_run_dir(tmp_path / name, np.random.default_rng(10 + i), sigma=0.05)
    prof = _true_profile(tmp_path / "true.yaml", runs=["runA"])
    wide = run_validation([str(tmp_path / "runB"), str(tmp_path / "runC")], str(prof), distribution=False, n_boot=200)
    narrow = run_validation([str(tmp_path / "runB"), str(tmp_path / "runC")], str(prof), distribution=False,
                            n_boot=200, level=0.5)
    assert (narrow.replay["pi_level"] == 0.5).all()
    w = lambda r: (r.replay["pi_high_s"] - r.replay["pi_low_s"]).to_numpy()  # noqa: E731
    assert (w(narrow) < w(wide)).all()
    cov = wide.figures["coverage_levels"]
    assert list(cov.loc[cov["scope"] == "replay e2e", "nominal"]) == [0.5, 0.8, 0.9, 0.95]
    assert (cov.groupby("scope")["inside"].apply(lambda s: s.is_monotonic_increasing)).all()
    r = _run(["validate", "runs", str(tmp_path / "runB"), "--profile", str(prof), "--no-distribution", "--level", "1.5",
              "--out", str(tmp_path / "rep")])
    assert r.returncode == 2 and "--level" in r.stderr and len(error_lines(r.stderr)) == 1
    r = _run(["validate", "runs", str(tmp_path / "runB"), str(tmp_path / "runC"), "--profile", str(prof), "--no-distribution",
              "--level", "0.8", "--out", str(tmp_path / "rep2")])
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr  # 2: drift flag (a noiseless profile)
    assert "median 80% interval width" in r.stdout
    assert "coverage replay e2e" in r.stdout and (tmp_path / "rep2" / "calibration.png").stat().st_size > 1000
    assert "## Interval calibration" in (tmp_path / "rep2" / "report.md").read_text()


def test_run_offsets_correlated_across_kinds_widen_the_request_interval():
    from validate.replay import CallNoise, NoiseModel, offset_correlation, offset_predictives, request_totals

    per_run = {"a": {f"r{i}": v for i, v in enumerate([-0.1, 0.05, 0.12, -0.04, 0.0])},
               "b": {f"r{i}": v for i, v in enumerate([-0.09, 0.06, 0.1, -0.05, 0.01])}}  # slow runs slow in both
    preds, _ = offset_predictives({k: list(v.values()) for k, v in per_run.items()})
    flat = np.zeros(11)
    indep = NoiseModel({k: CallNoise(preds[k], flat) for k in per_run})
    joint = NoiseModel(indep)
    joint.corr = offset_correlation(per_run, preds)
    assert joint.corr is not None
    rows, ops, secs = np.zeros(2, int), np.array(["a", "b"]), np.array([1.0, 1.0])
    width = {}
    for name, nm in (("indep", indep), ("joint", joint)):
        t = request_totals(secs, rows, ops, 1, nm, 4000, np.random.default_rng(0))[0]
        width[name] = np.quantile(t, 0.95) - np.quantile(t, 0.05)
    assert width["joint"] > 1.2 * width["indep"]


# ---- CI robust to load: the campaign's order, spread and sanity bound (no engine needed) ------------------------------
def test_campaign_interleaves_fit_and_heldout_and_sanity_bound_follows_the_spread():
    from validate import campaign

    order = campaign.run_order()
    assert sorted(c.name for c in order) == sorted(c.name for c in campaign.CONFIGS)
    ho = [c.holdout for c in order]
    assert all(a != b for a, b in zip(ho[: 2 * sum(ho)], ho[1: 2 * sum(ho)]))  # fit, held-out, fit, ... (ABAB)
    assert campaign.sanity_bar(0.05) == campaign.SANITY_FLOOR > campaign.DEFAULT_BAR
    assert campaign.sanity_bar(0.4) == pytest.approx(0.8)  # a loaded machine: twice its measured spread
    assert campaign.sanity_bar(float("nan")) == campaign.SANITY_FLOOR
    runs = sorted((ROOT / "reports" / "cpu-campaign-v2" / "runs").glob("*"))
    spread = campaign.within_config_spread(runs)
    assert 0 < spread < 0.5


def test_campaign_main_judges_the_sanity_bound_and_records_load(tmp_path, monkeypatch, capsys):
    """specsim validate cpu end to end on the committed v2 runs (no engine: the campaign step is replaced by the runs)."""
    import shutil

    from validate import campaign

    src = ROOT / "reports" / "cpu-campaign-v2" / "runs"
    for c in campaign.CONFIGS:
        shutil.copytree(src / c.name, tmp_path / "runs" / c.name)
    per = {"load_changed": ["specdecode-g3"], **{f"{c.name}:loadavg1": 1.0 for c in campaign.CONFIGS},
           **{f"{c.name}:cpu_mhz": [2000.0, 2000.0] for c in campaign.CONFIGS}}
    monkeypatch.setattr(campaign, "model_paths", lambda cache: (Path("b"), Path("d")))
    monkeypatch.setattr(campaign, "run_campaign", lambda *a, **k: per)
    from specsim_cli.main import main

    rc = main(["validate", "cpu", "--out", str(tmp_path), "--sanity"])
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["judged_against"] == "sanity" and s["sanity_bar"] == campaign.sanity_bar(s["within_config_spread"])
    assert s["load_changed"] == ["specdecode-g3"] and s["run_order"][1] == "specdecode-g2"
    err = capsys.readouterr().err
    assert "load changed mid-way twice in specdecode-g3" in err  # reported, never silently passed
    assert rc == (0 if s["heldout_e2e"]["median_ape"] <= s["sanity_bar"] else 1)


def test_coverage_levels_apart_for_runs_like_the_fit_runs():
    import pandas as pd

    from validate.replay import COVERAGE_LEVELS, level_columns
    from validate.validation import coverage_levels

    rows = []
    for i, flag in enumerate([False, False, True]):
        r = {"measured_e2e_s": 1.0, "measured_s": 1.0, "drift_flag": flag}
        for lv in COVERAGE_LEVELS:
            for pre in ("", "e2e_"):
                lo, hi = level_columns(lv, pre)
                r[lo], r[hi] = (0.5, 1.5) if not flag else (2.0, 3.0)
        rows.append(r)

    class R:  # the two fields coverage_levels reads
        replay, distribution = pd.DataFrame(rows), None

    cov = coverage_levels(R)
    like = cov[cov["scope"] == "replay e2e, unflagged"]
    assert list(like["inside"]) == [2, 2, 2, 2] and list(like["n"]) == [2, 2, 2, 2]
    assert list(cov.loc[cov["scope"] == "replay e2e", "inside"]) == [2, 2, 2, 2]  # of 3
