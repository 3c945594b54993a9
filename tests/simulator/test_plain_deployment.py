"""A plain deployment: a scenario with the base model alone (no ``small``), at TP 8 and with pipeline stages; every
command runs on it and refuses, in one line, the systems that need a small model."""

import json
from pathlib import Path

import pytest
import yaml

from simulator.errors import InputError
from simulator.inputs.scenario import SCENARIOS_DIR, load_scenario
from specsim_cli.main import main

PLAIN = "h100x8-qwen3-235b-plain"


def write(tmp_path: Path, **changes) -> str:
    """The shipped plain scenario with ``changes`` (None deletes a key), written beside a copy of nothing else."""
    d = yaml.safe_load((SCENARIOS_DIR / f"{PLAIN}.yaml").read_text())
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    p = tmp_path / "plain.yaml"
    p.write_text(yaml.safe_dump(d))
    return str(p)


def run(capsys, *args) -> tuple[int, str, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_base_only_scenario_at_tp8_runs_whatif_and_capacity(capsys):
    rs = load_scenario(PLAIN)
    assert rs.small_model is None and rs.scenario.small is None and rs.scenario.base.tp == 8
    assert rs.scenario.systems == ["vanilla-base"]  # the default without a small model
    code, out, err = run(capsys, "whatif", PLAIN, "--format", "json")
    assert code == 0, err
    res = json.loads(out)["results"]
    assert [r["system"] for r in res] == ["vanilla-base"] and res[0]["tp"] == 8 and res[0]["latency_s"] > 0
    short = "vllm bench serve --dataset-name random --random-input-len 256 --random-output-len 32 --num-prompts 20"
    code, out, err = run(capsys, "capacity", PLAIN, "--slo", "p99_ttft<=2s", "--requests", "20", "--workers", "1",
                         "--max-replications", "3", "--bench-serve", short, "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["results"]
    assert len(rows) == 1 and rows[0]["system"] == "vanilla-base" and rows[0]["max_qps"] > 0
    assert rows[0]["gpus_per_replica"] == 8 and rows[0]["small_utilization"] == 0


@pytest.mark.parametrize("system", ["vanilla-small", "specreason", "specreason-decode", "specdecode"])
def test_systems_needing_a_small_model_are_refused(tmp_path, capsys, system):
    path = write(tmp_path, systems=["vanilla-base", system])
    with pytest.raises(InputError) as e:
        load_scenario(path)
    assert (e.value.file, e.value.field) == (path, "systems[1]")
    assert "needs a small model" in e.value.message and "vanilla-base" in e.value.message
    for cmd in (["whatif", PLAIN], ["capacity", PLAIN, "--slo", "p99_ttft<=2s"], ["report", PLAIN, "--out",
                                                                                   str(tmp_path / "r")]):
        code, out, err = run(capsys, *cmd, "--system", system)
        assert code == 2 and "--system" in err and "needs a small model" in err and "Traceback" not in err
    assert not (tmp_path / "r").exists()


def test_a_draft_without_a_small_model_may_speculate(tmp_path, capsys):
    """specdecode with prompt lookup or a head drafts from the base model: a plain deployment can run it."""
    acc = {"a": [0.6, 0.4, 0.25], "kind": "prior", "source": "test"}
    for kind in ("ngram", "head"):
        path = write(tmp_path, systems=["vanilla-base", "specdecode"], draft={"kind": kind, "acceptance": acc},
                     grid={"gamma": [3]})
        code, out, err = run(capsys, "whatif", path, "--format", "json")
        assert code == 0, err
        res = {r["system"]: r for r in json.loads(out)["results"]}
        assert res["specdecode"]["speedup"] > 1.0


def test_show_and_serve_workload_on_a_plain_deployment(capsys):
    code, out, err = run(capsys, "show", PLAIN, "--section", "memory_plan")
    assert code == 0, err
    assert "h100-sxm tp=8" in out and out.count("engine:") == 1
    code, out, err = run(capsys, "serve-workload", PLAIN, "--requests", "20", "--format", "json")
    assert code == 0, err
    got = json.loads(out)  # the limits the engine ran: vLLM's H100 defaults, the scenario setting none
    assert (got["max_num_batched_tokens"], got["max_num_seqs"]) == (8192, 1024)
    assert got["parallelism"] == "TP=8 (8 GPUs)"


def test_serve_workload_names_the_layout_a_vllm_user_gave(capsys):
    """DeepSeek's deployment (attention data-parallel over 8 ranks, experts over all 8 GPUs) reads as its flags."""
    code, out, err = run(capsys, "serve-workload", "h200x8-deepseek-r1-dp8-plain", "--requests", "8", "--format",
                         "json")
    assert code == 0, err
    assert json.loads(out)["parallelism"] == "TP=1 x DP=8, EP=8 (8 GPUs)"


def test_pipeline_stages_in_a_scenario(tmp_path, capsys):
    """TP 4 x PP 2 on the 8 GPUs: the weights per GPU are those of TP 8, the replica counts 8 GPUs, and the batch-1
    latency is TP 4's (each token crosses both stages) plus one hop, above TP 8's."""
    path = write(tmp_path, base={"model": "qwen3-235b-a22b", "tp": 4, "pp": 2})
    rs = load_scenario(path)
    (plan, *_), = rs.engine_plans("h100-sxm", 4)
    (plan8, *_), = load_scenario(PLAIN).engine_plans("h100-sxm", 8)
    assert plan.weights_bytes == pytest.approx(plan8.weights_bytes)
    code, out, err = run(capsys, "whatif", path, "--format", "json")
    assert code == 0, err
    pp2 = json.loads(out)["results"][0]["latency_s"]
    code, out, err = run(capsys, "whatif", PLAIN, "--format", "json")
    assert pp2 > json.loads(out)["results"][0]["latency_s"]
    code, out, err = run(capsys, "show", path, "--section", "memory_plan")
    assert code == 0 and "h100-sxm tp=4 pp=2" in out


@pytest.mark.parametrize("changes, field, words", [
    ({"base": {"model": "qwen3-235b-a22b", "tp": 8, "pp": 2}}, "base.tp", "tp=8 x pp=2 exceeds hardware.count=8"),
    ({"base": {"model": "qwen3-0.6b", "tp": 1, "pp": 32}, "hardware": {"gpu": "h100-sxm", "count": 64}},
     "base.pp", "exceeds base model qwen3-0.6b's 28 layers"),
    ({"base": {"model": "qwen3-235b-a22b", "tp": 4, "pp": 2}, "small": {"model": "qwen3-1.7b", "tp": 4},
      "systems": ["vanilla-base", "specreason"]}, "systems[1]", "pipeline parallelism"),
    ({"small": {"model": "qwen3-1.7b", "tp": 8, "pp": 2}}, "small.pp", "base.pp"),
])
def test_pipeline_placement_errors(tmp_path, changes, field, words):
    path = write(tmp_path, **changes)
    with pytest.raises(InputError) as e:
        load_scenario(path)
    assert e.value.field == field and words in e.value.message


def test_pass_time_with_stages(capsys):
    code, out, err = run(capsys, "pass-time", "--model", "qwen3-32b", "--hardware", "h100-sxm", "--tp", "2", "--pp", "2",
                         "--batch", "1,4", "--format", "json")
    assert code == 0, err
    rows = json.loads(out)["results"] if out.lstrip().startswith("{") else json.loads(out)
    rows = rows if isinstance(rows, list) else rows["rows"]
    assert all(r["pp"] == 2 and r["sendrecv_ms"] > 0 for r in rows)
    for bad in (["--pp", "65"], ["--pp", "2", "--draft", "head", "--gamma", "3"]):
        code, out, err = run(capsys, "pass-time", "--model", "qwen3-32b", "--hardware", "h100-sxm", *bad)
        assert code == 2 and "Traceback" not in err


def test_a_replica_counts_tp_times_pp_gpus():
    from simulator.studies.capacity.table import capacity_table, parallelism

    rows = [{"label": "vanilla-base", "system": "vanilla-base", "gamma": None, "threshold": None, "first_n": 0,
             "hardware": "h100-sxm", "tp": 4, "pp": 2, "max_qps": 8.0,
             "capacities": (7.9, 8.0, 8.1)}]
    t = capacity_table(rows, gpu_hour_cost=2.0, target_qps=20.0)
    r = t.iloc[0]
    assert r.gpus_per_replica == 8 and r.qps_per_gpu == pytest.approx(1.0)
    assert r.replicas == 3 and r.gpus == 24
    assert r.cost_per_1000_requests == pytest.approx(1000 * 8 * 2.0 / (3600 * 8.0))
    assert parallelism(r) == "TP=4 x PP=2" and parallelism(r.drop("pp")) == "TP=4"
