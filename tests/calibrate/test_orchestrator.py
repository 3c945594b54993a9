"""Fast unit tests of the SpecReason / SpecDecode orchestrator with the fake engine test double."""

from __future__ import annotations

import json

import pytest

from calibrate.measure.datasets import Problem
from calibrate.measure.orchestrator import RunConfig, parse_score, run_request
from calibrate.measure.run_directory import RunDirectory
from calibrate.contracts.trace_schema import REQUEST_FIELDS, STEP_FIELDS, check_record
from simulator.errors import InputError
from tests.calibrate.fake_engine import FakeEngine

PROBLEM = Problem("p0", "What is 6*7?", "42")


def base_writer(k):
    return "Answer: 42\n\n" if k >= 4 else f"base step {k}.\n\n"


def small_writer(k):
    return f"small step {k}.\n\n"


def run(system, threshold=7.0, first_n=0, budget=10_000, judge=None, gamma=0):
    base = FakeEngine(base_writer, judge=judge, gamma=gamma)
    small = FakeEngine(small_writer)
    cfg = RunConfig(system=system, threshold=threshold, first_n=first_n, budget_tokens=budget)
    steps, req = run_request(cfg, PROBLEM, 0, None if system == "vanilla-small" else base,
                             small if cfg.uses_small else None, seed=1)
    for s in steps:
        check_record(s, STEP_FIELDS, "steps")
    check_record(req, REQUEST_FIELDS, "requests")
    return steps, req, base, small


def test_vanilla_base_runs_to_answer():
    steps, req, base, _ = run("vanilla-base")
    assert [s["proposer"] for s in steps] == ["base"] * 5
    assert req["stop_reason"] == "answer" and req["answer"] == "42" and req["correct"] is True
    assert req["thinking_tokens"] == sum(s["kept_tokens"] for s in steps)
    assert all(k == "generate" for k, _ in base.calls)


def test_threshold_zero_keeps_every_small_step():
    steps, req, _, _ = run("specreason", threshold=0, judge=lambda s: 0, budget=60)
    assert all(s["proposer"] == "small" and s["accepted"] for s in steps)
    assert req["num_base_steps"] == 0 and req["base_tokens"] == 0 and req["stop_reason"] == "budget"


def test_threshold_ten_never_accepts_and_equals_vanilla_base():
    steps, req, _, _ = run("specreason", threshold=10, judge=lambda s: 9)
    vsteps, vreq, _, _ = run("vanilla-base")
    assert all(s["proposer"] == "base" and not s["accepted"] and s["score"] == 9.0 for s in steps)
    assert [s["text"] for s in steps] == [s["text"] for s in vsteps]
    assert req["num_small_steps"] == 0 and req["small_tokens"] > 0


def test_score_threshold_decides_per_step():
    judge = lambda step: 8 if step.endswith(("0.", "2.")) else 3  # noqa: E731
    steps, req, _, _ = run("specreason", threshold=7, judge=judge)
    assert [s["proposer"] for s in steps[:4]] == ["small", "base", "small", "base"]
    assert steps[0]["text"] == "small step 0.\n\n" and steps[1]["text"] == "base step 1.\n\n"
    assert req["num_small_steps"] == 2


def test_first_n_steps_come_from_base_without_scoring():
    steps, _, _, _ = run("specreason", threshold=0, first_n=2, budget=80)
    assert [s["proposer"] for s in steps[:3]] == ["base", "base", "small"]
    assert steps[0]["score"] is None and steps[0]["small_tokens"] == 0 and steps[0]["score_time_s"] == 0.0


def test_budget_counts_only_kept_steps_and_is_checked_between_steps():
    steps, req, _, _ = run("specreason", threshold=10, budget=20)
    # two whole 14-token base steps: the second overshoots the budget, as in the reference code
    assert [s["kept_tokens"] for s in steps] == [14, 14]
    assert req["thinking_tokens"] == 28 and req["stop_reason"] == "budget"
    assert req["small_tokens"] > 0  # rejected proposals do not count toward the budget


def test_specdecode_records_per_position_counts():
    steps, req, _, _ = run("specdecode", gamma=3)
    assert all(s["spec_gamma"] == 3 and len(s["spec_accepted_per_pos"]) == 3 for s in steps)
    assert req["spec_accepted_tokens"] == sum(sum(s["spec_accepted_per_pos"]) for s in steps)


def test_scoring_prompt_extends_the_cot_prefix():
    _, _, base, _ = run("specreason", threshold=10)
    gens = [n for k, n in base.calls if k == "generate"]
    scores = [n for k, n in base.calls if k == "score"]
    assert all(s > g for s, g in zip(scores, gens))  # CoT + proposed step + judge template


@pytest.mark.parametrize("top,mode,expected", [
    ({"7": -0.1, "3": -2.5, "a": -0.01}, "greedy", 7.0),
    ({" 9": -1.0, "2": -1.0}, "mean", 5.5),
    ({"a": -0.1}, "greedy", None),
])
def test_parse_score(top, mode, expected):
    got = parse_score(top, mode)[0]
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_bad_system_and_threshold_are_input_errors():
    with pytest.raises(InputError):
        RunConfig(system="nope")
    with pytest.raises(InputError):
        RunConfig(system="specreason", threshold=11)


def _manifest():
    from calibrate.contracts.trace_schema import SCHEMA_VERSION

    return {"schema_version": SCHEMA_VERSION, "kind": "run", "created_at": "2026-01-01T00:00:00+00:00",
            "engine": "fake", "engine_version": "0", "hardware": {}, "models": {}, "dtype": "float32",
            "tensor_parallel": 1, "system": "specreason", "gamma": 0, "threshold": 7.0, "first_n": 0,
            "budget_tokens": 100, "score_mode": "greedy", "sampling": {}, "seed": 0, "dataset": "x",
            "num_requests": 3, "command": "test", "options": {}}


def test_run_directory_resume_drops_partial_request_and_torn_line(tmp_path):
    rd = RunDirectory.open(tmp_path, _manifest())
    s0, r0, _, _ = run("vanilla-base")
    rd.write_request(s0, r0)
    s1, _, _, _ = run("vanilla-base")
    for s in s1[:2]:  # request 1 crashed after two steps ...
        rd.write("step", {**s, "request_id": 1})
    rd.close()
    with open(tmp_path / "steps.jsonl", "a") as fh:  # ... in the middle of a line
        fh.write('{"schema_version": 1, "kind": "st')
    rd2 = RunDirectory.open(tmp_path, _manifest())
    assert rd2.done_request_ids == {0}
    lines = (tmp_path / "steps.jsonl").read_text().splitlines()
    assert len(lines) == len(s0) and all(json.loads(x)["request_id"] == 0 for x in lines)
    rd2.close()


def test_run_directory_refuses_incompatible_resume(tmp_path):
    RunDirectory.open(tmp_path, _manifest()).close()
    with pytest.raises(InputError, match="threshold"):
        RunDirectory.open(tmp_path, {**_manifest(), "threshold": 3.0})


def test_trace_format_doc_has_every_field_table():
    from pathlib import Path

    from calibrate.contracts.trace_schema import MICROBENCH_FIELDS, RUN_FIELDS, markdown_table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "trace-format.md").read_text()
    for fields in (STEP_FIELDS, REQUEST_FIELDS, RUN_FIELDS, MICROBENCH_FIELDS):
        assert markdown_table(fields) in doc
