"""Every former command name (the tree before the commands were grouped by task: ``specsim calibrate ...``,
``specsim validate-*``, ``specsim study ...``) still runs, as a hidden alias that names its new command on stderr.

``FORMER`` is the former tree, written down once from ``specsim_cli.main.command_tree()`` before the regrouping (not
generated from the new code), with the new name each must run."""

from __future__ import annotations

import pytest

from specsim_cli.main import command_tree, former_commands, main

FORMER = {
    "whatif": "simulate whatif", "capacity": "simulate capacity", "report": "simulate report",
    "pass-time": "simulate pass-time", "serve-workload": "simulate serve-workload",
    "validate": "validate runs", "validate-serving": "validate serving", "validate-capacity": "validate capacity",
    "validate-drift": "validate drift", "validate-cpu": "validate cpu", "validate-inferencex": "validate inferencex",
    "validate-moe-routing": "validate moe-routing", "validate-gpu-summary": "validate gpu-summary",
    "calibrate prepare-models": "measure prepare-models", "calibrate cut-draft": "measure cut-draft",
    "calibrate run": "measure run", "calibrate microbench": "measure microbench",
    "calibrate check-trace": "validate trace", "calibrate static-bench": "measure static-bench",
    "calibrate serve-bench": "measure serve-bench", "calibrate import-bench-serve": "import bench-serve",
    "calibrate serve-specreason": "measure serve-specreason", "calibrate compare-serve": "measure compare-serve",
    "calibrate import-vidur": "import vidur", "calibrate import-aiconfigurator": "import aiconfigurator",
    "calibrate import-llmservingsim": "import llmservingsim",
    "calibrate import-llm-inference-bench": "import llm-inference-bench", "calibrate fit-gpu": "fit gpu",
    "calibrate import-aggregates": "import aggregates", "calibrate fit-mixture": "fit mixture",
    "calibrate fit-acceptance": "fit acceptance", "calibrate spec-metrics": "measure spec-metrics",
    "calibrate fit": "fit cost", "calibrate fit-workload": "fit workload", "calibrate fit-bench": "fit bench",
    "calibrate fit-workload-traces": "fit workload-traces", "calibrate import-specreason": "import specreason",
    "calibrate fit-accuracy": "fit accuracy", "calibrate published-priors": "fit published-priors",
    "calibrate fit-drafter-curves": "fit drafter-curves", "calibrate burst-probe": "measure burst-probe",
    "calibrate serve-run": "measure serve-run", "calibrate serve-systems": "measure serve-systems",
    "calibrate validate-mixture": "validate mixture",
    "calibrate gpu fit-engine": "fit engine", "calibrate gpu fit-moe": "fit moe", "calibrate gpu fit-mla": "fit mla",
    "calibrate gpu fit-quant": "fit quant", "calibrate gpu transfer-priors": "fit transfer-priors",
    "calibrate gpu validate-kernels": "validate kernels", "calibrate gpu check-priors": "validate priors",
    "calibrate gpu spec-sweep": "validate spec-sweep", "calibrate gpu step-plan": "measure step-plan",
    "calibrate gpu step-predict": "measure step-predict", "calibrate gpu step-summary": "validate step-summary",
    "calibrate gpu op-bench": "measure op-bench",
    "study specdecode": "measure study specdecode", "study draft-head": "measure study draft-head",
}


def test_the_table_is_the_aliases_and_every_new_name_is_in_the_tree():
    assert {" ".join(o): " ".join(n) for o, n in former_commands()} == FORMER
    new = {" ".join(p) for p, _ in command_tree()}
    assert set(FORMER.values()) <= new
    assert not set(FORMER) & new - {"validate"}, "a former name is listed in the help"


def _help(args, capsys, monkeypatch) -> tuple[int, str, str]:
    monkeypatch.setenv("COLUMNS", "200")
    rc = main([*args, "--help"])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


@pytest.mark.parametrize("old", [o for o in FORMER if o != "validate"])
def test_a_former_name_runs_its_new_command_and_names_it(old, capsys, monkeypatch):
    new = FORMER[old]
    rc, out, err = _help(old.split(), capsys, monkeypatch)
    assert rc == 0
    assert err == f'note: "specsim {old}" is now "specsim {new}"\n'
    rc_new, out_new, err_new = _help(new.split(), capsys, monkeypatch)
    assert rc_new == 0 and not err_new
    same = [line.rstrip() for line in out.replace(f"specsim {old} ", f"specsim {new} ").splitlines()]
    assert same == [line.rstrip() for line in out_new.splitlines()]


def test_former_validate_runs_validate_runs_with_a_note(tmp_path, capsys):
    rc = main(["validate", str(tmp_path / "nope"), "--profile", "prior"])
    err = capsys.readouterr().err.splitlines()
    assert err[0] == 'note: "specsim validate RUN..." is now "specsim validate runs RUN..."'
    rc_new = main(["validate", "runs", str(tmp_path / "nope"), "--profile", "prior"])
    err_new = capsys.readouterr().err.splitlines()
    assert rc == rc_new == 2 and err[1:] == err_new


@pytest.mark.parametrize("old, new", [
    (["whatif", "cpu-smollm2", "--system", "vanilla-base", "--format", "json"],
     ["simulate", "whatif", "cpu-smollm2", "--system", "vanilla-base", "--format", "json"]),
    (["validate-gpu-summary", "no/such/folder"], ["validate", "gpu-summary", "no/such/folder"]),
    (["calibrate", "fit", "--outt", "x"], ["fit", "cost", "--outt", "x"]),
])
def test_same_stdout_and_exit_code_under_either_name(old, new, capsys):
    rc = main(old)
    cap = capsys.readouterr()
    rc_new = main(new)
    cap_new = capsys.readouterr()
    assert rc == rc_new and cap.out == cap_new.out
    note, *rest = cap.err.splitlines()
    assert note.startswith('note: "specsim ') and note.endswith(f'is now "specsim {" ".join(new[:2])}"')
    assert [r.replace(" ".join(old[:2]), " ".join(new[:2])) for r in rest] == cap_new.err.splitlines() or rc == 0
