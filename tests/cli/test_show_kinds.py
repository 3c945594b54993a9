"""Issue 27: `specsim show SCENARIO_OR_PROFILE` prints each cost parameter's kind (calibrated / prior / datasheet /
transferred / rejected), so a profile with an impossible parameter is not shown as a calibration. (Kept beside the
loader-gap tests by the file plan of issue 27's split; it tests the `show` command of simulator/cli.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specsim_cli.main import main
from tests.conftest import error_lines

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "simulator" / "profiles" / "cost_cpu-vllm032.yaml"


def _run(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def _row(out: str, name: str) -> list[str]:
    line = next(x for x in out.splitlines() if x.startswith(f"#   {name} "))
    return line[1:].split()


def _profile(tmp_path: Path, **params) -> Path:
    d = yaml.safe_load(PROFILE.read_text())
    d.update(params)
    p = tmp_path / "cost_test.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def test_a_profile_with_a_rejected_parameter_shows_rejected(tmp_path, capsys):
    p = _profile(tmp_path, compute_efficiency={"value": 2.13, "kind": "rejected", "stderr": 1.03,
                                               "source": "rejected: fitted 2.13 > 1, outside the physical range"})
    code, out, err = _run(["show", str(p)], capsys)
    assert code == 0, err
    assert _row(out, "compute_efficiency")[:3] == ["compute_efficiency", "2.13", "rejected"]
    assert _row(out, "layer_overhead_s")[2] == "calibrated" and _row(out, "step_overhead_s")[2] == "prior"
    assert "outside the physical range" in out
    assert yaml.safe_load(out)["compute_efficiency"]["kind"] == "rejected"  # stdout stays one YAML document


def test_an_impossible_value_written_as_calibrated_shows_rejected(tmp_path, capsys):
    """A profile written before kinds were checked: its kind says calibrated, its value beats the datasheet."""
    p = _profile(tmp_path, compute_efficiency={"value": 2.13, "kind": "calibrated", "stderr": 1.03, "source": "fit"})
    code, out, _ = _run(["show", str(p)], capsys)
    assert code == 0
    row = _row(out, "compute_efficiency")
    assert row[2] == "rejected" and "written as calibrated" in " ".join(row)


def test_a_profile_by_name_and_the_kinds_of_a_scenarios_profiles(capsys):
    code, out, _ = _run(["show", "cpu-vllm032"], capsys)
    assert code == 0 and _row(out, "compute_efficiency")[2] == "calibrated" and "cost profile cpu-vllm032" in out
    assert _row(out, "mem_efficiency")[2] == "prior"  # prior-dominated: the posterior mode, marked a prior
    code, out2, _ = _run(["show", "cost_cpu-vllm032"], capsys)
    assert out2 == out
    code, out, _ = _run(["show", "modern-h100-h200-qwen3"], capsys)  # catalog priors: transferred ones among them
    assert code == 0 and "# cost parameters on h100-sxm" in out and "# cost parameters on h200" in out
    kinds = {r.split()[3] for r in out.splitlines() if r.startswith("#   ") and len(r.split()) > 3}
    # no "prior" left on these GPUs: the per-request host cost (a 5 ms prior before) is the engine version's fitted
    # value (simulator/catalog/engine_hosts.yaml)
    assert {"calibrated", "transferred"} <= kinds
    assert "resolved" in yaml.safe_load(out)


def test_a_moe_scenario_shows_the_kernel_kinds_of_the_table_its_engine_runs(capsys):
    """The fused-MoE kind ratios are parameters like the others: named, valued and kinded (simulator/catalog/
    moe_kernels.yaml, the table the scenario's vLLM version takes)."""
    from simulator.catalog.moe_kernels import moe_kind_params

    code, out, _ = _run(["show", "moe-deepseek-r1-h200x8-mtp"], capsys)
    want = moe_kind_params("h200")  # the scenario names no version: the newest table
    assert code == 0 and want
    for n, p in want.items():
        row = _row(out, f"moe_kind_ratios.{n}")
        assert float(row[1]) == pytest.approx(p.value, rel=1e-5) and row[2] == p.kind


def test_a_gpu_profile_shows_its_params_kinds(capsys):
    code, out, _ = _run(["show", "gpu_a40"], capsys)
    assert code == 0 and _row(out, "attn_compute_efficiency")[2] == "prior"
    assert _row(out, "mem_efficiency")[2] == "calibrated"


def test_an_ambiguous_or_unknown_name_is_one_line(capsys):
    code, _, err = _run(["show", "cpu_gsm_smollm2"], capsys)
    assert code == 2 and "workload_cpu_gsm_smollm2" in err and "accuracy_cpu_gsm_smollm2" in err
    code, _, err = _run(["show", "no-such-thing"], capsys)
    assert code == 2 and "specsim list profiles" in err and len(error_lines(err)) == 1


def test_section_of_a_profile(capsys):
    code, out, _ = _run(["show", "cpu-vllm032", "--section", "fit"], capsys)
    assert code == 0 and "fit:" in out
