"""calibrate.fit.fit_acceptance: exact on i.i.d. data, per-position on position-dependent data, the study's runs;
every input checked by one rule set (one line, exit 2, nothing written), fitted gammas never called held-out,
--out loadable by the scenario loader (issue 25)."""

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

import specsim_cli.main as cli
from calibrate.fit.fit_acceptance import Measurement, acceptance_yaml, check_measurement, evaluate, fit, from_study, report
from simulator.errors import InputError
from simulator.inputs.loading import read_yaml
from simulator.inputs.scenario import load_scenario


def _data(cond, gammas=range(1, 9), n=1000):
    return {g: (np.cumprod(np.resize(cond, g) if len(cond) < g else cond[:g]), n) for g in gammas}


def test_iid_data_is_predicted_exactly_by_both():
    data = {g: (0.6 ** np.arange(1, g + 1), 500) for g in range(1, 9)}
    m = fit(data, [1, 2, 3])
    assert m["alpha"] == pytest.approx(0.6)
    for r in evaluate(data, m, range(4, 9)):
        assert r["per_position_err"] == pytest.approx(0, abs=1e-12) and r["iid_err"] == pytest.approx(0, abs=1e-12)


def test_falling_then_flat_conditionals_favour_the_per_position_model():
    cond = np.array([0.9, 0.6, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5])
    data = {g: (np.cumprod(cond[:g]), 500) for g in range(1, 9)}
    rows = evaluate(data, fit(data, [1, 2, 3]), range(4, 9))
    assert all(abs(r["per_position_err"]) < 1e-12 < abs(r["iid_err"]) for r in rows)


def test_study_result_loads_and_extrapolates():
    data = from_study("reports/specdecode-study/result.json", "ngram")
    rows = evaluate(data, fit(data, [1, 2, 3]), range(4, 9))
    assert len(rows) == 5 and all(abs(r["per_position_err"]) < 0.1 for r in rows)


# ---- issue 25: every input checked by one rule set, exit 2 with one line, nothing written -----------------------
REPO = Path(__file__).resolve().parents[2]
GOOD = {"1": {"a": [0.7], "iterations": 100}, "2": {"a": [0.7, 0.5], "iterations": 90},
        "3": {"a": [0.7, 0.5, 0.35], "iterations": 80}, "4": {"a": [0.7, 0.5, 0.35, 0.25], "iterations": 70}}


def _study(tmp_path, per_gamma, name="result.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"acceptance": {"d": {"per_gamma": per_gamma}}}))  # json.dumps writes NaN as NaN
    return p


def _cli(args, capsys) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in args])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.out + cap.err
    return rc, cap.out, cap.err


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


@pytest.mark.parametrize("gamma, entry, field, expect", [
    ("2", {"a": [1.2, 0.5], "iterations": 90}, "per_gamma.2.a", "must lie in [0, 1] (got 1.2)"),
    ("2", {"a": [0.5, 0.7], "iterations": 90}, "per_gamma.2.a", "must not increase"),
    ("3", {"a": [0.7, 0.5], "iterations": 80}, "per_gamma.3.a", "expected gamma = 3 entries a_1..a_3 (got 2)"),
    ("2", {"a": [0.7, 0.5], "iterations": 0}, "per_gamma.2.iterations", "whole number >= 1 (got 0)"),
    ("2", {"a": [0.7, 0.5], "iterations": 2.5}, "per_gamma.2.iterations", "whole number >= 1 (got 2.5)"),
    ("2", {"a": [float("nan"), 0.5], "iterations": 90}, "per_gamma.2.a", "a_1 must be a finite number (got nan)"),
    ("2", {"a": [0.7, 0.5], "iterations": float("inf")}, "per_gamma.2.iterations", "(got inf)"),
    ("2", {"a": [0.7, "x"], "iterations": 90}, "per_gamma.2.a", "expected a list of numbers"),
    ("2", {"a": [0.7, -0.1], "iterations": 90}, "per_gamma.2.a", "must lie in [0, 1] (got -0.1)"),
    ("0", {"a": [], "iterations": 9}, "per_gamma.0", "gamma must be a whole number >= 1 (got 0)"),
    ("two", {"a": [0.7, 0.5], "iterations": 9}, "per_gamma.two", "gamma must be a whole number >= 1 (got 'two')"),
    ("2", {"a": [0.7, 0.5]}, "per_gamma.2.iterations", "(got None)"),
])
def test_bad_study_input_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, gamma, entry, field, expect):
    path = _study(tmp_path, {**GOOD, gamma: entry})
    out = tmp_path / "acc.yaml"
    rc, stdout, err = _cli(["fit", "acceptance", "--study", path, "--draft", "d", "--out", out], capsys)
    line = _one_error(err)
    assert rc == 2 and not out.exists() and not stdout.strip()
    assert line.startswith(f"error: {path}: acceptance.d.{field}: ") and expect in line, line
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left either


def test_the_one_rule_set_accepts_what_the_scenario_accepts():
    ok = Measurement("f", 3, [0.9, 0.9, 0.0], 5, "g", "a", "n")
    assert check_measurement(ok)[0] == 3  # equal consecutive rates are fine (non-increasing)
    with pytest.raises(InputError, match="f: g: gamma must be a whole number >= 1 .got True"):
        check_measurement(Measurement("f", True, [0.5], 5, "g", "a", "n"))


