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


def _scenario(tmp_path, name: str, **extra) -> str:
    d = yaml.safe_load(open(f"scenarios/{name}.yaml"))
    d.update(extra)
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


def test_a_length_override_is_blamed_on_its_own_field(tmp_path, capsys):
    p = _scenario(tmp_path, "reference-a6000-qwq32b-gpqa-diamond",
                  workload_overrides={"judge_template_tokens": 1_000_000_000})
    assert main(["simulate", "whatif", p]) == 2
    assert _one_line_err(capsys).startswith(f"error: {p}: workload_overrides.judge_template_tokens:")


def test_a_grid_value_listed_twice_is_one_grid_point(tmp_path, capsys):
    assert main(["simulate", "whatif", "cpu-smollm2", "--hardware", "cpu,cpu", "--system", "vanilla-base",
                 "--format", "csv"]) == 0
    assert capsys.readouterr().out.strip().count("\ncpu,") == 1  # one row, not a crash
    p = _scenario(tmp_path, "cpu-smollm2", grid={"tp": []})
    assert main(["simulate", "whatif", p]) == 2
    assert _one_line_err(capsys).startswith(f"error: {p}: grid.tp:")


def test_a_moe_draft_beside_data_parallel_attention_is_refused_in_one_line(tmp_path, capsys):
    p = _scenario(tmp_path, "h200x8-deepseek-r1-dp8-plain", draft={"model": "deepseek-r1"})
    assert main(["simulate", "whatif", p]) == 2
    err = _one_line_err(capsys)
    assert err.startswith(f"error: {p}: draft.model:") and "cannot handle" not in err


def test_a_request_the_kv_cache_cannot_hold_is_refused_not_served(tmp_path, capsys):
    """vLLM cannot serve a request longer than its KV cache; the serving simulator must not report one as served
    (occupancy above 1): a serving workload's longest request, or a num_gpu_blocks_override too small."""
    line = "vllm bench serve --dataset-name random --random-input-len 120000 --random-output-len 256"
    p = _scenario(tmp_path, "reference-a6000-qwq32b", serving_workload=line)
    args = ["--requests", "20", "--workers", "1", "--system", "vanilla-base", "--qps", "0.1"]
    assert main(["simulate", "capacity", p, *args]) == 2
    err = _one_line_err(capsys)
    assert err.startswith(f"error: {p}: serving_workload:") and "max_model_len 120,256" in err
    assert main(["simulate", "capacity", "reference-a6000-qwq32b", "--bench-serve", line, *args]) == 2
    assert _one_line_err(capsys).startswith("error: --bench-serve:")
    p = _scenario(tmp_path, "cpu-smollm2", execution={"num_gpu_blocks_override": 10})
    assert main(["simulate", "capacity", p, *args]) == 2
    assert _one_line_err(capsys).startswith(f"error: {p}: execution.num_gpu_blocks_override:")


def test_an_empty_slo_option_is_refused_not_replaced_by_the_default(capsys):
    assert main(["simulate", "capacity", "cpu-smollm2", "--system", "vanilla-base", "--qps", "0.1", "--slo", ""]) == 2
    assert _one_line_err(capsys).startswith("error: --slo: empty SLO")


def test_a_missing_accuracy_profile_is_refused_before_any_work(tmp_path, capsys):
    p = _scenario(tmp_path, "cpu-smollm2", accuracy="nope")
    assert main(["simulate", "whatif", p]) == 2
    err = _one_line_err(capsys)  # one line: no progress line of a grid computed first
    assert err.startswith(f"error: {p}: accuracy:")


def test_an_unwritable_folder_names_the_path_asked_for(tmp_path):
    """A folder that cannot hold the file (here a file in its place; read-only or /proc alike): one error naming the
    path asked for, not the temporary file beside it."""
    import pytest

    from simulator.errors import InputError
    from simulator.inputs.loading import write_atomic

    (tmp_path / "f").write_text("a file\n")
    with pytest.raises(InputError) as e:
        write_atomic(tmp_path / "f" / "x.csv", "a\n")
    assert e.value.file == str(tmp_path / "f" / "x.csv") and ".tmp" not in str(e.value)
    assert (tmp_path / "f").read_text() == "a file\n"


def test_system_takes_a_comma_list_as_the_integer_options_do(capsys):
    assert main(["simulate", "whatif", "cpu-smollm2", "--system", "vanilla-base,specdecode", "--system", "specreason",
                 "--gamma", "2", "--threshold", "5", "--format", "csv"]) == 0
    rows = capsys.readouterr().out.strip().splitlines()[1:]
    assert [r.split(",")[2] for r in rows] == ["vanilla-base", "specdecode", "specreason"]
    assert main(["simulate", "whatif", "cpu-smollm2", "--system", "vanilla-base,"]) == 2
    assert _one_line_err(capsys).startswith("error: --system: an empty item")


def test_a_scenario_model_path_that_is_no_config_names_the_scenario_field_and_the_file(tmp_path, capsys):
    """A scenario's ``base.model`` pointing at a file that is not a usable config.json: the scenario and its field
    first, then the config file and what is wrong in it."""
    d = yaml.safe_load(open("scenarios/cpu-smollm2.yaml"))
    bad = tmp_path / "notes.txt"
    bad.write_text("not a config\n")
    d["base"]["model"] = str(bad)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d))
    assert main(["simulate", "whatif", str(p)]) == 2
    err = _one_line_err(capsys)
    assert err.startswith(f"error: {p}: base.model: {bad}: not JSON"), err
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama", "hidden_size": 64}')
    d["base"]["model"] = str(cfg)
    p.write_text(yaml.safe_dump(d))
    assert main(["simulate", "whatif", str(p)]) == 2
    err = _one_line_err(capsys)
    assert err.startswith(f"error: {p}: base.model: {cfg}: ") and "missing required field" in err, err
