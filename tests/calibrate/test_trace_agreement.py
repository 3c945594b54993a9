"""``specsim validate trace`` and ``specsim validate`` judge a run directory alike: "ok" from check-trace means
validate can read the folder, and a folder one refuses the other refuses with the same one line (exit 2) naming the
file (``file:line`` for a record) and the field.

The family: mutated copies of a committed run (``tests/data/serve_specreason/http-t6``: 3 SpecReason requests, 7
steps). Each mutation is a case the trace contract (``calibrate/contracts/trace_schema.py``, ``calibrate/contracts/trace_rules.py``)
refuses; add one to MUTATIONS to grow the family."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.contracts.trace_schema import (MAX_DURATION_S, MAX_TOKENS, RUN_FIELDS, STEP_FIELDS, SERVE_REQUEST_FIELDS,
                                    check_record, value_range)
from simulator.errors import InputError
from specsim_cli import main as cli
from tests.conftest import examples

ROOT = Path(__file__).resolve().parents[2]
RUN = ROOT / "tests/data/serve_specreason/http-t6"


def _records(d: Path, name: str) -> list[dict]:
    return [json.loads(x) for x in (d / name).read_text().splitlines() if x.strip()]


def _write(d: Path, name: str, recs: list[dict]) -> None:
    (d / name).write_text("".join(json.dumps(r) + "\n" for r in recs))


def _edit(name: str, line: int, **upd):
    """Set fields of the record on ``line`` (1-based) of ``name``."""
    def f(d: Path) -> None:
        recs = _records(d, name)
        recs[line - 1].update(upd)
        _write(d, name, recs)
    return f


def _append_copy(name: str, line: int):
    def f(d: Path) -> None:
        recs = _records(d, name)
        _write(d, name, [*recs, recs[line - 1]])
    return f


def _drop(name: str, line: int):
    def f(d: Path) -> None:
        recs = _records(d, name)
        _write(d, name, recs[:line - 1] + recs[line:])
    return f


def _manifest(**upd):
    def f(d: Path) -> None:
        m = json.loads((d / "run.json").read_text())
        m.update(upd)
        (d / "run.json").write_text(json.dumps(m))
    return f


def _swap_started_at(d: Path) -> None:
    """Request 0's second step starting 5 s before its first."""
    recs = _records(d, "steps.jsonl")
    recs[1]["started_at"] = recs[0]["started_at"] - 5.0
    _write(d, "steps.jsonl", recs)


# name -> (mutation, what the one line starts with after "error: RUN_DIR/", a text it must contain)
MUTATIONS = {
    "negative time": (_edit("steps.jsonl", 1, small_time_s=-1.0), "steps.jsonl:1: small_time_s: must be in [0, 86400] s", "-1.0"),
    "1e300 s time": (_edit("steps.jsonl", 1, small_time_s=1e300), "steps.jsonl:1: small_time_s: must be in [0, 86400] s", "1e+300"),
    "1e300 s latency": (_edit("requests.jsonl", 2, latency_s=1e300), "requests.jsonl:2: latency_s: must be in", "1e+300"),
    "1e15 tokens": (_edit("steps.jsonl", 3, context_tokens=10 ** 15), "steps.jsonl:3: context_tokens: must be in "
                    f"[0, {MAX_TOKENS:g}] tokens", str(10 ** 15)),
    "1e15 request tokens": (_edit("requests.jsonl", 1, thinking_tokens=10 ** 15), "requests.jsonl:1: thinking_tokens:", "tokens"),
    "score above 9": (_edit("steps.jsonl", 1, score=12.0), "steps.jsonl:1: score: must be in [0, 9]", "12.0"),
    "duplicated step line": (_append_copy("steps.jsonl", 1), "steps.jsonl:8: request_id/step_index: duplicate record",
                             "steps.jsonl:1"),
    "duplicated request line": (_append_copy("requests.jsonl", 3), "requests.jsonl:4: request_id: duplicate record",
                                "requests.jsonl:3"),
    "orphan step": (_edit("steps.jsonl", 7, request_id=9), "steps.jsonl:7: request_id: 9 has no request record", "unfinished"),
    "negative request_id": (_edit("requests.jsonl", 1, request_id=-1), "requests.jsonl:1: request_id: must be in [0,", "-1"),
    "negative step_index": (_edit("steps.jsonl", 2, step_index=-1), "steps.jsonl:2: step_index: must be in [0,", "-1"),
    "step missing": (_drop("steps.jsonl", 2), "requests.jsonl:1: num_steps: 2 steps, but steps.jsonl holds 1", "0..1"),
    "call longer than its request": (_edit("steps.jsonl", 1, base_time_s=100.0), "steps.jsonl:1: base_time_s: no longer "
                                     "than request 0's latency_s", "100"),
    "steps out of order": (_swap_started_at, "steps.jsonl:2: started_at: step 1 of request 0 starting after", "5"),
    "empty steps.jsonl": (lambda d: (d / "steps.jsonl").write_text(""), "steps.jsonl: empty", "step record"),
    "missing steps.jsonl": (lambda d: (d / "steps.jsonl").unlink(), "steps.jsonl: missing", "steps.jsonl.gz"),
    "missing requests.jsonl": (lambda d: (d / "requests.jsonl").unlink(), "requests.jsonl: missing", "requests.jsonl"),
    "unknown system": (_manifest(system="specreason-turbo"), "run.json: system: unknown system 'specreason-turbo'",
                       "specreason-decode"),
    "request of another system": (_edit("requests.jsonl", 2, system="vanilla-base"), "requests.jsonl:2: system: "
                                  "'vanilla-base', but run.json says 'specreason'", "one system"),
    "unknown manifest kind": (_manifest(kind="runs"), "run.json: kind: expected one of run, serve, microbench", "'runs'"),
}


