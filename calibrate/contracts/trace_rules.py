"""A run directory's rules across its records, after :mod:`calibrate.contracts.trace_schema` has checked each record by itself.

:func:`check_run` is the second half of :func:`calibrate.contracts.trace_schema.check_run_dir`, so ``specsim calibrate
check-trace`` and every reader of a run directory (``validate``, the fits, the serving loaders) refuse the same
folders:

- the files the manifest's kind needs exist and hold records (``run``: ``steps.jsonl`` and ``requests.jsonl``;
  ``serve``: ``serve_requests.jsonl``; ``microbench``: ``microbench.jsonl``);
- the system is one the simulator knows, and every request record names the manifest's;
- every step belongs to a finished request (an orphan step is a request cut off before its request record was
  written: resuming the run removes it) and every request has exactly its ``num_steps`` steps, indexed from 0;
  a serving run's requests are numbered 0..n-1, each with at least one engine call in ``serve_calls.jsonl`` (when
  the run has one) and every call belonging to one of them;
- a serving request's instants in order (arrival, submitted, first token, done) with its TTFT and latency their
  differences, at least one output token, and (one call per request) no more cached than prompt tokens;
- durations agree with each other: no call of a step longer than its request, the steps of a request starting in
  order. Timers are read separately, so "no longer than" allows DURATION_REL_TOL + DURATION_ABS_TOL s.

Every error is an :class:`InputError` naming ``file:line`` and the field.
"""

from __future__ import annotations

from pathlib import Path

from simulator.errors import InputError
from simulator.inputs.systems import SYSTEMS

DURATION_REL_TOL = 0.02
DURATION_ABS_TOL = 0.005

# manifest kind -> the record files it cannot do without
REQUIRED_FILES = {"run": (("step", "steps.jsonl"), ("request", "requests.jsonl")),
                  "serve": (("serve_request", "serve_requests.jsonl"),),
                  "microbench": (("microbench", "microbench.jsonl"),)}

Lines = list[tuple[int, dict]]


def longer(part: float, whole: float) -> bool:
    """``part`` exceeds ``whole`` by more than the timers' tolerance."""
    return part > whole * (1 + DURATION_REL_TOL) + DURATION_ABS_TOL


def check_run(run_dir: Path, meta: dict, files: dict[str, tuple[Path, Lines]]) -> None:
    """Refuse a run directory whose records are each valid but do not make one run (module docstring)."""
    _check_files(run_dir, meta, files)
    _check_system(run_dir, meta, files)
    if "step" in files and "request" in files:
        _check_steps_of_requests(files["step"], files["request"])
    if "serve_request" in files:
        _check_serve_request_ids(files["serve_request"])
        _check_serve_request_times(files["serve_request"], multi_call="serve_call" in files)
    if "serve_call" in files and "serve_request" in files:
        _check_calls_of_requests(files["serve_call"], files["serve_request"])


def _check_files(run_dir: Path, meta: dict, files: dict[str, tuple[Path, Lines]]) -> None:
    kind = meta["kind"]
    if kind not in REQUIRED_FILES:
        raise InputError(str(run_dir / "run.json"), "kind", f"expected one of {', '.join(REQUIRED_FILES)} (got {kind!r})")
    for rec_kind, name in REQUIRED_FILES[kind]:
        if rec_kind not in files:
            raise InputError(str(run_dir / name), None, f"missing: a {kind!r} run directory holds {name} (or {name}.gz)")
        path, lines = files[rec_kind]
        if not lines:
            raise InputError(str(path), None, f"empty: a {kind!r} run directory has at least one {rec_kind} record")


def _check_system(run_dir: Path, meta: dict, files: dict[str, tuple[Path, Lines]]) -> None:
    system = meta["system"]
    if meta["kind"] == "microbench" and system == "":
        return
    if system not in SYSTEMS:
        raise InputError(str(run_dir / "run.json"), "system", f"unknown system {system!r} (known: {', '.join(SYSTEMS)})")
    path, lines = files.get("request", (None, []))
    for line, r in lines:
        if r["system"] != system:
            raise InputError(f"{path}:{line}", "system", f"{r['system']!r}, but run.json says {system!r}: one run "
                                                          "directory holds one system's requests")


