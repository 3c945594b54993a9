"""``specsim pass-time`` (issue 24): the pass_ms / iteration_ms columns, the breakdown, bad values in one line."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pandas as pd
import pytest

import specsim_cli.main as cli


def _run(args, capsys):
    rc = cli.main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_pass_time_csv_has_pass_ms_and_its_breakdown(capsys):
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--batch", "1,16",
                         "--new-tokens", "1,5", "--context", "0,4096", "--format", "csv"], capsys)
    assert rc == 0, err
    df = pd.read_csv(io.StringIO(out))
    assert len(df) == 8 and "pass_ms" in df
    parts = df[[c for c in df if c.endswith("_ms") and c != "pass_ms"]].sum(axis=1)
    assert (parts - df["pass_ms"]).abs().max() < 1e-9 * df["pass_ms"].max()
    # more sequences, more tokens, more context: never cheaper
    key = df.set_index(["batch", "new_tokens", "context"])["pass_ms"]
    assert key[(16, 1, 0)] > key[(1, 1, 0)] and key[(1, 5, 0)] > key[(1, 1, 0)] and key[(1, 1, 4096)] > key[(1, 1, 0)]


def test_pass_time_iteration_with_a_draft(capsys):
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwen3-32b", "--hardware", "h100-sxm", "--draft", "head",
                         "--gamma", "3", "--context", "2048", "--format", "json"], capsys)
    assert rc == 0, err
    row = json.loads(out)["results"][0]
    assert row["iteration_ms"] == pytest.approx(row["draft_ms"] + row["verify_ms"])
    assert row["pass_ms"] < row["verify_ms"] < 4 * row["pass_ms"]  # a 4-token verification: more than one decode, less than 4
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwen3-32b", "--hardware", "h100-sxm", "--draft", "qwen3-0.6b",
                         "--gamma", "4", "--format", "csv"], capsys)
    assert rc == 0, err and "iteration_ms" in out


@pytest.mark.parametrize("args, field", [
    (["--model", "nope", "--hardware", "h100-sxm"], "--model"),
    (["--model", "qwen3-8b", "--hardware", "tpu"], "--hardware"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--tp", "0"], "--tp"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--dtype", "fp4"], "--dtype"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--batch", "0"], "--batch"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--context", "x"], "--context"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--gamma", "3"], "--draft"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--draft", "head:0", "--gamma", "3"], "--draft"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--draft", "head", "--gamma", "40"], "--gamma"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--format", "xml"], "--format"),
    (["--model", "deepseek-r1", "--hardware", "h200", "--tp", "8", "--ep", "3"], "--ep"),
    (["--model", "qwq-32b", "--hardware", "h100-sxm", "--dp", "2"], "--dp"),  # dense: the option given is named
    (["--model", "qwq-32b", "--hardware", "h100-sxm", "--draft", "llama-3.2-1b", "--gamma", "2"], "--draft: vocabulary"),
    (["--model", "qwen3-8b", "--hardware", "h100-sxm", "--draft", "mtp", "--gamma", "2"], "--draft"),
])
def test_pass_time_bad_values_one_line_exit_2(args, field, capsys):
    rc, out, err = _run(["simulate", "pass-time", *args], capsys)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error:") and field in err, err


def test_pass_time_expert_parallel_and_mtp_draft(capsys):
    """--ep moves DeepSeek-R1's experts whole onto the GPUs (the MoE layers' all-reduce becomes an all-to-all);
    --draft mtp drafts with the model's own MTP module, under the same expert parallelism."""
    base = ["simulate", "pass-time", "--model", "deepseek-r1", "--hardware", "h200", "--tp", "8", "--dtype", "fp8",
            "--batch", "1,64", "--context", "4096", "--draft", "mtp", "--gamma", "2", "--format", "csv"]
    rows = {}
    for ep in ("1", "8"):
        rc, out, err = _run([*base, "--ep", ep], capsys)
        assert rc == 0, err
        rows[ep] = pd.read_csv(io.StringIO(out)).set_index("batch")
        assert (rows[ep]["ep"] == int(ep)).all()
        r = rows[ep]
        assert (r["iteration_ms"] - r["draft_ms"] - r["verify_ms"]).abs().max() < 1e-9
        assert (r["draft_ms"] > 0).all() and (r["draft_ms"] < r["pass_ms"]).all()  # one MoE layer, not 61
    assert not rows["1"]["pass_ms"].equals(rows["8"]["pass_ms"])


def test_a_scenario_given_as_profile_is_named_for_what_it_is(capsys):
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwq-32b", "--hardware", "h100-sxm", "--profile",
                         str(Path(__file__).resolve().parents[2] / "scenarios" / "cpu-smollm2.yaml")], capsys)
    assert rc == 2 and "a scenario, not a cost profile" in err and err.count("\n") == 1, err


def test_a_config_json_is_priced_in_its_own_weight_dtype_unless_dtype_is_given(capsys):
    cfg = str(Path(__file__).resolve().parents[1] / "data" / "hf_configs" / "deepseek-v3.2" / "config.json")
    base = ["simulate", "pass-time", "--model", cfg, "--hardware", "h200", "--tp", "8", "--format", "json"]
    rc, out, err = _run(base, capsys)
    assert rc == 0, err
    own = json.loads(out)
    rows = own["results"] if isinstance(own, dict) else own
    assert {r["dtype"] for r in rows} == {"fp8"}  # its quantization_config, not a bf16 default
    rc, out, err = _run([*base, "--dtype", "bf16"], capsys)
    assert rc == 2 and "weights need" in err  # bf16 DeepSeek does not fit 8 H200s: the option is honoured