def _run(args, capsys) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(RUN, d)
    return d


def test_the_unmutated_run_is_ok_for_both(tmp_path, capsys):
    """The control: the same folder unmutated passes check-trace and validate reads it (exit 0, a report)."""
    d = _copy(tmp_path)
    rc, out, err = _run(["validate", "trace", d], capsys)
    assert rc == 0 and out.strip() == "1 run, 7 step, 3 request record(s): ok", (out, err)
    rc, out, err = _run(["validate", "runs", d, "--profile", "prior", "--no-distribution", "--out", tmp_path / "rep"], capsys)
    assert rc == 0 and (tmp_path / "rep" / "report.md").is_file(), err
    assert "replay e2e    n=  3" in out  # 3 requests, each counted once


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_check_trace_and_validate_refuse_alike(tmp_path, capsys, name):
    mutate, starts, contains = MUTATIONS[name]
    d = _copy(tmp_path)
    mutate(d)
    rc_check, out, err_check = _run(["validate", "trace", d], capsys)
    assert rc_check == 2 and "ok" not in out, (name, out)
    rc_val, _, err_val = _run(["validate", "runs", d, "--profile", "prior", "--no-distribution", "--out", tmp_path / "rep"],
                              capsys)
    assert rc_val == 2 and not (tmp_path / "rep").exists(), (name, err_val)
    assert err_check == err_val, (name, err_check, err_val)  # one validation: the same line
    line = err_check.strip()
    assert "\n" not in line and "Traceback" not in line
    assert line.startswith(f"error: {d}/{starts}"), (name, line)
    assert contains in line, (name, line)


# ---- serving runs: check-trace and validate-serving, on the import of a committed `vllm bench serve` result --------
BENCH = ROOT / "tests/data/bench_serve/closed-1.json"
SERVE_PROFILE = ROOT / "simulator/profiles/cost_cpu-epyc-vllm032.yaml"
SERVE_MUTATIONS = {
    "duplicated request line": (_append_copy("serve_requests.jsonl", 2), "serve_requests.jsonl:5: request_id: "
                                "duplicate record", "serve_requests.jsonl:2"),
    "request id past the count": (_edit("serve_requests.jsonl", 4, request_id=7), "serve_requests.jsonl:4: request_id: 7, "
                                  "but the file holds 4 requests", "0..3"),
    "negative ttft": (_edit("serve_requests.jsonl", 1, ttft_s=-0.1), "serve_requests.jsonl:1: ttft_s: must be in [0,", "-0.1"),
    "1e15 output tokens": (_edit("serve_requests.jsonl", 3, output_tokens=10 ** 15), "serve_requests.jsonl:3: "
                           "output_tokens: must be in", "tokens"),
    "empty serve_requests.jsonl": (lambda d: (d / "serve_requests.jsonl").write_text(""), "serve_requests.jsonl: empty",
                                   "serve_request record"),
}


