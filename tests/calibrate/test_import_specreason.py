"""Importer for SpecReason per-step JSONL: real-file round trip, validation errors, consistency checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate.fit.import_specreason import DEFAULT_DATA_DIR, REQUEST_COLUMNS, STEP_COLUMNS, import_specreason
from simulator.errors import InputError

DATA_FILE = DEFAULT_DATA_DIR / "problem60-runs0-7.jsonl"
needs_data = pytest.mark.skipif(not DATA_FILE.is_file(), reason=f"shared trace data absent ({DATA_FILE})")


def _record(run="r/0", step=0, **over):
    rec = {
        "run": run, "problem_id": 60, "repeat_id": 0, "step_id": step, "small_model_step": "Let x be 2.",
        "num_output_tokens_small": 5, "small_model_time": 0.2, "score": 8, "justification": "8", "eval_time": 0.15,
        "base_model_step": None, "num_output_tokens_base": None, "base_model_time": None,
        "final_num_output_tokens": 5, "step_time": 0.35, "stop_reason": None, "candidate_answer": None,
        "is_correct_mathverify": None,
    }
    rec.update(over)
    return rec


def _write(tmp_path, records):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return p


@needs_data
def test_real_file_round_trip():
    trace = import_specreason(DEFAULT_DATA_DIR)
    n_lines = sum(1 for line in DATA_FILE.open(encoding="utf-8") if line.strip())
    assert len(trace.steps) == n_lines
    assert list(trace.steps.columns) == STEP_COLUMNS
    assert list(trace.requests.columns) == REQUEST_COLUMNS
    assert len(trace.requests) == 8
    assert trace.requests["steps"].sum() == n_lines
    # per-request totals are sums of the step table
    by_run = trace.steps.groupby("run_id")
    np.testing.assert_allclose(trace.requests.set_index("run_id")["total_s"], by_run["step_s"].sum())
    # context before a step = kept tokens of the earlier steps
    first = trace.steps[trace.steps["step_index"] == 0]
    assert (first["context_tokens_before"] == 0).all()
    assert trace.issues["kept_tokens != small/base tokens"] == 0
    assert trace.issues["step_s < sum of call times"] == 0


def test_malformed_line_names_file_line_and_field(tmp_path):
    bad = _record(step=1, num_output_tokens_small="five")
    p = _write(tmp_path, [_record(), bad])
    with pytest.raises(InputError) as e:
        import_specreason(p)
    assert e.value.file == str(p)
    assert e.value.field == "line 2: num_output_tokens_small"


def test_bad_json_and_missing_field(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text(json.dumps(_record()) + "\n{not json\n", encoding="utf-8")
    with pytest.raises(InputError, match="line 2"):
        import_specreason(p)
    rec = _record()
    del rec["eval_time"]
    with pytest.raises(InputError) as e:
        import_specreason(_write(tmp_path, [rec]))
    assert e.value.field == "line 1: eval_time"


def test_unknown_field_and_gap_in_steps_are_errors(tmp_path):
    with pytest.raises(InputError, match="unknown field"):
        import_specreason(_write(tmp_path, [_record(extra=1)]))
    with pytest.raises(InputError, match="step ids"):
        import_specreason(_write(tmp_path, [_record(), _record(step=2, stop_reason="finished")]))


def test_inconsistencies_are_counted_not_fixed(tmp_path):
    recs = [
        _record(step=0, step_time=0.30),  # less than the calls' sum (0.35)
        _record(step=1, score=3, justification="3", base_model_step="Hmm.", num_output_tokens_base=4,
                base_model_time=0.3, final_num_output_tokens=9, step_time=0.65, stop_reason="budget"),
    ]
    trace = import_specreason(_write(tmp_path, recs))
    assert trace.issues["step_s < sum of call times"] == 1
    assert trace.issues["kept_tokens != small/base tokens"] == 1
    assert trace.steps["kept_tokens"].tolist() == [5, 9]
    assert trace.requests.loc[0, "censored"]
    assert trace.requests.loc[0, "stop_cause"] == "budget"
