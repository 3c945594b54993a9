"""The trace contract: every field declared once; missing, extra and mistyped fields are errors."""

from __future__ import annotations

import json

import pytest

from calibrate.contracts.trace_schema import REQUEST_FIELDS, STEP_FIELDS, check_jsonl, check_record
from simulator.errors import InputError
from tests.calibrate.test_orchestrator import run


def _step():
    steps, _, _, _ = run("specreason", threshold=7)
    return steps[0]


def test_fields_have_type_unit_meaning():
    for fields in (STEP_FIELDS, REQUEST_FIELDS):
        for f in fields.values():
            assert f.meaning and f.type
            if f.name.endswith("_s"):
                assert f.unit == "s"
            if f.name.endswith("_tokens"):
                assert f.unit == "tokens"


@pytest.mark.parametrize("mutate,field", [
    (lambda r: r.pop("accepted"), "accepted"),
    (lambda r: r.update(extra=1), "extra"),
    (lambda r: r.update(small_tokens="3"), "small_tokens"),
    (lambda r: r.update(small_tokens=True), "small_tokens"),
    (lambda r: r.update(spec_accepted_per_pos=[1.5]), "spec_accepted_per_pos"),
    (lambda r: r.update(proposer=None), "proposer"),
])
def test_bad_records_are_rejected_naming_the_field(mutate, field):
    rec = _step()
    mutate(rec)
    with pytest.raises(InputError) as e:
        check_record(rec, STEP_FIELDS, "steps.jsonl", 7)
    assert e.value.field == field and e.value.file == "steps.jsonl:7"


def test_check_jsonl_reports_file_and_line(tmp_path):
    p = tmp_path / "steps.jsonl"
    good = json.dumps(_step())
    p.write_text(good + "\n" + good.replace('"kind": "step"', '"kind": "request"') + "\n")
    with pytest.raises(InputError, match=r"steps.jsonl:2: kind"):
        check_jsonl(p, "step")
