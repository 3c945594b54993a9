"""The round-two kernel campaign's plan, predictions and bench (calibrate/gpu_priors/kernel_plan.py,
calibrate/measure/gpu_kernel_bench.py): the plan's laws, and a CPU dry run of the bench end to end."""

import json

import numpy as np
import pytest

from calibrate.gpu_priors.kernel_plan import compare, fp8_ratios, make_plan, predict, summary
from simulator.catalog import get_hardware


def test_plan_covers_every_op_once_per_point():
    plan = make_plan()
    ids = [p["id"] for p in plan["points"]]
    assert ids == list(range(len(ids)))
    assert {p["op"] for p in plan["points"]} == {"gemm", "gemm_fp8", "grouped", "memory"}
    assert not plan["allow_cpu"] and make_plan(tiny=True)["allow_cpu"]
    assert {p.get("scales") for p in plan["points"] if p["op"] == "gemm_fp8"} == {"tensor", "rowwise"}


@pytest.mark.parametrize("gpu", ["h100-sxm", "h200"])
def test_predictions_are_physical(gpu):
    """Every timed point gets a finite positive time; a GEMM's time never falls as its tokens grow, and never beats
    the datasheet (bytes at full bandwidth, FLOPs at the kind's peak); memory: the driver's figure."""
    d = predict(make_plan(), gpu)
    timed = d[d.op != "memory"]
    assert np.isfinite(timed.predicted_s).all() and (timed.predicted_s > 0).all()
    hw = get_hardware(gpu)
    for _, g in timed[timed.op.str.startswith("gemm")].groupby(["op", "model", "linear", "scales"], dropna=False):
        t = g.sort_values("m").predicted_s.to_numpy()
        assert (np.diff(t) >= -1e-15).all()
    g = timed[timed.op == "gemm"]
    floor = np.maximum(2.0 * g.n * g.k / hw.memory_bandwidth_bytes_per_s, 2.0 * g.m * g.n * g.k / hw.dense_bf16_flops_per_s)
    assert (g.predicted_s >= floor).all()
    for _, g in timed[timed.op == "grouped"].groupby("model"):
        assert (np.diff(g.sort_values("tokens").predicted_s.to_numpy()) >= -1e-15).all()
    assert d[d.op == "memory"].predicted_total_bytes.iloc[0] == hw.reported_memory_bytes


def test_cpu_dry_run_end_to_end(tmp_path):
    """The bench on the tiny plan (CPU, one call per point) writes a record per point, which compare() pairs with
    its prediction."""
    pytest.importorskip("torch")
    from calibrate.measure.gpu_kernel_bench import main

    plan = make_plan(tiny=True)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    assert main([str(tmp_path / "plan.json"), str(tmp_path / "run")]) == 0
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert len(recs) + len(run["skipped"]) == len(plan["points"]) and "finished_utc" in run
    assert all(r["op"] != "grouped" or r["impl"] in ("loop", "grouped_mm") for r in recs)
    t = compare(predict(plan, "h200"), recs)
    assert len(t) == len(recs) and t.measured_s.gt(0).all()
    s = summary(t)
    assert s.points.sum() == len(t)


