"""The model's own held-out error as capacity tables and reports quote it (validate/serving/accuracy.py,
simulator/catalog/serving_accuracy.py)."""

import pandas as pd
import pytest
import yaml

from simulator.catalog.serving_accuracy import (ACCURACY_PATH, POOLED, error_line, error_lines, read_serving_accuracy,
                                                scenario_error_lines, version_note)
from simulator.errors import InputError
from tests.conftest import REPO
from validate.serving.accuracy import accuracy_doc, write

REPORT = REPO / "reports" / "serving-released"


def _row(**kw):
    base = dict(gpu="h100-sxm", version="0.10", in_fit=True, concurrency=0, dataset="random", input_tokens=2000,
                output_tokens=100, err_tpot_ms=-0.2, err_itl_ms=-0.1, err_ttft_ms=-0.3, err_out_tps=0.4)
    base.update(kw)
    return base


def test_the_shipped_file_is_the_committed_report_distilled():
    """A refit that rewrites the report without regenerating the catalog file fails here."""
    shipped = read_serving_accuracy()
    derived = accuracy_doc(REPORT, "x", "today")
    assert shipped is not None and shipped.model_dump()["gpus"] == derived["gpus"]
    assert shipped.provenance.engine_versions == derived["provenance"]["engine_versions"]
    assert shipped.model_dump()["versions_held_out"] == derived["versions_held_out"]
    heldout = pd.read_csv(REPORT / "heldout-gpu.csv")
    assert shipped.gpus[POOLED]["all"].runs == int(heldout["in_fit"].sum())
    assert {g for g in shipped.gpus if g != POOLED} == set(heldout.loc[heldout["in_fit"], "gpu"])


def test_groups_per_gpu_and_regime_fitted_rows_only_versions_as_strings(tmp_path):
    rows = [_row(), _row(err_tpot_ms=-0.4), _row(concurrency=4, dataset="sharegpt", err_tpot_ms=0.1),
            _row(in_fit=False, err_tpot_ms=9.0), _row(gpu="a100-80gb", version="0.11", err_tpot_ms=0.05)]
    pd.DataFrame(rows).to_csv(tmp_path / "heldout-gpu.csv", index=False)
    pd.DataFrame(rows).assign(err_out_tps=0.2).to_csv(tmp_path / "heldout-version.csv", index=False)
    doc = accuracy_doc(tmp_path, "cmd", "2026-01-01")
    assert doc["versions_held_out"]["all"]["runs"] == 4 and doc["versions_held_out"]["all"]["out_tps"]["bias"] == 20.0
    h = doc["gpus"]["h100-sxm"]
    assert list(h) == ["all", "loop", "burst, long prompts"]  # "all" first, then the regimes in their order
    assert h["all"]["runs"] == 3 and h["all"]["versions"] == ["0.10"]  # not 0.1: a version is a string
    assert h["burst, long prompts"]["tpot_ms"] == {"median": 30.0, "p90": pytest.approx(38.0), "bias": -30.0}
    assert doc["gpus"][POOLED]["all"]["runs"] == 4 and list(doc["gpus"])[-1] == POOLED
    assert doc["provenance"]["engine_versions"] == ["0.10", "0.11"]
    text = write(tmp_path, tmp_path / "acc.yaml", "cmd", "2026-01-01")
    assert text.startswith("# ") and read_serving_accuracy(tmp_path / "acc.yaml").gpus["a100-80gb"]["all"].runs == 1


def test_a_report_without_its_table_or_columns_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="heldout-gpu.csv"):
        accuracy_doc(tmp_path, "x", "d")
    pd.DataFrame([_row()]).drop(columns=["err_ttft_ms"]).to_csv(tmp_path / "heldout-gpu.csv", index=False)
    with pytest.raises(InputError, match="err_ttft_ms"):
        accuracy_doc(tmp_path, "x", "d")


def test_a_bad_catalog_file_names_the_file_and_field(tmp_path):
    doc = yaml.safe_load(ACCURACY_PATH.read_text())
    bad = tmp_path / "a.yaml"
    doc["gpus"]["h200"]["all"]["tpot_ms"]["median"] = -1.0
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError) as e:
        read_serving_accuracy(bad)
    assert "a.yaml" in str(e.value) and "median" in str(e.value)
    doc["gpus"]["h200"]["all"]["tpot_ms"]["median"] = 1.0
    del doc["gpus"][POOLED]
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="pooled"):
        read_serving_accuracy(bad)
    assert read_serving_accuracy(tmp_path / "absent.yaml") is None


