"""The main job through the CLI: every shipped scenario, both engines, and bad input -> one line, exit 2."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from simulator.inputs.scenario import list_scenarios
from specsim_cli.main import main
from tests.conftest import error_lines

REF = "scenarios/reference-a6000-qwq32b.yaml"


def run_cli(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("path", list_scenarios(), ids=lambda p: p.stem)
def test_every_shipped_scenario_runs_analytic(path, capsys):
    code, out, err = run_cli(["simulate", "whatif", str(path), "--format", "json"], capsys)
    assert code == 0, err
    res = json.loads(out)["results"]
    assert res and all(r["latency_s"] > 0 for r in res)
    assert {r["system"] for r in res} >= {"vanilla-base"}


def test_reference_grid_has_all_five_systems_gamma_by_threshold(capsys):
    code, out, err = run_cli(["simulate", "whatif", REF, "--format", "json"], capsys)
    assert code == 0, err
    res = json.loads(out)["results"]
    systems = {r["system"] for r in res}
    assert systems == {"vanilla-base", "vanilla-small", "specdecode", "specreason", "specreason-decode"}
    srd = [r for r in res if r["system"] == "specreason-decode"]
    assert len(srd) == 8 * 4  # gamma 1-8 x thresholds 3,5,7,9
    base = next(r for r in res if r["system"] == "vanilla-base")
    assert base["speedup"] == pytest.approx(1.0)


def test_des_engine_through_cli_agrees_with_analytic(capsys):
    args = ["simulate", "whatif", "cpu-smollm2", "--system", "specreason", "--threshold", "5", "--format", "json"]
    code, out_a, _ = run_cli(args, capsys)
    code_d, out_d, err = run_cli(args + ["--engine", "des", "--requests", "600", "--seed", "3"], capsys)
    assert code == code_d == 0, err
    a = json.loads(out_a)["results"][0]
    d = json.loads(out_d)["results"][0]
    assert d["ci_low_s"] <= a["latency_s"] <= d["ci_high_s"]
    assert d["latency_p99_s"] >= d["latency_p90_s"] >= d["latency_p50_s"]


def test_csv_out_file(tmp_path, capsys):
    out = tmp_path / "grid.csv"
    code, _, err = run_cli(["simulate", "whatif", "cpu-smollm2", "--format", "csv", "--out", str(out)], capsys)
    assert code == 0, err
    head = out.read_text().splitlines()[0].split(",")
    assert head[:6] == ["hardware", "tp", "system", "gamma", "threshold", "first_n"]


def _write(tmp_path, text, name="s.yaml"):
    p = tmp_path / name
    p.write_text(text)
    return p


BASE_SCENARIO = Path(REF).read_text()


@pytest.mark.parametrize("edit, field", [
    (("gpu: rtx-a6000", "gpu: rtx-9090"), "hardware.gpu"),
    (("gamma: [1, 2, 3, 4, 5, 6, 7, 8]", "gamma: [0, 2]"), "grid.gamma"),
    (("threshold: [3, 5, 7, 9]", "threshold: [3, 11]"), "grid.threshold"),
    (("base: {model: qwq-32b, tp: 2}", "base: {model: qwq-32b, tp: 3}"), "base.tp"),
    (("hardware: {gpu: rtx-a6000, count: 2}", "hardware: {gpu: rtx-a6000, count: 2}\ngrid_typo: 1"), "grid_typo"),
    (("base: {model: qwq-32b, tp: 2}\nsmall: {model: r1-distill-qwen-1.5b, tp: 2}",
      "base: {model: qwq-32b, tp: 1}\nsmall: {model: r1-distill-qwen-1.5b, tp: 1}"), "base.tp"),  # 61 GiB of weights, 47.5 GiB GPU
    (("model: qwq-32b", "model: qwq-33b"), "base.model"),
    (("workload: aime_qwq32b_r1-1.5b", "workload: nope"), "workload"),
    (("hardware: {gpu: rtx-a6000, count: 2}", "hardware: {gpu: rtx-a6000, count: 2}\nexecution: {prefix_cache_block: 0}"),
     "execution.prefix_cache_block"),
    (("hardware: {gpu: rtx-a6000, count: 2}", "hardware: {gpu: rtx-a6000, count: 2}\nexecution: {prefix_cache_block: 16.5}"),
     "execution.prefix_cache_block"),
    (("hardware: {gpu: rtx-a6000, count: 2}", "hardware: {gpu: rtx-a6000, count: 2}\nexecution: {step_calls: sometimes}"),
     "execution.step_calls"),
    (("hardware: {gpu: rtx-a6000, count: 2}", "hardware: {gpu: rtx-a6000, count: 2}\nexecution: {block: 16}"),
     "execution.block"),
])
def test_bad_scenarios_give_one_line_exit_2(tmp_path, capsys, edit, field):
    old, new = edit
    assert old in BASE_SCENARIO
    p = _write(tmp_path, BASE_SCENARIO.replace(old, new, 1))
    code, out, err = run_cli(["simulate", "whatif", str(p)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(p) in lines[0] and field in lines[0], err


def test_malformed_yaml(tmp_path, capsys):
    p = _write(tmp_path, "name: x\nhardware: {gpu: [\n")
    code, _, err = run_cli(["simulate", "whatif", str(p)], capsys)
    assert code == 2 and str(p) in err and "malformed YAML" in err and len(error_lines(err)) == 1


@pytest.mark.parametrize("args, field", [
    (["--gamma", "0-3"], "--gamma"), (["--threshold", "12"], "--threshold"), (["--gamma", "x"], "--gamma"),
    (["--engine", "magic"], "--engine"), (["--system", "turbo"], "--system"), (["--format", "xml"], "--format"),
])
def test_bad_options(capsys, args, field):
    code, _, err = run_cli(["simulate", "whatif", REF, *args], capsys)
    assert code == 2 and field in err and len(error_lines(err)) == 1


def test_missing_scenario_file(capsys):
    code, _, err = run_cli(["simulate", "whatif", "no/such/file.yaml"], capsys)
    assert code == 2 and "not found" in err


def test_console_script_exit_code_and_no_traceback(tmp_path):
    p = _write(tmp_path, BASE_SCENARIO.replace("gamma: [1, 2, 3, 4, 5, 6, 7, 8]", "gamma: [-1]"))
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "whatif", str(p)], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "grid.gamma" in r.stderr


def test_list_and_show(capsys):
    for what in ("hardware", "models", "scenarios"):
        code, out, _ = run_cli(["list", what], capsys)
        assert code == 0 and out
    code, out, _ = run_cli(["show", "reference-a6000-qwq32b"], capsys)
    assert code == 0 and "resolved:" in out and "token_budget: 8192" in out
    assert "execution:\n  prefix_cache_block: 1\n  step_calls: false" in out


def test_execution_field_reaches_the_engines(tmp_path, capsys):
    """Block caching costs specreason more and leaves one-call vanilla alone; step calls cost vanilla more."""
    cpu = Path("scenarios/cpu-smollm2.yaml").read_text()
    args = ["--system", "vanilla-base", "--system", "specreason", "--threshold", "5", "--format", "json"]
    lat = {}
    for name, ex in (("exact", ""), ("block", "execution: {prefix_cache_block: 128}\n"),
                     ("both", "execution: {prefix_cache_block: 128, step_calls: true}\n")):
        code, out, err = run_cli(["simulate", "whatif", str(_write(tmp_path, cpu + ex, f"{name}.yaml")), *args], capsys)
        assert code == 0, err
        lat[name] = {r["system"]: r["latency_s"] for r in json.loads(out)["results"]}
    assert lat["block"]["vanilla-base"] == lat["exact"]["vanilla-base"]
    assert lat["block"]["specreason"] > lat["exact"]["specreason"]
    assert lat["both"]["specreason"] == lat["block"]["specreason"]
    assert lat["both"]["vanilla-base"] > lat["block"]["vanilla-base"]


def test_draft_weights_count_in_the_base_memory_share(tmp_path, capsys):
    # Qwen3-32B at TP 1 on an H100 with 0.85 of it for the colocated base engine: room for one request's KV alone,
    # not once the Qwen3-1.7B draft's weights and KV join it (specreason-decode); vanilla-base and specdecode run one
    # engine with the whole 0.95 and fit
    text = (Path("scenarios/modern-h100-h200-qwen3.yaml").read_text().replace("tp: [2, 4]", "tp: [1]")
            .replace("memory_fraction: {base: 0.88, small: 0.1}", "memory_fraction: {base: 0.85, small: 0.1}")
            # vLLM's 256 sequences: at the H100's default 1024 the sampler's warm-up leaves the 0.1 small engine short
            + "execution: {max_num_seqs: 256}\n")
    code, _, err = run_cli(["simulate", "whatif", str(_write(tmp_path, text))], capsys)
    assert code == 2 and "memory_fraction.base" in err and "draft qwen3-1.7b" in err
    # without a speculative system the draft is not placed, and the same TP=1 fits
    text = text.replace("systems: [vanilla-base, specdecode, specreason, specreason-decode]", "systems: [vanilla-base, specreason]")
    code, _, err = run_cli(["simulate", "whatif", str(_write(tmp_path, text, "t.yaml")), "--format", "csv"], capsys)
    assert code == 0, err


def test_bad_slo_in_scenario(tmp_path, capsys):
    p = _write(tmp_path, BASE_SCENARIO.replace('slo: "p99_latency<=900s"', 'slo: "p99_latency<=soon"'))
    code, _, err = run_cli(["simulate", "whatif", str(p)], capsys)
    assert code == 2 and f"{p}: slo:" in err


# ---- issue 19: tables that fit, columns with units, a breakdown that sums, show --section ------------------
def test_breakdown_columns_sum_to_latency(capsys):
    import pandas as pd

    from simulator.report.report_table import BREAKDOWN, with_remainder

    code, out, err = run_cli(["simulate", "whatif", REF, "--format", "csv"], capsys)
    assert code == 0, err
    import io

    df = with_remainder(pd.read_csv(io.StringIO(out)))
    parts = df[[c for c in BREAKDOWN if c in df.columns] + (["other_s"] if "other_s" in df.columns else [])]
    assert (parts.sum(axis=1) - df.latency_s).abs().max() < 1e-9 * df.latency_s.max()


def test_table_fits_80_columns_and_columns_option(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    code, out, err = run_cli(["simulate", "whatif", REF], capsys)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "call overhead" not in out  # the summary preset
    code, out, err = run_cli(["simulate", "whatif", REF, "--system", "specreason", "--threshold", "7", "--columns", "breakdown"], capsys)
    flat = " ".join(out.split())
    assert code == 0 and "call" in flat and "sum to latency" in flat
    code, out, err = run_cli(["simulate", "whatif", REF, "--system", "specreason", "--threshold", "7", "--columns", "system,latency_s"], capsys)
    assert code == 0 and "speedup" not in out and "latency" in out
    code, _, err = run_cli(["simulate", "whatif", REF, "--columns", "nope"], capsys)
    assert code == 2 and err.count("\n") == 1 and "--columns" in err


def test_csv_file_gets_every_column_and_says_where(tmp_path, capsys):
    out = tmp_path / "g.csv"
    code, _, err = run_cli(["simulate", "whatif", "cpu-smollm2", "--system", "specreason", "--threshold", "5", "--out", str(out)], capsys)
    assert code == 0 and f"wrote {out}" in err
    assert {"call_overhead_s", "small_prefill_s", "base_prefill_s"} <= set(out.read_text().splitlines()[0].split(","))


def test_show_section(capsys):
    code, out, err = run_cli(["show", "cpu-smollm2", "--section", "hardware"], capsys)
    assert code == 0 and out.startswith("hardware:") and "workload" not in out
    code, _, err = run_cli(["show", "cpu-smollm2", "--section", "nope"], capsys)
    assert code == 2 and "--section" in err and "hardware" in err


def test_help_is_for_users(capsys):
    for args in (["--help"], ["study", "--help"], ["measure", "prepare-models", "--help"]):
        code, out, _ = run_cli(args, capsys)
        assert code == 0 and "<bool>" not in out and "issue" not in out and "thin entry" not in out


def test_verbose_anywhere_is_taken_out_and_engines_quiet_by_default(monkeypatch):
    import specsim_cli.main as cli

    monkeypatch.delenv("SPECSIM_VERBOSE", raising=False)
    monkeypatch.delenv("VLLM_LOGGING_LEVEL", raising=False)
    assert cli.quiet_engines(["simulate", "whatif", "x"]) == ["simulate", "whatif", "x"]
    import os

    assert os.environ["VLLM_LOGGING_LEVEL"] == "ERROR"
    assert cli.quiet_engines(["measure", "run", "--verbose"]) == ["measure", "run"]
    assert os.environ["SPECSIM_VERBOSE"] == "1"


def test_capacity_cpu_replicas_are_not_gpus(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = run_cli(["simulate", "capacity", "cpu-smollm2", "--system", "specreason", "--threshold", "5", "--qps", "0.02",
                              "--requests", "40", "--workers", "1"], capsys)
    assert code == 0, err
    assert "GPU" not in out and "drift" in out and "offered" in out


def test_an_unclosed_brace_names_the_line_it_opens_on(tmp_path, capsys):
    p = _write(tmp_path, "name: x\nhardware: {gpu: rtx-a6000, count: 2\nsystems: [vanilla-base]\nseed: 1\n")
    code, _, err = run_cli(["simulate", "whatif", str(p)], capsys)
    assert code == 2 and "while parsing a flow mapping at line 2" in err and len(error_lines(err)) == 1, err
