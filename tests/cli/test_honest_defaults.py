"""Honest defaults (issue 30): a borrowed workload is said; list workloads/profiles; whatif --hardware/--tp; init."""

from __future__ import annotations

import yaml

from simulator.inputs.scenario import load_scenario
from specsim_cli.main import main


def test_a_borrowed_workload_is_said_in_the_table_header_and_in_show(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "300")
    assert load_scenario("reference-a6000-qwq32b").workload_note() is None
    assert load_scenario("cpu-smollm2").workload_note() is None
    note = load_scenario("modern-h100-h200-qwen3").workload_note()
    assert note and "qwen3-32b" in note and "Qwen/QwQ-32B" in note
    assert main(["simulate", "whatif", "modern-h100-h200-qwen3", "--system", "vanilla-base"]) == 0
    assert "note: workload aime_qwq32b_r1-1.5b was fitted for" in capsys.readouterr().out
    assert main(["show", "modern-h100-h200-qwen3", "--section", "workload"]) == 0
    assert capsys.readouterr().out.startswith("# note: workload aime_qwq32b_r1-1.5b was fitted for")


def test_a_user_scenario_borrowing_names_the_matching_workload(tmp_path):
    d = yaml.safe_load(open("scenarios/reference-a6000-qwq32b.yaml"))
    d.update(workload="cpu_gsm_smollm2")
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    note = load_scenario(str(p)).workload_note()
    assert "matching workload(s): aime60_qwq32b_r1-1.5b, aime_qwq32b_r1-1.5b" in note


def test_list_workloads_and_profiles(capsys):
    assert main(["list", "workloads"]) == 0
    out = capsys.readouterr().out
    assert "aime_qwq32b_r1-1.5b" in out and "cpu_gsm_smollm2" in out
    assert main(["list", "profiles"]) == 0
    out = capsys.readouterr().out
    assert "cpu-vllm032" in out and "accuracy" in out
    assert main(["list", "nothing"]) == 2


def test_whatif_hardware_and_tp_overrides(capsys):
    assert main(["simulate", "whatif", "reference-a6000-qwq32b", "--system", "vanilla-base", "--hardware", "h100-sxm,h200",
                 "--tp", "2", "--format", "csv"]) == 0
    import io

    import pandas as pd

    df = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(df.hardware) == {"h100-sxm", "h200"} and set(df.tp) == {2}
    assert main(["simulate", "whatif", "reference-a6000-qwq32b", "--hardware", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --hardware:") and "\n" not in err
    assert main(["simulate", "whatif", "reference-a6000-qwq32b", "--tp", "0"]) == 2
    assert capsys.readouterr().err.startswith("error: --tp:")


def test_init_writes_a_commented_scenario_and_refuses_to_overwrite(tmp_path, capsys):
    p = tmp_path / "mine.yaml"
    assert main(["init", str(p)]) == 0
    text = p.read_text()
    assert text.count("\n#") >= 5 and "workload:" in text
    assert load_scenario(str(p)).scenario.name == "mine"
    p.write_text(text + "# my edit\n")
    capsys.readouterr()
    assert main(["init", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--force" in err and "\n" not in err
    assert p.read_text().endswith("# my edit\n")  # nothing written
    assert main(["init", str(p), "--force"]) == 0
    assert not p.read_text().endswith("# my edit\n")
    assert main(["init", str(tmp_path / "x.txt")]) == 2