def test_lines_quote_the_gpus_own_runs_or_the_pooled_ones_and_nothing_for_a_cpu_host():
    acc = read_serving_accuracy()
    g = next(g for g in acc.gpus if g != POOLED)
    own = error_line(g, acc)
    assert own.startswith(f"{g}: {acc.gpus[g]['all'].runs} released") and "held out" not in own.split(":")[0]
    tpot = acc.gpus[g]["all"].tpot_ms.median
    assert f"TPOT {tpot:.0f}%" in own or f"TPOT {tpot:.1f}%" in own
    other = error_line("no-such-gpu", acc)
    assert "no released serving run" in other and f"({acc.gpus[POOLED]['all'].runs} runs" in other
    assert error_line("cpu", acc) is None
    from simulator.catalog.hardware import same_chip

    sib = next((h, g) for h, g in same_chip().items() if g in acc.gpus and h not in acc.gpus)
    line = error_line(sib[0], acc)  # same silicon, other memory: its sibling's runs, said so
    assert line.startswith(f"{sib[0]}: no released serving run on this GPU; on {sib[1]}, the same chip, "
                           f"{acc.gpus[sib[1]]['all'].runs} released")
    assert error_lines([g, "cpu", g], acc) == [own]  # once per GPU, in order
    assert "e+" not in own + other  # percentages as a planner reads them, never an exponent


def test_a_serving_engine_outside_the_measured_versions_is_said():
    acc = read_serving_accuracy()
    v = acc.provenance.engine_versions[0]
    assert version_note("vllm", v, acc) is None and version_note("vllm", v + ".3", acc) is None
    note = version_note("vllm", "9.99", acc)
    assert "vllm 9.99" in note and all(x in note for x in acc.provenance.engine_versions)
    held = acc.versions_held_out["all"]
    assert "fitted without its own version's" in note and f"TPOT {held.tpot_ms.median:.0f}%" in note
    assert version_note("sglang", v, acc) is not None


def test_capacity_and_report_quote_the_error_on_a_gpu_scenario_only():
    from simulator.inputs.scenario import load_scenario
    from simulator.report.capacity_markdown import ReportContent, model_error_section

    gpu = load_scenario("h200x2-qwen3-32b-serving")
    lines = scenario_error_lines(gpu)
    assert lines[0].startswith("h200: ") and all("h200" not in line for line in lines[1:])
    assert scenario_error_lines(load_scenario("cpu-smollm2")) == []
    c = ReportContent(rs=gpu, slo=None, load=None, cap=None, curves=None, gpu_hour_cost=None, target_qps=None,
                      scenario_arg="", rec={}, floor=None, acc_model=None, spec=None)
    md = "\n".join(model_error_section(c))
    assert "## How far to trust these figures" in md and f"- {lines[0]}" in md


def test_cli_prints_the_error_under_the_table(capsys):
    from specsim_cli.main import main

    assert main(["simulate", "capacity", "h200x2-qwen3-32b-serving", "--slo", "p99_latency<=600s", "--qps", "1",
                 "--requests", "20", "--workers", "1"]) == 0
    out = capsys.readouterr().out
    assert "Model error (plain vLLM serving, held out by GPU" in out and "\n- h200: " in out


def test_serve_workload_quotes_the_error_of_its_gpu(capsys):
    from specsim_cli.main import main

    assert main(["simulate", "serve-workload", "h200x2-qwen3-32b-serving", "--bench-serve", "vllm bench serve "
                 "--random-input-len 256 --random-output-len 16 --request-rate 4 --num-prompts 8"]) == 0
    out = capsys.readouterr().out
    assert "\n- h200: " in out and "model_error" not in out
    line = "vllm bench serve --random-input-len 256 --random-output-len 16 --request-rate 4 --num-prompts 8"
    assert main(["simulate", "serve-workload", "h200x2-qwen3-32b-serving", "--format", "json", "--bench-serve",
                 line]) == 0
    assert __import__("json").loads(capsys.readouterr().out)["model_error"][0].startswith("h200: ")


def test_cli_refuses_a_missing_report_with_exit_2(tmp_path, capsys):
    from specsim_cli.main import main

    assert main(["validate", "serving-accuracy", str(tmp_path / "none"), "--out", str(tmp_path / "a.yaml")]) == 2
    err = capsys.readouterr().err
    assert "heldout-gpu.csv" in err and "Traceback" not in err and not (tmp_path / "a.yaml").exists()