def _run_dir(tmp_path, edit) -> Path:
    """A copy of a committed speculative run (gamma 2) with its first speculative step edited."""
    src = REPO / "reports/cpu-campaign-v2/runs/specdecode-g2"
    d = tmp_path / "run-g2"
    shutil.copytree(src, d)
    recs = [json.loads(x) for x in gzip.open(d / "steps.jsonl.gz", "rt")]
    k = next(i for i, r in enumerate(recs) if r["spec_gamma"] > 0)
    edit(recs[k])
    (d / "steps.jsonl.gz").unlink()
    (d / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return d


@pytest.mark.parametrize("edit, expect", [
    (lambda r: r.update(spec_accepted_per_pos=[3, 5]), "step 0: spec_accepted_per_pos / spec_drafted_per_pos[0]: "
                                                       "cumulative acceptance must not increase"),
    (lambda r: r.update(spec_accepted_per_pos=[99, 0]), "step 0: spec_accepted_per_pos / spec_drafted_per_pos[0]: a_1"),
    (lambda r: r.update(spec_accepted_per_pos=[1]), "expected gamma = 2 entries a_1..a_2 (got 1)"),
    (lambda r: r.update(spec_drafted_per_pos=[5, 9]), "step 0: spec_drafted_per_pos / spec_drafted_per_pos[0]: "),
    (lambda r: r.update(spec_drafted_per_pos=[0, 0], spec_accepted_per_pos=[1, 0]),
     "step 0: spec_drafted_per_pos[0]: drafts (verify iterations) must be a whole number >= 1 (got 0)"),
])
def test_bad_run_dir_is_one_line_exit_2(tmp_path, capsys, edit, expect):
    d = _run_dir(tmp_path, edit)
    out = tmp_path / "acc.yaml"
    rc, _, err = _cli(["fit", "acceptance", d, "--fit-gammas", "2", "--out", out], capsys)
    line = _one_error(err)
    assert rc == 2 and not out.exists()
    assert line.startswith(f"error: {d / 'steps.jsonl'}: ") and expect in line, line


def test_fitted_gammas_are_not_reported_as_held_out(tmp_path, capsys):
    data = {g: (0.6 ** np.arange(1, g + 1), 500) for g in range(1, 9)}
    model = fit(data, [1, 2, 3])
    rows = evaluate(data, model, range(2, 6))
    assert [(r["gamma"], r["held_out"]) for r in rows] == [(2, False), (3, False), (4, True), (5, True)]
    text = report(data, model, rows, range(2, 6))
    assert "median |error| over 2 held-out gammas" in text
    assert [ln.split()[:2] for ln in text.splitlines() if ln.strip()[:1].isdigit()] == [
        ["2", "fitted"], ["3", "fitted"], ["4", "held-out"], ["5", "held-out"]]
    # the CLI on a study: --fit-gammas 1-5 with the default --predict-gammas 4-8 -> 4 and 5 are fitted
    rc, out, _ = _cli(["fit", "acceptance", "--study", REPO / "reports/specdecode-study/result.json",
                       "--fit-gammas", "1-5"], capsys)
    roles = {int(ln.split()[0]): ln.split()[1] for ln in out.splitlines() if ln.strip()[:1].isdigit()}
    assert rc == 0 and roles == {4: "fitted", 5: "fitted", 6: "held-out", 7: "held-out", 8: "held-out"}
    assert "over 3 held-out gammas" in out
    rc, out, _ = _cli(["fit", "acceptance", "--study", REPO / "reports/specdecode-study/result.json",
                       "--fit-gammas", "1-8"], capsys)
    assert rc == 0 and "no held-out gamma" in out and "held-out " not in out.replace("no held-out gamma", "")


def test_out_is_a_draft_acceptance_the_scenario_loader_accepts(tmp_path, capsys):
    """--out goes into a scenario's draft.acceptance and loads through the real scenario loader."""
    out = tmp_path / "acc.yaml"
    rc, _, _ = _cli(["fit", "acceptance", "--study", REPO / "reports/specdecode-study/result.json",
                     "--draft", "ngram", "--out", out], capsys)
    assert rc == 0
    written = read_yaml(out)
    sc = yaml.safe_load((REPO / "scenarios/fp8-qwq32b-head-h100-h200.yaml").read_text())
    sc["draft"]["acceptance"] = written
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(sc))
    resolved = load_scenario(tmp_path / "scenario.yaml")
    assert resolved.scenario.draft.acceptance.kind == "fitted"
    assert resolved.workload.token_acceptance == written["a"] and len(written["a"]) == 8
    assert resolved.workload.acceptance_per_position(8)[0] == pytest.approx(0.6848, abs=1e-3)


def test_acceptance_yaml_refuses_what_the_scenario_would_reject():
    bad = {"conditional": np.array([0.2, 1.1]), "alpha": 0.7, "fit_gammas": [2]}  # a_2 > a_1
    with pytest.raises(InputError, match="non-increasing"):
        acceptance_yaml(bad, "test")
