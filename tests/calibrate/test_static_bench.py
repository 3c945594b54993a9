"""Static-KV-cache torch microbenchmark (issue 7's GPU path), exercised on CPU with tiny settings."""

import json

import pytest

from specsim_cli.main import main

pytest.importorskip("torch")
pytest.importorskip("transformers")


@pytest.mark.real_engine
def test_static_bench_writes_valid_records_and_bandwidth(tmp_path, capsys):
    out = tmp_path / "sb"
    code = main(["calibrate", "static-bench", "--arch", "smollm2-135m", "--layers", "2", "--out", str(out),
                 "--contexts", "32,96", "--batches", "1,2", "--new-tokens", "16", "--cached-tokens", "0,32",
                 "--gammas", "1,3", "--decode-tokens", "3", "--repeats", "1", "--dtype", "float32"])
    assert code == 0, capsys.readouterr().err
    assert main(["calibrate", "check-trace", str(out)]) == 0
    recs = [json.loads(l) for l in (out / "microbench.jsonl").read_text().splitlines()]
    ops = {r["op"] for r in recs}
    assert ops == {"decode", "prefill", "score", "verify"}
    assert sum(r["op"] == "decode" for r in recs) == 4 and sum(r["op"] == "verify" for r in recs) == 4
    bw = json.loads((out / "bandwidth.json").read_text())
    assert bw["catalog_hardware"] == "cpu" and bw["compile"] == "none" and len(bw["decode"]) == 4
    for d in bw["decode"]:
        assert d["step_s"] > 0 and d["bytes"] > 0
        assert d["fraction_of_datasheet"] == pytest.approx(d["bytes"] / d["step_s"] / bw["datasheet_bytes_per_s"])


def test_static_bench_bad_options_exit_2(tmp_path, capsys):
    code = main(["calibrate", "static-bench", "--arch", "smollm2-135m", "--out", str(tmp_path / "x"), "--contexts", "0,5"])
    err = capsys.readouterr().err
    assert code == 2 and "--contexts" in err and len(err.strip().splitlines()) == 1
    code = main(["calibrate", "static-bench", "--arch", "nope-1b", "--out", str(tmp_path / "y"), "--layers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "unknown architecture" in err