def test_the_unmutated_serving_run_is_ok_for_both(tmp_path, capsys):
    from calibrate.measure.import_bench_serve import write_run

    d = write_run(BENCH, tmp_path / "closed-1")
    rc, out, err = _run(["validate", "trace", d], capsys)
    assert rc == 0 and out.strip() == "1 run, 4 serve_request record(s): ok", (out, err)
    rc, out, err = _run(["validate", "serving", d, "--profile", SERVE_PROFILE, "--out", tmp_path / "rep"], capsys)
    assert rc == 0 and (tmp_path / "rep").is_dir(), err


@pytest.mark.parametrize("name", list(SERVE_MUTATIONS))
def test_check_trace_and_validate_serving_refuse_alike(tmp_path, capsys, name):
    from calibrate.measure.import_bench_serve import write_run

    mutate, starts, contains = SERVE_MUTATIONS[name]
    d = write_run(BENCH, tmp_path / "closed-1")
    mutate(d)
    rc_check, out, err_check = _run(["validate", "trace", d], capsys)
    rc_val, _, err_val = _run(["validate", "serving", d, "--profile", SERVE_PROFILE, "--out", tmp_path / "rep"], capsys)
    assert rc_check == rc_val == 2 and not (tmp_path / "rep").exists(), (name, out, err_val)
    assert err_check == err_val, (name, err_check, err_val)
    line = err_check.strip()
    assert "\n" not in line and line.startswith(f"error: {d}/{starts}") and contains in line, (name, line)


# ---- the bounds as a law: a number outside its field's range is refused naming the field, one inside is accepted ---
def _step() -> dict:
    return json.loads((RUN / "steps.jsonl").read_text().splitlines()[0])


BOUNDED = [(f, STEP_FIELDS) for f in STEP_FIELDS.values() if f.type in ("int", "float") and value_range(f)
           and f.name != "schema_version"]


@settings(max_examples=examples(60), deadline=None)
@given(data=st.data())
def test_a_number_outside_its_range_is_refused_and_inside_accepted(data):
    f, fields = data.draw(st.sampled_from(BOUNDED), label="field")
    lo, hi = value_range(f)
    num = st.integers if f.type == "int" else (lambda a, b: st.floats(a, b, allow_nan=False))
    inside = data.draw(num(lo, hi), label="inside")
    rec = _step()
    check_record({**rec, f.name: inside}, fields, "steps.jsonl", 1)
    outside = data.draw(st.one_of(num(None, lo - 1) if f.type == "int" else st.floats(max_value=lo, exclude_max=True,
                                                                                          allow_nan=False, allow_infinity=False),
                                  num(hi + 1, None) if f.type == "int" else st.floats(min_value=hi, exclude_min=True,
                                                                                      allow_nan=False, allow_infinity=False)),
                        label="outside")
    with pytest.raises(InputError) as e:
        check_record({**rec, f.name: outside}, fields, "steps.jsonl", 1)
    assert e.value.file == "steps.jsonl:1" and e.value.field == f.name and f"[{lo:g}, {hi:g}]" in e.value.message


def test_ranges_by_unit():
    """Durations under a day, Unix instants 1970-2100, serving instants from the run start, ids from 0."""
    assert value_range(STEP_FIELDS["small_time_s"]) == (0.0, MAX_DURATION_S)
    assert value_range(STEP_FIELDS["started_at"])[0] == 0.0
    assert value_range(SERVE_REQUEST_FIELDS["arrival_s"])[1] > MAX_DURATION_S
    assert value_range(SERVE_REQUEST_FIELDS["user"])[0] == -1
    assert value_range(RUN_FIELDS["seed"]) is None and value_range(RUN_FIELDS["tensor_parallel"])[0] == 1
    assert value_range(STEP_FIELDS["text"]) is None
