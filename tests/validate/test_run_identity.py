"""Regressions: run identity (full keys, duplicates refused, no held-out run in any fit),
a censored-only held-out set, exit codes and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from simulator.errors import InputError
from specsim_cli.main import main
from tests.conftest import error_lines

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "specreason-aime-traces"
PROFILE = ROOT / "simulator" / "profiles" / "cost_a100-80gb-vllm082-specreason-runs0-3.yaml"  # fit.runs: results/60/0..3
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")


def _records() -> list[dict]:
    return [json.loads(x) for x in (DATA / "problem60-runs0-7.jsonl").read_text().splitlines() if x.strip()]


def write_traces(folder: Path, runs: dict[str, str], file: str = "t.jsonl") -> Path:
    """Problem-60 runs copied under new ``run`` ids: {source run id: new run id}."""
    folder.mkdir(parents=True, exist_ok=True)
    out = [dict(r, run=runs[r["run"]]) for r in _records() if r["run"] in runs]
    (folder / file).write_text("".join(json.dumps(r) + "\n" for r in out))
    return folder


def full_key_profile(tmp_path: Path) -> Path:
    """The committed runs-0-3 profile: its fit runs recorded by their full keys, with their content hashes."""
    assert "results/60/3" in PROFILE.read_text()
    return PROFILE


def legacy_profile(path: Path, tmp_path: Path) -> Path:
    """``path`` as a profile written before fits recorded full run keys and content hashes: each fit run by its
    last path component (``0``, ``specdecode-g4``), no ``run_hashes``."""
    d = yaml.safe_load(path.read_text())
    d["fit"]["runs"] = [str(r).rstrip("/").rsplit("/", 1)[-1] for r in d["fit"]["runs"]]
    d["fit"].pop("run_hashes", None)
    out = tmp_path / f"legacy-{path.name}"
    out.write_text(yaml.safe_dump(d, sort_keys=False))
    return out


def _cli(args, capsys) -> tuple[int, str]:
    rc = main([str(a) for a in args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return rc, err


@needs_data
def test_runs_with_the_same_last_component_stay_distinct(tmp_path):
    from calibrate.fit.measured import load_measured

    d = write_traces(tmp_path / "t", {f"results/60/{i}": k for i, k in
                                      enumerate(["results/60/0", "a/7/0", "b/3/0"])})
    ms = load_measured([str(d)])
    assert ms.run_keys == ["a/7/0", "b/3/0", "results/60/0"]  # three runs, not one named "0"


@needs_data
def test_duplicate_run_id_across_trace_files_is_one_line_exit_2(tmp_path, capsys):
    d = write_traces(tmp_path / "t", {"results/60/0": "x/0"}, "a.jsonl")
    write_traces(d, {"results/60/1": "x/0"}, "b.jsonl")
    rc, err = _cli(["validate", "runs", d, "--profile", PROFILE, "--out", tmp_path / "rep"], capsys)
    assert rc == 2 and len(error_lines(err)) == 1
    assert "a.jsonl" in err and "b.jsonl" in err and "'x/0'" in err
    assert not (tmp_path / "rep").exists()


def test_duplicate_run_dir_is_one_line_exit_2(tmp_path, capsys):
    import numpy as np

    from tests.validate.test_validate import make_run_dir

    d = make_run_dir(tmp_path / "runA", np.random.default_rng(0), n_requests=1, steps=4)
    rc, err = _cli(["fit", "cost", d, d, "--out", tmp_path / "c.yaml"], capsys)
    assert rc == 2 and "occurs twice" in err and len(error_lines(err)) == 1
    assert not (tmp_path / "c.yaml").exists()


@needs_data
def test_short_fit_run_name_matching_several_inputs_is_refused(tmp_path, capsys):
    """The issue's case: held-out runs a/7/0 and b/3/0 and a profile fitted on run "0": which run
    was fitted cannot be told, so nothing is validated (exit 2), rather than dropping held-out runs."""
    d = write_traces(tmp_path / "t", {"results/60/0": "results/60/0", "results/60/1": "results/60/1",
                                      "results/60/5": "a/7/0", "results/60/6": "b/3/0"})
    rc, err = _cli(["validate", "runs", d, "--profile", legacy_profile(PROFILE, tmp_path), "--out", tmp_path / "rep",
                    "--no-distribution"], capsys)
    assert rc == 2 and "ambiguous" in err and "a/7/0" in err and "b/3/0" in err
    assert not (tmp_path / "rep").exists()


@needs_data
def test_distribution_mode_never_refits_on_held_out_runs(tmp_path, monkeypatch):
    import calibrate.fit.fit_workload as fw
    from validate.validation import run_validation

    d = write_traces(tmp_path / "t", {"results/60/0": "results/60/0", "results/60/1": "results/60/1",
                                      "results/60/2": "results/60/2", "results/60/5": "a/7/0",
                                      "results/60/6": "b/3/0"})
    seen: list[set] = []
    real = fw.fit_workload_from_steps

    def spy(steps, req, **kw):
        seen.append(set(steps["run_id"]) | set(req["run_id"]))
        return real(steps, req, **kw)

    monkeypatch.setattr(fw, "fit_workload_from_steps", spy)
    res = run_validation([str(d)], str(full_key_profile(tmp_path)), des_requests=30, n_boot=50)
    (fold,) = res.folds
    assert fold.test_runs == ["a/7/0", "b/3/0"]
    assert seen == [{"results/60/0", "results/60/1", "results/60/2"}]  # the fit runs among the inputs only
    from validate.report import markdown

    text = markdown(res, [], "test", None, "e2e", 0.0)
    assert "| held-out | results/60/0, results/60/1, results/60/2, results/60/3 | a/7/0, b/3/0 |" in text


@needs_data
@pytest.mark.parametrize("holdout", ["runs:results/60/2", "runs:2", "config:system=specreason", "runs:2,a/7/0"])
def test_any_overlap_of_fit_and_held_out_runs_exits_2(tmp_path, capsys, holdout):
    d = write_traces(tmp_path / "t", {"results/60/2": "results/60/2", "results/60/5": "a/7/0"})
    rc, err = _cli(["validate", "runs", d, "--profile", full_key_profile(tmp_path), "--out", tmp_path / "rep",
                    "--holdout", holdout], capsys)
    assert rc == 2 and "results/60/2" in err and "in-sample" in err and len(error_lines(err)) == 1
    assert not (tmp_path / "rep").exists()


def test_leaking_fold_is_refused_before_the_workload_refit():
    from validate.holdout import Fold, check_out_of_sample

    with pytest.raises(InputError, match="in-sample"):  # same runs
        check_out_of_sample(Fold("f", ["a/7/0", "b/3/0"], ["a/7/0"], None))
    with pytest.raises(InputError, match="in-sample"):  # same requests under a runs fold
        check_out_of_sample(Fold("f", ["x"], ["y"], None, fit_requests=[("y", "y/0")], test_requests=[("y", "y/0")]))


@needs_data
def test_censored_only_held_out_set_exits_2_saying_so(tmp_path, capsys):
    """Run 4 of problem 60 never reached an answer inside the recording (censored)."""
    rc, err = _cli(["validate", "runs", DATA, "--profile", PROFILE, "--holdout", "runs:4", "--out", tmp_path / "rep",
                    "--des-requests", "30"], capsys)
    assert rc == 2 and "no uncensored held-out run to judge" in err and "results/60/4" in err
    assert len(error_lines(err)) == 1 and not (tmp_path / "rep").exists()
    rc, err = _cli(["validate", "runs", DATA, "--profile", PROFILE, "--holdout", "runs:4", "--out", tmp_path / "rep",
                    "--no-distribution"], capsys)  # replay still judges it
    assert rc == 0, err


def test_whatif_negative_seed_is_one_line_exit_2(capsys):
    rc, err = _cli(["simulate", "whatif", "reference-a6000-qwq32b", "--engine", "des", "--seed", "-1"], capsys)
    assert rc == 2 and err.strip() == "error: --seed: must be an integer >= 0 (got -1)"


def test_no_module_imports_click():
    """typer vendors click (typer._click); an undeclared ``import click`` breaks a venv made from the
    declared dependencies only."""
    import re

    for p in [*ROOT.glob("simulator/**/*.py"), *ROOT.glob("calibrate/**/*.py"), *ROOT.glob("validate/**/*.py")]:
        assert not re.search(r"^\s*(import click|from click)", p.read_text(), re.M), p


CPU_PROFILE = ROOT / "simulator" / "profiles" / "cost_cpu-vllm032.yaml"
CPU_RUN = ROOT / "reports" / "cpu-campaign" / "runs" / "specdecode-g4"


@pytest.mark.skipif(not CPU_RUN.is_dir(), reason="committed CPU campaign runs absent")
def test_a_run_recorded_by_folder_name_is_its_recorded_directory_or_a_copy_of_it(tmp_path, monkeypatch):
    """A profile that recorded its fit run as ``specdecode-g4`` (input reports/cpu-campaign/runs/specdecode-g4)
    was fitted on that directory and its copies (same run.json), not on every run whose folder is so named."""
    import shutil

    from simulator.cost.cost_profile import load_profile
    from calibrate.fit.measured import load_measured
    from validate.holdout import profile_fit_keys

    monkeypatch.chdir(ROOT)  # the profile's recorded inputs are relative to the repository root
    copy = shutil.copytree(CPU_RUN, tmp_path / "copy" / "specdecode-g4")
    other = shutil.copytree(CPU_RUN, tmp_path / "other" / "specdecode-g4")
    meta = json.loads((other / "run.json").read_text())
    (other / "run.json").write_text(json.dumps(dict(meta, created_at="2026-11-25T00:00:00+00:00")))
    profile = load_profile(legacy_profile(CPU_PROFILE, tmp_path))
    _, in_inputs = profile_fit_keys(load_measured([copy]), profile)
    assert len(in_inputs) == 1  # a copy of the fit run is the fit run: never predicted
    _, in_inputs = profile_fit_keys(load_measured([other]), profile)
    assert in_inputs == []      # another run of the same name is held out
    _, in_inputs = profile_fit_keys(load_measured([CPU_RUN]), profile)
    assert len(in_inputs) == 1


@pytest.mark.skipif(not CPU_RUN.is_dir(), reason="committed CPU campaign runs absent")
def test_inputs_share_one_setup_each_fact_from_the_first_input_that_states_it(tmp_path):
    import shutil

    from calibrate.fit.measured import load_measured

    base_only = shutil.copytree(CPU_RUN.parent / "vanilla-base", tmp_path / "a" / "vanilla-base")
    ms = load_measured([base_only, CPU_RUN])  # the vanilla-base run names no small model; specdecode-g4 does
    assert ms.hint["base_model"] == "smollm2-135m" and ms.hint["hardware"] == "cpu"
    gpu = shutil.copytree(CPU_RUN, tmp_path / "b" / "specdecode-g4")
    meta = json.loads((gpu / "run.json").read_text())
    meta["hardware"] = dict(meta["hardware"], device="cuda", gpu_name="NVIDIA H100 80GB HBM3")
    (gpu / "run.json").write_text(json.dumps(meta))
    with pytest.raises(InputError, match="hardware: 'h100-sxm' here but 'cpu'"):
        load_measured([base_only, gpu])
