"""Issue 27: validation a user can trust -- impossible fits are not calibrated, no silent pass, physical bounds on
durations, the mixture's point prediction, interval levels and coverage at several levels."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibrate.fit_cost import build_profile, fit_cost, implausible, profile_to_yaml
from simulator.cost_model import Param
from simulator.loading import write_atomic
from simulator.errors import InputError
from tests.calibrate.test_fit_cost import TRUE as FIT_TRUE, _setup as fit_setup, synthetic_calls
from tests.validate.test_validate import _true_profile, make_run_dir

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


def _bad_profile(tmp_path: Path, kind: str) -> Path:
    from calibrate.fit_cost import load_profile

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
    common = ["validate", str(tmp_path / "runB"), "--profile", str(bad), "--no-distribution"]
    r = _run([*common, "--report", str(tmp_path / "rep")])
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"error: {bad}: compute_efficiency:") and not (tmp_path / "rep").exists()
    ok = _run([*common, "--report", str(tmp_path / "rep2"), "--allow-implausible"])
    # accepted: the run then is far slower than such a profile says, which the drift check flags (exit 2, report written)
    assert "physical" not in ok.stderr and (tmp_path / "rep2" / "report.md").exists(), ok.stderr
    assert "compute_efficiency 2.13 [rejected]" in ok.stdout and "mem_efficiency 0.7 [calibrated]" in ok.stdout


# ---- the mixture's point prediction --------------------------------------------------------------------------------
def test_mixture_point_prediction_is_the_mixture_mean():
    from simulator.analytic import predict
    from simulator.cost_model import Deployment, prior_profile
    from simulator.cost_tables import CostTables
    from simulator.systems import SystemConfig
    from simulator.workload import load_workload
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
