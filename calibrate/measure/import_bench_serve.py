"""Import ``vllm bench serve`` result JSONs (``--save-result --save-detailed``) into the project's serving-run format.

What a result JSON holds (vLLM's ``vllm/benchmarks/serve.py``, and ``benchmarks/benchmark_serving.py`` before the
``vllm bench`` CLI): the traffic (``request_rate``: a number, ``"inf"`` or JSON ``Infinity``; ``max_concurrency``:
null or N), a summary (``duration``, ``completed``, ``request_throughput``, ``output_throughput``,
``mean_/median_/pNN_{ttft,tpot,itl,e2el}_ms``), and -- with per-request detail -- one entry per request in each
of the lists

=================  ================================  ==========================================================
meaning            keys read (first found wins)       versions
=================  ================================  ==========================================================
prompt tokens      ``input_lens``, ``prompt_lens``    all
output tokens      ``output_lens``                    all (0 for a failed request)
TTFT (s)           ``ttfts``                          all (0 for a failed request)
ITLs (s, list)     ``itls``                           all; a chunk of several tokens is one gap
latency (s)        ``latencies``, ``e2els``           recent (>= 0.10); absent: TTFT + sum(ITLs), vLLM's own sum
send instant (s)   ``start_times``                    recent; ``time.perf_counter()`` of the client, so relative
error text         ``errors``                         all ('' = success)
=================  ================================  ==========================================================

A recent run without ``--save-detailed`` has ``latencies`` but no ``ttfts``/``itls``: refused (the per-request
detail is what the validation compares). Summary keys are copied as written (``request_goodput:`` with its colon
in 0.6-0.7 becomes ``request_goodput``).

Arrivals: ``max_concurrency`` N with ``request_rate`` inf is a closed loop of N users (vLLM's client holds a
semaphore of N and sends in order: the serving simulator's ``ClosedLoopUsers``); otherwise an open loop whose
measured send instants are replayed (``poisson`` mode, ``rate_per_s`` the offered rate, or the measured one for
``inf`` without a cap: every request at once); an open loop capped at N in flight (a finite rate with
``max_concurrency`` below the request count) replays its send instants too, which the cap already shaped, and a
workload made of it (:func:`serving_workload`) keeps the cap. Without ``start_times`` a closed loop's send instants are
reconstructed the way the client makes them (a request goes when one of the N slots frees, in order); an open
loop without them is refused. Failed requests (non-empty ``errors`` entry) are dropped and counted in
``run.json`` (``options.bench.failed``); every request failing is an error. The summary's ``completed`` and ``failed``
must equal the lists' counts of requests without and with an error (a mismatch names both numbers).

Written (``specsim import bench-serve``, or in memory by ``validate/serving`` when it is given the JSON
itself): ``run.json`` (kind ``serve``, engine ``vllm-bench-serve``), ``serve_requests.jsonl`` (one record per
successful request, the same contract as ``serve-run``; ``cached_tokens`` 0: a client does not see the prefix
cache) and ``bench_itls.jsonl`` (per request the client-measured ITLs). There are no engine steps: a client
sees none, so an imported run is never step-fit data.

Bad or partial input: :class:`InputError` naming the file and the field (``error: FILE: FIELD: expected ...``).
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from calibrate.contracts.trace_schema import RUN_FIELDS, SCHEMA_VERSION, SERVE_REQUEST_FIELDS, check_record
from simulator.errors import InputError

SOURCE = "vllm-bench-serve"
ITL_FILE = "bench_itls.jsonl"
DETAIL_HINT = "run `vllm bench serve` with --save-result --save-detailed"

# per-request lists: meaning -> keys across versions (first found wins)
PER_REQUEST_KEYS = {
    "input_lens": ("input_lens", "prompt_lens"),
    "output_lens": ("output_lens",),
    "ttfts": ("ttfts",),
    "itls": ("itls",),
    "latencies": ("latencies", "e2els"),
    "start_times": ("start_times",),
    "errors": ("errors",),
}
REQUIRED = ("input_lens", "output_lens", "ttfts", "itls")
# summary keys copied when present (ms for *_ms); renamed spellings of older versions on the right
SUMMARY_RENAMES = {"request_goodput:": "request_goodput"}
SUMMARY_PREFIXES = ("mean_", "median_", "std_", "p")
SUMMARY_KEYS = ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
                "request_goodput", "output_throughput", "total_token_throughput", "max_output_tokens_per_s",
                "max_concurrent_requests", "spec_decode_acceptance_rate", "spec_decode_acceptance_length",
                "spec_decode_num_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens",
                "spec_decode_per_position_acceptance_rates")
META_KEYS = ("date", "backend", "endpoint_type", "label", "model_id", "tokenizer_id", "num_prompts", "burstiness")


@dataclass
class BenchRequest:
    index: int  # position in the JSON's lists
    prompt_tokens: int
    output_tokens: int
    ttft_s: float
    itls_s: list[float]
    latency_s: float
    start_s: float | None  # client send instant (perf_counter seconds), when recorded


@dataclass
class BenchResult:
    path: Path
    mode: str  # closed | poisson
    users: int  # closed: N; poisson: 0
    rate_per_s: float  # offered rate (inf: all at once); nan for closed
    requests: list[BenchRequest]  # successful ones, in send order
    failed: int
    summary: dict
    meta: dict
    keys: dict = field(default_factory=dict)  # meaning -> the key this file used
    arrivals_reconstructed: bool = False
    max_concurrency: int | None = None  # an open loop's cap on requests in flight (None: none that bound)

    @property
    def label(self) -> str:
        if self.mode == "closed":
            return f"closed-{self.users}"
        return "poisson-inf" if math.isinf(self.rate_per_s) else f"poisson-{self.rate_per_s:g}"


def _num(v, where: str, fld: str, expected: str, *, integer: bool = False, minimum: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise InputError(where, fld, f"expected {expected} (got {type(v).__name__} {str(v)[:40]!r})")
    if integer and (isinstance(v, float) and not v.is_integer()):
        raise InputError(where, fld, f"expected {expected} (got {v!r})")
    if not math.isfinite(v) or v < minimum:
        raise InputError(where, fld, f"expected {expected} (got {v!r})")
    return int(v) if integer else float(v)


def _rate(v, where: str) -> float:
    if v is None or v == "inf" or v == "Infinity":
        return math.inf
    if isinstance(v, str):
        try:
            v = float(v)
        except ValueError:
            raise InputError(where, "request_rate", f"expected a number or 'inf' (got {v!r})") from None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or v <= 0:
        raise InputError(where, "request_rate", f"expected a number > 0 or 'inf' (got {v!r})")
    return float(v)


def _check_header_counts(data: dict, where: str, n: int, failed: int) -> None:
    """The summary's ``completed`` / ``failed`` (vLLM counts them from the same outputs as the lists) against the
    lists: ``n - failed`` requests without an error, ``failed`` with one. A header that disagrees is a hand-edited
    or mixed file, refused naming both numbers; ``completed`` 0 is a run in which no request succeeded."""
    for name, from_lists in (("completed", n - failed), ("failed", failed)):
        if name not in data:  # older versions write no ``failed``
            continue
        said = _num(data[name], where, name, "a request count >= 0", integer=True)
        if said != from_lists:
            raise InputError(where, name, f"{said} in the result header, but the per-request lists hold {from_lists} "
                             f"(of {n} requests, {n - failed} without an error, {failed} with one): the header and "
                             "the lists disagree")
        if name == "completed" and said == 0:
            raise InputError(where, name, f"0: no request of this run completed ({failed} failed): nothing to import")


def _load_object(path: Path, where: str) -> dict:
    """The result JSON object (the last line's of an ``--append-result`` file)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(where, None, f"cannot read a vllm bench serve result ({e.__class__.__name__})") from None
    lines = [ln for ln in text.splitlines() if ln.strip()]
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        # --append-result writes one JSON object per line
        try:
            data = json.loads(lines[-1]) if len(lines) > 1 else None
        except json.JSONDecodeError:
            data = None
        if data is None:
            raise InputError(where, None, f"expected a vllm bench serve result JSON object ({e.msg} at line {e.lineno})") from None
    if not isinstance(data, dict):
        raise InputError(where, None, f"expected a JSON object (got {type(data).__name__})")
    return data


def _per_request_lists(data: dict, where: str) -> tuple[dict[str, str], dict[str, list], int]:
    """(meaning -> key this file used, meaning -> list, number of requests): every list one entry per request."""
    keys: dict[str, str] = {}
    lists: dict[str, list] = {}
    for meaning, names in PER_REQUEST_KEYS.items():
        for k in names:
            if k in data:
                keys[meaning] = k
                lists[meaning] = data[k]
                break
    for meaning in REQUIRED:
        if meaning not in lists:
            hint = f"per-request detail missing: {DETAIL_HINT}" if meaning != "input_lens" or "duration" in data else \
                "expected a vllm bench serve result (per-request lists)"
            raise InputError(where, PER_REQUEST_KEYS[meaning][0], hint)
    n = None
    for meaning, v in lists.items():
        k = keys[meaning]
        if not isinstance(v, list):
            raise InputError(where, k, f"expected a list with one entry per request (got {type(v).__name__})")
        if n is None:
            n = len(v)
        elif len(v) != n:
            raise InputError(where, k, f"expected {n} entries, one per request like {keys['input_lens']} (got {len(v)})")
    if not n:
        raise InputError(where, keys["input_lens"], "expected at least one request (empty list)")
    return keys, lists, n


def check_gaps(gaps: list[float], output_tokens: int, decode_s: float, where: str, field: str) -> None:
    """A request's streamed inter-token gaps against its other figures: at most one per output token (a chunk each;
    fewer where chunks carry several), summing to no more than its time from first token to last."""
    if len(gaps) > output_tokens:
        raise InputError(where, field, f"{len(gaps)} gaps for {output_tokens} output tokens (expected at most one per "
                         "token after the first, a streamed chunk each)")
    if sum(gaps) > decode_s * (1 + 1e-3) + 1e-3:
        raise InputError(where, field, f"the gaps sum to {sum(gaps):.6g} s, more than the request's {decode_s:.6g} s "
                         "from first token to last (latency - TTFT)")


def _request(i: int, lists: dict[str, list], keys: dict[str, str], where: str) -> BenchRequest:
    """Request ``i`` (one without an error), each number checked."""
    at = lambda m: f"{keys[m]}[{i}]"  # noqa: E731
    pt = _num(lists["input_lens"][i], where, at("input_lens"), "a token count >= 0", integer=True)
    ot = _num(lists["output_lens"][i], where, at("output_lens"), "a token count >= 1", integer=True, minimum=1)
    ttft = _num(lists["ttfts"][i], where, at("ttfts"), "a TTFT in seconds > 0")
    itl = lists["itls"][i]
    if not isinstance(itl, list):
        raise InputError(where, at("itls"), f"expected a list of inter-token gaps in seconds (got {type(itl).__name__})")
    itl = [_num(x, where, f"{at('itls')}[{j}]", "a gap in seconds >= 0") for j, x in enumerate(itl)]
    if "latencies" in lists:
        lat = _num(lists["latencies"][i], where, at("latencies"), "a latency in seconds > 0")
        if lat + 1e-6 < ttft:
            raise InputError(where, at("latencies"), f"expected >= the request's TTFT {ttft:.6g} s (got {lat:.6g})")
    else:
        lat = ttft + sum(itl)
    check_gaps(itl, ot, lat - ttft, where, at("itls"))
    st = None
    if "start_times" in lists:
        st = _num(lists["start_times"][i], where, at("start_times"), "a send instant in seconds", minimum=-math.inf)
    return BenchRequest(i, pt, ot, ttft, itl, lat, st)


def _arrivals(data: dict, where: str, n: int, lists: dict[str, list]) -> tuple[str, int, float, int | None]:
    """(mode, users, rate, cap): a closed loop of ``max_concurrency`` users, or an open loop with its send instants
    (capped at ``max_concurrency`` in flight where the cap is below the request count)."""
    rate = _rate(data.get("request_rate", "inf"), where)
    mc = data.get("max_concurrency")
    if mc is not None:
        mc = _num(mc, where, "max_concurrency", "null or a user count >= 1", integer=True, minimum=1)
    if mc is not None and math.isinf(rate):
        return "closed", mc, rate, None
    cap = int(mc) if mc is not None and mc < n else None
    if "start_times" not in lists:
        raise InputError(where, "start_times", f"an open-loop run's send instants are needed to replay it "
                         f"(vLLM >= 0.10 writes them with --save-detailed)")
    return "poisson", 0, rate, cap


def _check_span(reqs: list[BenchRequest], data: dict, where: str, keys: dict[str, str]) -> None:
    """The requests' send instants and latencies against the header's ``duration`` (the client's wall time of the
    whole run): the first send to the last completion cannot take longer."""
    if "duration" not in data or any(r.start_s is None for r in reqs):
        return
    dur = _num(data["duration"], where, "duration", "the run's wall time in seconds > 0")
    first = min(reqs, key=lambda r: r.start_s)
    last = max(reqs, key=lambda r: r.start_s + r.latency_s)
    span = last.start_s + last.latency_s - first.start_s
    if span > dur * 1.01 + 0.01:
        raise InputError(where, keys.get("start_times", "start_times"), f"requests {first.index} (sent at "
                         f"{first.start_s:.6g} s) to {last.index} (done at {last.start_s + last.latency_s:.6g} s) span "
                         f"{span:.6g} s, more than the run's duration {dur:.6g} s")


def read_bench_json(path: str | Path) -> BenchResult:
    """Read and check one result JSON (the last object of an ``--append-result`` file with several)."""
    path = Path(path)
    where = str(path)
    data = _load_object(path, where)
    keys, lists, n = _per_request_lists(data, where)
    errors = lists.get("errors") or [""] * n
    reqs: list[BenchRequest] = []
    failed = 0
    for i in range(n):
        err = errors[i]
        if err is not None and not isinstance(err, str):
            raise InputError(where, f"{keys['errors']}[{i}]", f"expected an error string ('' = success) (got {err!r})")
        if err:
            failed += 1
            continue
        reqs.append(_request(i, lists, keys, where))
    _check_header_counts(data, where, n, failed)
    if not reqs:
        raise InputError(where, keys.get("errors", "errors"), f"every one of the {n} requests failed (first error: "
                         f"{str(errors[0])[:80]!r}): nothing to import")
    _check_span(reqs, data, where, keys)
    mode, users, rate, cap = _arrivals(data, where, n, lists)
    summary = {}
    for k, v in data.items():
        k2 = SUMMARY_RENAMES.get(k, k)
        if k2 in SUMMARY_KEYS or (k2.endswith("_ms") and k2.startswith(SUMMARY_PREFIXES)):
            summary[k2] = v
    meta = {k: data[k] for k in META_KEYS if k in data}
    res = BenchResult(path, mode, users, rate if mode == "poisson" else math.nan, reqs, failed, summary, meta, keys,
                      max_concurrency=cap)
    if all(r.start_s is not None for r in reqs):
        res.requests.sort(key=lambda r: (r.start_s, r.index))
    elif mode == "closed":
        _reconstruct_closed(res)
    return res


def _reconstruct_closed(res: BenchResult) -> None:
    """Send instants of a closed loop of N slots, requests in order (vLLM's semaphore): each one goes when the
    earliest slot frees. Relative seconds from the first send."""
    free = [0.0] * res.users
    for r in res.requests:
        j = min(range(len(free)), key=free.__getitem__)
        r.start_s = free[j]
        free[j] = r.start_s + r.latency_s
    res.arrivals_reconstructed = True


def serve_records(res: BenchResult) -> tuple[list[dict], list[dict]]:
    """(serve_request records, per-request ITL records) in the trace contract, times relative to the first send."""
    t0 = min(r.start_s for r in res.requests)
    recs, itls = [], []
    for i, r in enumerate(res.requests):
        a = float(r.start_s - t0)
        recs.append({"schema_version": SCHEMA_VERSION, "kind": "serve_request", "request_id": i,
                     "problem_id": f"bench-{r.index}", "user": -1, "arrival_s": a, "submitted_s": a,
                     "first_token_s": a + r.ttft_s, "done_s": a + r.latency_s, "prompt_tokens": r.prompt_tokens,
                     "cached_tokens": 0, "output_tokens": r.output_tokens, "max_tokens": r.output_tokens,
                     "ttft_s": r.ttft_s, "latency_s": r.latency_s})
        itls.append({"request_id": i, "itls_s": r.itls_s})
    for rec in recs:
        check_record(rec, SERVE_REQUEST_FIELDS, str(res.path))
    return recs, itls


def run_manifest(res: BenchResult, provenance: dict | None = None, command: str = "") -> dict:
    """run.json of an imported result; ``provenance`` (serve-bench's server arguments, versions, hardware) when known."""
    prov = provenance or {}
    arrivals = {"mode": res.mode}
    if res.mode == "closed":
        arrivals["users"] = res.users
    else:
        rate = res.rate_per_s
        if math.isinf(rate):  # all at once: the measured rate over the sends is what is replayed
            rate = float("nan")
        arrivals["rate_per_s"] = rate if math.isfinite(rate) else None
        arrivals["offered"] = "inf" if math.isinf(res.rate_per_s) else res.rate_per_s
        if res.max_concurrency is not None:  # the send instants replayed are those the client's cap shaped
            arrivals["max_concurrency"] = res.max_concurrency
    model = res.meta.get("model_id", "")
    meta = {"schema_version": SCHEMA_VERSION, "kind": "serve",
            "created_at": prov.get("created_at") or _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "engine": SOURCE, "engine_version": str(prov.get("vllm_version", "unknown")),
            "hardware": prov.get("hardware") or {}, "models": prov.get("models") or {"base": {"path": model}},
            "dtype": str(prov.get("dtype", "unknown")), "tensor_parallel": int(prov.get("tensor_parallel", 1)),
            "system": "vanilla-base", "gamma": int(prov.get("gamma") or len(res.summary.get(
                "spec_decode_per_position_acceptance_rates") or [])), "threshold": 0.0, "first_n": 0,
            "budget_tokens": 0, "score_mode": "", "sampling": {}, "seed": int(prov.get("seed", 0)),
            "dataset": str(res.meta.get("label") or prov.get("dataset", "")), "num_requests": len(res.requests),
            "command": command or str(prov.get("bench_command", "")),
            "options": {"arrivals": arrivals, "label": res.label, "source": SOURCE,
                        "bench": {"file": res.path.name, "failed": res.failed, "keys": res.keys,
                                  "arrivals_reconstructed": res.arrivals_reconstructed, "summary": res.summary,
                                  "meta": res.meta},
                        **({"server": prov["server"]} if "server" in prov else {}),
                        # serve-bench's level: the host's 1/5/15-min load around it and its wall time (drift checks);
                        # the server's CPU seconds over it, its API-server process and the engine core apart
                        **{k: prov[k] for k in ("loadavg_before", "loadavg_after", "wall_s", "server_cpu_s")
                           if k in prov}}}
    check_record(json.loads(json.dumps(meta, allow_nan=False, default=str)), RUN_FIELDS, str(res.path))
    return meta


def load_bench_run(path: str | Path) -> dict:
    """In memory, what a run directory would hold: {'run': [meta], 'serve_request': [...], 'serve_step': [],
    'itls': {request_id: [gaps]}}. ``path``: a result JSON, or a folder written by :func:`write_run`."""
    path = Path(path)
    if path.is_dir():
        from calibrate.contracts.trace_schema import check_run_dir

        d = check_run_dir(path)
        meta = d["run"][0]
        f = path / ITL_FILE
        itls = {}
        if f.is_file():
            for no, line in enumerate(f.read_text(encoding="utf-8").splitlines(), start=1):
                if line.strip():
                    try:
                        rec = json.loads(line)
                        itls[int(rec["request_id"])] = [float(x) for x in rec["itls_s"]]
                    except (json.JSONDecodeError, KeyError, TypeError, ValueError):
                        raise InputError(f"{f}:{no}", "itls_s", "expected {request_id, itls_s: [seconds]}") from None
        if not d.get("serve_request"):
            raise InputError(str(path / "serve_requests.jsonl"), None, "missing or empty")
        _check_itl_file(f, itls, d["serve_request"])
        return {"run": [meta], "serve_request": d["serve_request"], "serve_step": [], "itls": itls}
    res = read_bench_json(path)
    prov = _sidecar_provenance(path)
    recs, itls = serve_records(res)
    return {"run": [run_manifest(res, prov)], "serve_request": recs, "serve_step": [],
            "itls": {r["request_id"]: r["itls_s"] for r in itls}}


def _check_itl_file(f: Path, itls: dict[int, list[float]], requests: list[dict]) -> None:
    """Each gap list of ``bench_itls.jsonl`` belongs to a request of the folder and fits it (:func:`check_gaps`)."""
    by_id = {r["request_id"]: r for r in requests}
    for rid, gaps in itls.items():
        r = by_id.get(rid)
        if r is None:
            raise InputError(str(f), "request_id", f"{rid} has no request in serve_requests.jsonl")
        if any(not math.isfinite(g) or g < 0 for g in gaps):
            raise InputError(str(f), f"itls_s of request {rid}", "expected gaps in seconds >= 0")
        check_gaps(gaps, r["output_tokens"], r["latency_s"] - r["ttft_s"], str(f), f"itls_s of request {rid}")


def _sidecar_provenance(path: Path) -> dict | None:
    """serve-bench writes ``provenance.json`` beside its level folders; a result JSON inside a level folder finds it."""
    for d in (path.parent, path.parent.parent):
        f = d / "provenance.json"
        if f.is_file():
            try:
                return json.loads(f.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError):
                return None
    return None


def is_bench_source(path: str | Path) -> bool:
    """A result JSON file, or a folder this module wrote."""
    path = Path(path)
    if path.is_file():
        return path.suffix == ".json"
    m = path / "run.json"
    if not m.is_file():
        return False
    try:
        return json.loads(m.read_text(encoding="utf-8")).get("engine") == SOURCE
    except (OSError, json.JSONDecodeError, AttributeError):
        return False


def write_run(src: str | Path, out: str | Path, provenance: dict | None = None, command: str = "") -> Path:
    """Import ``src`` into the run directory ``out`` (written only after every check passed, each file atomically)."""
    from simulator.inputs.loading import write_atomic

    res = read_bench_json(src)
    recs, itls = serve_records(res)
    meta = run_manifest(res, provenance if provenance is not None else _sidecar_provenance(Path(src)), command)
    out = Path(out)
    write_atomic(out / "serve_requests.jsonl", "".join(json.dumps(r) + "\n" for r in recs))
    write_atomic(out / ITL_FILE, "".join(json.dumps(r) + "\n" for r in itls))
    write_atomic(out / "run.json", json.dumps(meta, indent=1, default=str) + "\n")  # last: marks the folder complete
    return out


def summary_line(res: BenchResult) -> str:
    s = res.summary
    get = lambda k: s.get(k, float("nan"))  # noqa: E731
    return (f"{res.path.name}: {res.label}, {len(res.requests)} requests ({res.failed} failed), "
            f"TTFT p50 {get('median_ttft_ms'):.1f} ms, TPOT p50 {get('median_tpot_ms'):.1f} ms, "
            f"ITL p50/p99 {get('median_itl_ms'):.1f}/{get('p99_itl_ms'):.1f} ms, {get('output_throughput'):.1f} tok/s")


def serving_workload(src: str | Path):
    """A result JSON as a serving workload (``simulator.engines.serving.bench_workload.ServingWorkload``): its successful
    requests' measured lengths replayed in send order, its traffic (closed loop of N, a rate, or a burst)."""
    from simulator.engines.serving.bench_workload import ServingWorkload

    res = read_bench_json(src)
    return ServingWorkload.from_measured([r.prompt_tokens for r in res.requests], [r.output_tokens for r in res.requests],
                                         res.rate_per_s, res.users if res.mode == "closed" else 0, str(res.path),
                                         res.max_concurrency)
