"""Drift: speed factors per call kind, flag against the fit runs' range, scope, hardware
fingerprint, the --drift policy's exit codes, coverage reported apart for flagged runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from specsim_cli.main import main
from tests.validate.test_validate import _setup, make_run_dir
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data" / "specreason-aime-traces"
PROFILE = ROOT / "simulator" / "profiles" / "cost_a100-80gb-vllm082-specreason-runs0-3.yaml"


def slow_down(run: Path, factor: float, fields=("small_time_s", "score_time_s", "base_time_s")) -> None:
    """Every call time of ``fields`` (and the request totals) times ``factor``: the same run on a slower machine."""
    steps = [json.loads(x) for x in (run / "steps.jsonl").read_text().splitlines()]
    for s in steps:
        for f in fields:
            s[f] *= factor
    (run / "steps.jsonl").write_text("".join(json.dumps(s) + "\n" for s in steps))
    reqs = [json.loads(x) for x in (run / "requests.jsonl").read_text().splitlines()]
    for r in reqs:
        mine = [s for s in steps if s["request_id"] == r["request_id"]]
        for f in ("small_time_s", "score_time_s", "base_time_s"):
            r[f] = sum(s[f] for s in mine)
        r["latency_s"] = r["small_time_s"] + r["score_time_s"] + r["base_time_s"]
    (run / "requests.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Fit runs A, B, C (same machine, 5% call noise); held out: D alike, E 2x slower on every call,
    F 2x slower on the base model's calls only; and a profile fitted on A-C."""
    tmp = tmp_path_factory.mktemp("drift")
    rng = np.random.default_rng(11)
    paths = {n: make_run_dir(tmp / f"run{n}", rng, sigma=0.05, n_requests=2, steps=20) for n in "ABCDEF"}
    slow_down(paths["E"], 2.0)
    slow_down(paths["F"], 2.0, ("score_time_s", "base_time_s"))
    prof = tmp / "cost.yaml"
    assert main(["fit", "cost", *(str(paths[n]) for n in "ABC"), "--out", str(prof)]) == 0
    return tmp, paths, prof


def test_flags_the_slow_runs_with_their_scope(runs):
    from validate.validation import run_validation

    _, p, prof = runs
    res = run_validation([str(p[n]) for n in "DEF"], str(prof), distribution=False, n_boot=100)
    d = res.drift_runs.set_index("run_key")
    key = {n: p[n].as_posix() for n in "DEF"}
    assert not d.loc[key["D"], "drift_flag"]
    assert d.loc[key["E"], "drift_flag"] and d.loc[key["E"], "drift_scope"].startswith("global")
    assert d.loc[key["F"], "drift_flag"] and d.loc[key["F"], "drift_scope"].startswith("base model only")
    k = res.drift_kinds.set_index(["run_key", "op"])
    assert k.loc[(key["E"], "base_generate"), "factor"] == pytest.approx(2.0, rel=0.1)
    assert k.loc[(key["F"], "small_generate"), "outside"] == 0
    # 2x slower decode on the fit's a100-80gb TP=2 is what a100-80gb TP=1 gives at the same efficiency
    assert "a100-80gb TP=1" in d.loc[key["E"], "explained_by"]
    by = res.figures["replay_by_drift"].set_index("group")
    assert by.loc["drift_flag=False", "n"] == 2 and by.loc["drift_flag=True", "n"] == 4
    assert by.loc["drift_flag=True", "coverage"] == 0.0  # intervals conditional on the fit runs' machine
    assert "conditional on the same machine and load" in res.interval_statement