def test_a_plan_without_cpu_refuses_to_run_on_cpu(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    from calibrate.measure.gpu_kernel_bench import main

    (tmp_path / "plan.json").write_text(json.dumps(make_plan()))
    assert main([str(tmp_path / "plan.json"), str(tmp_path / "run")]) == 2


def test_a_broken_records_line_is_a_located_input_error(tmp_path):
    from calibrate.gpu_priors.kernel_plan import read_records
    from simulator.errors import InputError

    run = tmp_path / "run-1"
    run.mkdir()
    (run / "records.jsonl").write_text('{"id": 0, "op": "gemm", "time_s": 1e-5}\n{"id": 1, "op"\n')
    with pytest.raises(InputError, match="records.jsonl:2"):
        read_records(tmp_path)
    (run / "records.jsonl").write_text('{"id": 0, "op": "gemm", "time_s": 1e-5}\n')
    assert read_records(tmp_path) == [{"id": 0, "op": "gemm", "time_s": 1e-5}]


def test_fp8_ratios_pair_each_fp8_point_with_the_bf16_one_of_its_shape():
    """FP8 time over bf16 time at the same (model, linear, m, n, k): the median over shapes per scaling and m; a shape
    without its bf16 point is left out, not paired with another."""
    import pandas as pd

    rows = []
    for lin, bf, f8 in (("qkv", 2.0, 1.0), ("o", 4.0, 3.0)):
        rows.append(dict(op="gemm", model="m", linear=lin, m=8, n=1, k=1, scales=np.nan, measured_s=bf, predicted_s=bf))
        rows.append(dict(op="gemm_fp8", model="m", linear=lin, m=8, n=1, k=1, scales="tensor", measured_s=f8,
                         predicted_s=bf))
    rows.append(dict(op="gemm_fp8", model="m", linear="down", m=8, n=1, k=1, scales="tensor", measured_s=9.0,
                     predicted_s=1.0))
    r = fp8_ratios(pd.DataFrame(rows))
    assert len(r) == 1 and r.loc[0, "shapes"] == 2
    assert r.loc[0, "measured_ratio"] == pytest.approx((0.5 + 0.75) / 2) and r.loc[0, "predicted_ratio"] == 1.0


def test_moe_fp8_grid_pairs_each_fp8_layer_with_its_bf16_twin_and_runs_on_cpu(tmp_path):
    """The moe-fp8 grid: every grouped_fp8 point has a bf16 twin of the same shape in the same plan, FP8 priced
    below bf16 where the weights dominate (one byte per weight); the CPU dry run measures or skips every point with
    a reason, and an FP8 record names how it ran."""
    pytest.importorskip("torch")
    from calibrate.measure.gpu_kernel_bench import main

    plan = make_plan(grid="moe-fp8")
    key = ("model", "tokens", "hidden", "inter", "experts", "topk")
    fp8 = {tuple(p[k] for k in key) for p in plan["points"] if p["op"] == "grouped_fp8"}
    assert fp8 and fp8 == {tuple(p[k] for k in key) for p in plan["points"] if p["op"] == "grouped"}
    pred = predict(plan, "h200")
    pair = pred.pivot_table(index=list(key), columns="op", values="predicted_s")
    assert (pair["grouped_fp8"] < pair["grouped"]).all()
    with pytest.raises(ValueError, match="grid"):
        make_plan(grid="nope")
    tiny = make_plan(tiny=True, grid="moe-fp8")
    (tmp_path / "plan.json").write_text(json.dumps(tiny))
    assert main([str(tmp_path / "plan.json"), str(tmp_path / "run")]) == 0
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    run = json.loads((tmp_path / "run" / "run.json").read_text())
    assert len(recs) + len(run["skipped"]) == len(tiny["points"])
    assert all(s.get("why") for s in run["skipped"])
    assert all(r["impl"].startswith(("loop", "scaled_grouped_mm")) for r in recs if r["op"] == "grouped_fp8")


def test_fp8_ratios_pair_grouped_fp8_layers_with_their_bf16_twins():
    import pandas as pd

    shape = dict(model="q", hidden=8, inter=4, experts=4, topk=2)
    rows = [dict(op="grouped", tokens=4, measured_s=2.0, predicted_s=2.0, **shape),
            dict(op="grouped_fp8", tokens=4, measured_s=1.2, predicted_s=1.0, **shape),
            dict(op="grouped_fp8", tokens=16, measured_s=1.0, predicted_s=1.0, **shape)]  # no bf16 twin: left out
    r = fp8_ratios(pd.DataFrame(rows))
    assert list(r["scales"]) == ["moe q"] and list(r["m"]) == [4]
    assert r.loc[0, "measured_ratio"] == pytest.approx(0.6) and r.loc[0, "predicted_ratio"] == pytest.approx(0.5)
