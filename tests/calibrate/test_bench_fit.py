"""``specsim fit bench``: the cost model fitted to microbenchmark run directories (``calibrate/fit/bench_fit.py``)
and validated on held-out architectures / shapes (``validate/bench.py``, ``validate/bench_report.py``)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from calibrate.fit.bench_fit import BenchPredictor, load_bench
from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import CostParams, prior_profile
from specsim_cli.main import main
from validate.bench import rule_mask, run_fit_bench
from tests.conftest import error_lines

H100 = "NVIDIA H100 80GB HBM3"
ARCHS = ("r1-distill-qwen-1.5b", "qwen2.5-7b", "qwq-32b")
# Known parameters, away from the H100 prior (eta_mem 0.78, eta_comp 0.74, t_step 2 ms, t_layer 44 us, t_seq 1 us).
# The fitter is a posterior mode around that prior: an overhead the plan's shapes barely see (a t_seq of a few us
# beside a 1.6 ms decode pass) is shrunk towards its prior, so the overheads here are large enough to be pinned.
TRUTH = {"mem_efficiency": 0.66, "compute_efficiency": 0.55, "step_overhead_s": 1e-3, "layer_overhead_s": 25e-6,
         "call_overhead_s": 0.0, "allreduce_latency_s": 0.0, "seq_overhead_s": 40e-6}


def manifest(arch: str, layers: int | None = None, gpu: str = H100, engine: str = "torch-static", dtype: str = "bfloat16") -> dict:
    return {"schema_version": 1, "kind": "microbench", "created_at": "2026-11-25T00:00:00+00:00", "engine": engine,
            "engine_version": "torch 2.9.0", "hardware": {"cpu_model": "x", "cpu_count": 16, "gpu_name": gpu, "gpu_count": 1,
                                                          "gpu_memory_gib": 80.0, "device": "cuda" if gpu else "cpu"},
            "models": {"base": {"arch": arch, "layers": layers, "weights": "random"}}, "dtype": dtype,
            "tensor_parallel": 1, "system": "", "gamma": 0, "threshold": 0.0, "first_n": 0, "budget_tokens": 0,
            "score_mode": "", "sampling": {"temperature": 0.0}, "seed": 0, "dataset": "", "num_requests": 0,
            "command": "static-bench", "options": {}}


def record(op: str, batch: int, new: int, cached: int, gamma: int, t: float) -> dict:
    return {"schema_version": 1, "kind": "microbench", "op": op, "model": "base", "batch": batch, "new_tokens": new,
            "cached_tokens": cached, "gamma": gamma, "wall_time_s": t, "wall_times_s": [t], "repeats": 1}


def write_run(path, meta: dict, recs: list[dict]):
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps(meta))
    (path / "microbench.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def synthetic(arch: str, rng, sigma: float = 0.01) -> list[dict]:
    """The GPU campaign's static-bench plan timed by the cost model's own per-op methods at TRUTH (not through the
    adapter under test): decode = one batch pass of 1 token per sequence, prefill / score = ``prefill_time`` (one
    logit row), verify = ``verify_time`` (gamma + 1 rows), as static-bench keeps them; log-normal noise ``sigma``."""
    d = Deployment(get_model(arch), get_hardware("h100-sxm"), 1, CostParams(**TRUTH))
    noise = lambda: float(np.exp(rng.normal(0.0, sigma)))  # noqa: E731
    out = [record("decode", b, 1, c, 0, d.batch_forward_time(np.ones(b), np.full(b, c)) * noise())
           for c in (512, 2048, 8192, 16384) for b in (1, 4, 16)]
    out += [record("score" if n == 70 else "prefill", 1, n, c, 0, float(d.prefill_time(n, c)) * noise())
            for n in (512, 2048, 70) for c in (0, 4096)]
    out += [record("verify", 1, g + 1, c, g, float(d.verify_time(g, c)) * noise())
            for c in (512, 2048, 8192, 16384) for g in (1, 2, 4, 8)]
    return out


@pytest.fixture()
def h100_runs(tmp_path):
    rng = np.random.default_rng(15)
    return [str(write_run(tmp_path / f"static-{a}", manifest(a), synthetic(a, rng))) for a in ARCHS]


# ---- law: the fit recovers known parameters and predicts a held-out architecture -------------------------------
def test_fit_recovers_known_parameters_and_predicts_the_held_out_architecture(h100_runs):
    res = run_fit_bench(h100_runs, holdout_archs=["qwen2.5-7b"], rules=["context>2048,gamma>2"], command="test")
    p = res.profile
    assert p.mem_efficiency.value == pytest.approx(TRUTH["mem_efficiency"], rel=0.02)
    assert p.compute_efficiency.value == pytest.approx(TRUTH["compute_efficiency"], rel=0.02)
    for n in ("step_overhead_s", "layer_overhead_s", "seq_overhead_s"):
        assert getattr(p, n).value == pytest.approx(TRUTH[n], rel=0.2), n
    assert p.call_overhead_s.kind == "prior"  # torch-static ops are bare passes: no signal for t_call
    err = res.errors.set_index(["fold", "op"])
    for fold in ("leave out qwen2.5-7b", "hold out context>2048,gamma>2"):
        e = err.loc[(fold, "all")]
        assert e["fitted_median_ape"] < 0.02 and e["fitted_p90_ape"] < 0.05, (fold, e.to_dict())  # 1% noise
        assert e["datasheet_prior_median_ape"] > 3 * e["fitted_median_ape"]  # the prior is off TRUTH: not a tie
    # held-out points only: the 7B fold holds out every 7B record, and none of the others
    pts = res.points[res.points["fold"] == "leave out qwen2.5-7b"]
    assert set(pts["arch"]) == {"qwen2.5-7b"} and len(pts) == len(synthetic("qwen2.5-7b", np.random.default_rng(0)))


def test_adapter_is_the_cost_models_per_op_time():
    """Decode of n tokens = n passes at growing context; vLLM prefill = one call (t_call + a pass, 1 logit row);
    microbench's torch prefill = a pass with a logit row per new token; static-bench prefill / verify = the cost
    model's own prefill_time / verify_time."""
    hw = get_hardware("h100-sxm")
    m = get_model("qwen2.5-7b")
    params = prior_profile(hw).params(hw)
    recs = pd.DataFrame([
        {"op": "decode", "batch": 1, "new_tokens": 16, "cached_tokens": 300, "gamma": 0, "engine": "vllm"},
        {"op": "prefill", "batch": 1, "new_tokens": 128, "cached_tokens": 256, "gamma": 0, "engine": "vllm"},
        {"op": "prefill", "batch": 1, "new_tokens": 128, "cached_tokens": 256, "gamma": 0, "engine": "torch"},
        {"op": "decode", "batch": 4, "new_tokens": 1, "cached_tokens": 1000, "gamma": 0, "engine": "torch-static"},
        {"op": "score", "batch": 1, "new_tokens": 70, "cached_tokens": 4096, "gamma": 0, "engine": "torch-static"},
        {"op": "verify", "batch": 1, "new_tokens": 5, "cached_tokens": 8192, "gamma": 4, "engine": "torch-static"}])
    recs["model_key"] = "k"
    got = BenchPredictor(recs, {"k": (m, 1)}, hw).predict(params)
    d = Deployment(m, hw, 1, params)
    want = [d.decode_time(300 + np.arange(16)).sum(), params.call_overhead_s + d.prefill_time(128, 256),
            d.forward_time(128, 256, logit_rows=128), d.batch_forward_time(np.ones(4), np.full(4, 1000)),
            d.prefill_time(70, 4096), d.verify_time(4, 8192)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_cut_model_is_costed_with_its_own_layers(tmp_path):
    run = write_run(tmp_path / "cut", manifest("qwq-32b", layers=4, dtype="float32"), synthetic("qwen2.5-7b", np.random.default_rng(1)))
    bs = load_bench([str(run)])
    (m, tp), = bs.models.values()
    assert (m.layers, m.bytes_per_param, m.kv_bytes_per_element, tp) == (4, 4.0, 4.0, 1)
    assert m.hidden == get_model("qwq-32b").hidden and bs.hardware.name == "h100-sxm"


def test_compressed_records_read_as_plain_ones(h100_runs):
    import gzip
    from pathlib import Path

    plain = load_bench(h100_runs[:1]).records
    f = Path(h100_runs[0]) / "microbench.jsonl"
    f.with_name("microbench.jsonl.gz").write_bytes(gzip.compress(f.read_bytes()))
    f.unlink()
    pd.testing.assert_frame_equal(load_bench(h100_runs[:1]).records, plain)


def test_rule_mask_holds_out_any_matching_condition():
    recs = pd.DataFrame({"cached_tokens": [512, 4096, 512], "gamma": [0, 0, 4], "batch": [1, 1, 1], "new_tokens": [1, 1, 5],
                         "op": ["decode", "decode", "verify"]})
    assert rule_mask("context>2048,gamma>2", recs).tolist() == [False, True, True]
    assert rule_mask("op=verify", recs).tolist() == [False, False, True]


# ---- bad input: one line, exit 2, nothing already written lost --------------------------------------------------
def _run(args, capsys) -> tuple[int, str]:
    code = main(["fit", "bench", *args])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err.strip()


def test_bad_inputs_are_one_line_exit_2_and_keep_earlier_outputs(h100_runs, tmp_path, capsys):
    prof, rep = tmp_path / "prof.yaml", tmp_path / "rep"
    out = ["--out", str(prof), "--report", str(rep)]
    assert _run([*h100_runs[:2], *out], capsys)[0] == 0
    before = prof.read_text(), (rep / "report.md").read_text()
    bad = write_run(tmp_path / "bad", manifest("qwq-32b"), [record("decode", 1, 1, 64, 0, 0.01)] * 3)
    lines = (bad / "microbench.jsonl").read_text().splitlines()
    lines[1] = lines[1].replace('"wall_time_s": 0.01', '"wall_time_s": "fast"')
    (bad / "microbench.jsonl").write_text("\n".join(lines) + "\n")
    unknown = write_run(tmp_path / "unknown", manifest("nope-1b"), [record("decode", 1, 1, 64, 0, 0.01)] * 3)
    nogpu = write_run(tmp_path / "nogpu", manifest("qwq-32b", gpu="Mystery X1"), [record("decode", 1, 1, 64, 0, 0.01)] * 3)
    nap = write_run(tmp_path / "nap", manifest("qwq-32b"), [record("decode", 1, 1, 64, 0, 0.01), record("nap", 1, 1, 64, 0, 0.01)])
    out = [*out, "--force"]  # the report folder is not empty now: without --force the output contract refuses first
    cases = [
        ([str(tmp_path / "missing"), *out], "missing: not found"),
        ([str(bad), *out], f"{bad / 'microbench.jsonl'}:2: wall_time_s: expected float"),
        ([str(unknown), *out], "models.base.arch: unknown model 'nope-1b'"),
        ([str(nap), *out], f"{nap / 'microbench.jsonl'}:2: op: expected one of decode, draft, prefill, score, verify"),
        ([str(nogpu), *out], "hardware.gpu_name: no catalog entry for GPU 'Mystery X1'"),
        ([*h100_runs[:2], "--holdout-arch", "qwen3-8b", *out], "--holdout-arch: 'qwen3-8b' is not among"),
        ([h100_runs[0], "--holdout-arch", "r1-distill-qwen-1.5b", *out], "nothing left to fit"),
        ([*h100_runs[:2], "--holdout-rule", "context>99999", *out], "holds out no record"),
        ([*h100_runs[:2], "--holdout-rule", "ctx~5", *out], "--holdout-rule: expected conditions like"),
        ([*h100_runs[:2], "--hardware", "tpu-v9", *out], "--hardware: unknown"),
    ]
    for args, msg in cases:
        code, err = _run(args, capsys)
        assert code == 2 and len(error_lines(err)) == 1 and err.startswith("error: ") and msg in err, (args, err)
    assert (prof.read_text(), (rep / "report.md").read_text()) == before


# ---- the real path: static-bench on CPU (tiny), then the command end to end ----------------------------------
@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from calibrate.measure.static_bench import StaticPlan, run_static_bench

    root = tmp_path_factory.mktemp("static")
    plan = StaticPlan(contexts=[32, 96], batches=[1, 2], new_tokens=[16], cached_tokens=[0, 32], gammas=[1, 3],
                      decode_tokens=3, repeats=1)  # scripts/gpu_campaign.sh static --tiny
    for arch in ("smollm2-135m", "qwen3-0.6b"):
        run_static_bench(arch, plan, root / f"static-{arch}", layers=2, dtype="float32", device="cpu", log=lambda *_: None)
    return [str(root / "static-smollm2-135m"), str(root / "static-qwen3-0.6b")]


@pytest.mark.real_engine
def test_cpu_static_bench_records_fit_and_report_end_to_end(cpu_runs, tmp_path, capsys):
    from simulator.cost.cost_profile import load_profile

    prof, rep = tmp_path / "cpu-bench.yaml", tmp_path / "report"
    code = main(["fit", "bench", *cpu_runs, "--out", str(prof), "--report", str(rep),
                 "--holdout-rule", "context>32,gamma>1", "--date", "2026-11-25"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert "held out, leave out qwen3-0.6b" in cap.out and "held out, hold out context>32,gamma>1" in cap.out
    p = load_profile(prof)
    assert p.hardware == "cpu" and p.provenance.kind == "fitted" and p.engine.startswith("torch-static (torch ")
    assert p.fit["archs"] == ["qwen3-0.6b", "smollm2-135m"] and p.fit["date"] == "2026-11-25"
    assert {r["layers"] for r in p.fit["bench_runs"]} == {2} and p.fit["calls"] == 24
    assert p.fit["command"] == (f"specsim fit bench {cpu_runs[0]} {cpu_runs[1]} --out {prof} --report {rep} "
                                "--holdout-rule 'context>32,gamma>1' --date 2026-11-25")  # reruns as written
    # every held-out point is in the CSV: each architecture's 12 records once, and the rule's matches
    pts = pd.read_csv(rep / "heldout.csv")
    bs = load_bench(cpu_runs)
    assert len(bs.records) == 24
    assert pts["fold"].value_counts().to_dict() == {"leave out smollm2-135m": 12, "leave out qwen3-0.6b": 12,
                                                    "hold out context>32,gamma>1": int(rule_mask("context>32,gamma>1", bs.records).sum())}
    assert (pts["measured_s"] > 0).all() and (pts[["fitted_s", "transferred_prior_s", "datasheet_prior_s"]] > 0).all().all()
    assert (rep / "heldout.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (rep / "report.md").read_text()
    assert "specsim fit bench" in text and "### leave out qwen3-0.6b" in text
    s = json.loads((rep / "summary.json").read_text())
    assert s["hardware"] == "cpu" and s["profile"] == str(prof) and len(s["runs"]) == 2 and len(s["folds"]) == 3
    assert {r["op"] for r in s["held_out"]} >= {"decode", "prefill", "score", "verify", "all"}