def test_drift_policy_exit_codes_and_report(runs, capsys):
    tmp, p, prof = runs
    common = ["validate", *(str(p[n]) for n in "DEF"), "--profile", str(prof), "--no-distribution"]
    rc = main([*common, "--out", str(tmp / "flag"), "--max-median-ape", "0.9"])
    err = capsys.readouterr().err
    assert rc == 2 and "--drift" in err and "bar was not judged" in err
    text = (tmp / "flag" / "report.md").read_text()
    assert "2 of 3 held-out runs flagged" in text and "conditional on the same machine and load" in text
    rc = main([*common, "--out", str(tmp / "excl"), "--drift", "exclude", "--max-median-ape", "0.9"])
    assert rc == 0, capsys.readouterr().err
    text = (tmp / "excl" / "report.md").read_text()
    assert f"every figure above and of the bar: {p['E'].as_posix()}" in text
    rc = main([*common, "--out", str(tmp / "bad"), "--drift", "refit"])
    assert rc == 2 and "--drift" in capsys.readouterr().err


def test_hardware_fingerprint_is_the_roofline_ratio():
    from validate.drift import hardware_fingerprint

    s = _setup()  # a100-80gb, TP=2
    same = {(c["hardware"], c["tp"]): c["mem_efficiency"] for c in hardware_fingerprint(1.0, s, 0.8)}
    assert same[("a100-80gb", 2)] == pytest.approx(0.8) and same[("a100-80gb", 4)] == pytest.approx(0.4)
    assert ("a100-80gb", 1) not in same  # 1.6 > plausible
    half = {(c["hardware"], c["tp"]): c["mem_efficiency"] for c in hardware_fingerprint(2.0, s, 0.8)}
    assert half[("a100-80gb", 1)] == pytest.approx(0.8) and ("a100-40gb", 1) not in half  # 65 GB of weights


@pytest.mark.skipif(not DATA.is_dir(), reason="../shared/data not present")
def test_problems_62_70_are_flagged_slower_on_the_base_model():
    from simulator.cost.cost_profile import load_profile
    from validate.drift import aggregate_speed_factors, fit_ranges, flag_runs, method_check
    from validate.replay import setup_from_profile

    prof = load_profile(PROFILE)
    setup = setup_from_profile(prof)
    agg = aggregate_speed_factors(DATA / "per-problem-aggregates.json", prof, setup)
    f = flag_runs(agg.rename(columns={"problem": "run_key"}).assign(factor_low=agg["factor"],
                                                                     factor_high=agg["factor"]), fit_ranges(prof))
    base = f[(f["op"] == "base_generate") & (f["run_key"] != 60)]
    assert len(base) == 9 and (base["outside"] == 1).all() and base["factor"].between(1.8, 2.6).all()
    score = f[f["op"] == "score"]
    assert (score["outside"] == 0).all()  # scoring (prefill) did not move: not a global change
    err = method_check(str(DATA), prof, setup)["error"].abs()
    assert err.median() < 0.03  # the aggregate method against per-call factors on runs 0-7


def test_fingerprint_for_a_model_without_a_published_size():
    """A catalog model with no published parameter count (a layer cut) uses its shape's count."""
    from calibrate.fit.fit_cost import Setup
    from validate.drift import hardware_fingerprint

    setup = Setup.from_names("cpu", 1, "smollm2-135m", "smollm2-135m-cut6")
    assert setup.models["small"].published_params is None
    out = hardware_fingerprint(1.5, setup, 0.5, role="small")
    assert isinstance(out, list)


def test_request_hold_out_never_flags_its_own_fit_runs():
    """Requests held out of runs that are also fit runs are the same machine and load by construction:
    the drift check does not flag them (it did, on tiny runs, by the noise of one request)."""
    import glob
    from pathlib import Path

    from validate.validation import run_validation

    repo = Path(__file__).resolve().parents[2]
    runs = sorted(glob.glob(str(repo / "reports" / "cpu-campaign" / "runs" / "*")))
    res = run_validation(runs, str(repo / "simulator" / "profiles" / "cost_cpu-vllm032.yaml"), "requests:kfold=3",
                         distribution=False)
    assert len(res.drift_runs) > 0 and not res.drift_runs["drift_flag"].astype(bool).any()
    assert res.drift_runs["drift_scope"].str.startswith("none (request hold-out").all()
