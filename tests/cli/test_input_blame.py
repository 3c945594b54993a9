"""Errors name the right file and field (issue 30): token_budget, undecodable files, unexpected errors."""

from __future__ import annotations

import yaml

from specsim_cli.main import main


def _one_line_err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_a_huge_token_budget_is_blamed_on_token_budget(tmp_path, capsys):
    d = yaml.safe_load(open("scenarios/cpu-smollm2.yaml"))
    d["workload_overrides"] = {"token_budget": 1e9}
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    assert main(["simulate", "whatif", str(p)]) == 2
    err = _one_line_err(capsys)
    assert err.startswith(f"error: {p}: workload_overrides.token_budget:") and "memory_fraction" not in err
    w = yaml.safe_load(open("simulator/profiles/workload_cpu_gsm_smollm2.yaml"))
    w["token_budget"] = 1e9
    wp = tmp_path / "w.yaml"
    wp.write_text(yaml.safe_dump(w))
    d.pop("workload_overrides")
    d["workload"] = str(wp)
    p.write_text(yaml.safe_dump(d))
    assert main(["simulate", "whatif", str(p)]) == 2
    assert _one_line_err(capsys).startswith(f"error: {wp}: token_budget:")


def test_an_undecodable_file_is_named(tmp_path, capsys):
    b = tmp_path / "arrivals.csv"
    b.write_bytes(bytes(range(128, 256)) * 3)
    assert main(["simulate", "capacity", "cpu-smollm2", "--arrivals-file", str(b), "--system", "vanilla-base"]) == 2
    err = _one_line_err(capsys)
    assert str(b) in err and "UTF-8" in err


def test_an_unexpected_error_names_the_input(tmp_path, capsys, monkeypatch):
    import simulator.studies.whatif as w

    def boom(*a, **k):
        raise ZeroDivisionError("x")

    monkeypatch.setattr(w, "whatif_from_cli", boom)
    monkeypatch.delenv("SPECSIM_DEBUG", raising=False)
    assert main(["simulate", "whatif", "scenarios/cpu-smollm2.yaml"]) == 2
    err = _one_line_err(capsys)
    assert err.startswith("error: scenarios/cpu-smollm2.yaml: cannot handle this input (ZeroDivisionError")