def _check_steps_of_requests(steps: tuple[Path, Lines], requests: tuple[Path, Lines]) -> None:
    (spath, slines), (rpath, rlines) = steps, requests
    by_request: dict[int, list[tuple[int, dict]]] = {r["request_id"]: [] for _, r in rlines}
    for line, s in slines:
        if s["request_id"] not in by_request:
            raise InputError(f"{spath}:{line}", "request_id", f"{s['request_id']} has no request record in {rpath.name}: "
                             "a step of an unfinished request (rerunning the run's command resumes it and drops such "
                             "steps)")
        by_request[s["request_id"]].append((line, s))
    for line, r in rlines:
        mine = sorted(by_request[r["request_id"]], key=lambda x: x[1]["step_index"])
        indices = [s["step_index"] for _, s in mine]
        if indices != list(range(r["num_steps"])):
            raise InputError(f"{rpath}:{line}", "num_steps", f"{r['num_steps']} steps, but {spath.name} holds "
                             f"{len(indices)} of request {r['request_id']} (step_index {_ranges(indices)}); expected "
                             f"step_index 0..{r['num_steps'] - 1}")
        _check_step_durations(spath, r, mine)


def _check_step_durations(spath: Path, request: dict, steps: Lines) -> None:
    """No call of a step longer than its request's latency; the steps of the request starting in order."""
    lat, last = request["latency_s"], None
    for line, s in steps:
        for col in ("small_time_s", "score_time_s", "base_time_s"):
            if longer(s[col], lat):
                raise InputError(f"{spath}:{line}", col, f"no longer than request {request['request_id']}'s latency_s "
                                                         f"{lat:.4g} s (got {s[col]:.4g} s)")
        t = s["started_at"]
        if t and last and t < last - DURATION_ABS_TOL:
            raise InputError(f"{spath}:{line}", "started_at", f"step {s['step_index']} of request "
                             f"{request['request_id']} starting after the previous one (negative gap of {last - t:.4g} s)")
        last = t


def _check_serve_request_ids(requests: tuple[Path, Lines]) -> None:
    """A serving run's requests are numbered 0..n-1 in submission (or arrival) order, each once."""
    path, lines = requests
    for line, r in lines:
        if r["request_id"] >= len(lines):
            raise InputError(f"{path}:{line}", "request_id", f"{r['request_id']}, but the file holds {len(lines)} "
                             f"requests: expected request ids 0..{len(lines) - 1}, once each")


def _check_serve_request_times(requests: tuple[Path, Lines], multi_call: bool) -> None:
    """Each serving request's instants in order (arrival, submission, first token, done), its TTFT and latency the
    differences they are said to be, at least one output token and, for one engine call per request (no
    ``serve_calls.jsonl``: a reasoning request's calls each count their cached prompt), no more cached prompt tokens
    than prompt tokens."""
    path, lines = requests
    for line, r in lines:
        where = f"{path}:{line}"
        order = ("arrival_s", "submitted_s", "first_token_s", "done_s")
        for a, b in zip(order, order[1:]):
            if r[a] > r[b] + DURATION_ABS_TOL:
                raise InputError(where, b, f"{r[b]:.6g} s, before {a} {r[a]:.6g} s: expected arrival <= submitted <= "
                                 "first token <= done")
        for col, start, end in (("ttft_s", "arrival_s", "first_token_s"), ("latency_s", "arrival_s", "done_s")):
            want = r[end] - r[start]
            if abs(r[col] - want) > DURATION_ABS_TOL + DURATION_REL_TOL * abs(want):
                raise InputError(where, col, f"expected {end} - {start} = {want:.6g} s (got {r[col]:.6g})")
        if r["output_tokens"] < 1:
            raise InputError(where, "output_tokens", f"expected >= 1 generated token (got {r['output_tokens']})")
        if not multi_call and r["cached_tokens"] > r["prompt_tokens"]:
            raise InputError(where, "cached_tokens", f"{r['cached_tokens']}, more than the request's "
                             f"{r['prompt_tokens']} prompt tokens")


def _check_calls_of_requests(calls: tuple[Path, Lines], requests: tuple[Path, Lines]) -> None:
    """Every engine call belongs to a request, and every request made at least one call."""
    (cpath, clines), (rpath, rlines) = calls, requests
    known = {r["request_id"]: line for line, r in rlines}
    for line, c in clines:
        if c["request_id"] not in known:
            raise InputError(f"{cpath}:{line}", "request_id", f"{c['request_id']} has no request record in {rpath.name}")
    silent = sorted(set(known) - {c["request_id"] for _, c in clines})
    if silent:
        raise InputError(f"{rpath}:{known[silent[0]]}", "request_id", f"request {silent[0]} has no calls in {cpath.name}")


def _ranges(xs: list[int]) -> str:
    """``0-3, 5``: sorted integers as runs (for messages)."""
    if not xs:
        return "none"
    out, start = [], xs[0]
    for a, b in zip(xs, [*xs[1:], None]):
        if b != a + 1:
            out.append(f"{start}" if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)
