"""The trace data contract between ``calibrate/`` (writer) and ``simulator/`` / ``validate/`` (readers).

Every field of every record kind is declared exactly once here: name, type, unit, meaning.
``docs/trace-format.md`` is the prose version of the same tables; ``check_record`` enforces them:
missing or extra fields are errors, never zero-filled, and a number outside its physical range (``value_range``) is
refused. ``check_jsonl`` refuses a file repeating a record's key (``RECORD_KEYS``); ``check_run_dir`` then checks the
folder as a whole (``calibrate.contracts.trace_rules``). A field marked optional (present only where it applies,
e.g. the speculative fields of a serving step) may be absent; when present it is checked like any other.

A run directory holds:
- ``run.json``      one :data:`RUN_FIELDS` object (the manifest / provenance),
- ``steps.jsonl``   one :data:`STEP_FIELDS` object per reasoning step,
- ``requests.jsonl`` one :data:`REQUEST_FIELDS` object per finished request,
- ``microbench.jsonl`` (microbenchmark runs) one :data:`MICROBENCH_FIELDS` object per measurement,
- ``serve_requests.jsonl`` / ``serve_steps.jsonl`` (concurrent serving runs, ``specsim measure serve-run``)
  one :data:`SERVE_REQUEST_FIELDS` object per request and one :data:`SERVE_STEP_FIELDS` object per engine step,
- ``serve_calls.jsonl`` / ``serve_small_steps.jsonl`` (concurrent runs of whole systems, ``specsim calibrate
  serve-systems``) one :data:`SERVE_CALL_FIELDS` object per engine call and one :data:`SERVE_STEP_FIELDS` object
  per step of the small engine (``serve_steps.jsonl`` then holds the base engine's steps).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.errors import InputError
from simulator.inputs.loading import non_finite_path

SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # "int" | "float" | "str" | "bool" | "list[int]" | "list[float]" | "dict" | "list[str]"
    unit: str  # "" when dimensionless
    meaning: str
    nullable: bool = False
    optional: bool = False  # may be absent (a field that only some runs have, e.g. speculative serving runs)


def _fields(*rows: tuple) -> dict[str, Field]:
    out: dict[str, Field] = {}
    for row in rows:
        f = Field(*row)
        assert f.name not in out, f.name
        out[f.name] = f
    return out


STEP_FIELDS = _fields(
    ("schema_version", "int", "", "trace schema version (this file's SCHEMA_VERSION)"),
    ("kind", "str", "", "always 'step'"),
    ("request_id", "int", "", "index of the request in the dataset slice of this run"),
    ("step_index", "int", "", "0-based index of the step in its request"),
    ("proposer", "str", "", "who produced the kept step: 'small' (accepted proposal) or 'base'"),
    ("small_tokens", "int", "tokens", "tokens the small model proposed for this step (0 if it did not propose)"),
    ("small_time_s", "float", "s", "wall time of the small model's proposal call"),
    ("score_new_tokens", "int", "tokens", "prompt tokens of the scoring call not served from the prefix cache"),
    ("score_cached_tokens", "int", "tokens", "prompt tokens of the scoring call served from the prefix cache"),
    ("score_time_s", "float", "s", "wall time of the base model's scoring call (0 if not scored)"),
    ("score", "float", "", "judge score 0-9 (greedy digit or logprob-weighted mean)", True),
    ("digit_logprobs", "dict", "nats", "logprob of each digit token '0'..'9' seen in the top-k of the scoring call"),
    ("accepted", "bool", "", "the small model's proposal was kept (false also when no proposal was made)"),
    ("base_tokens", "int", "tokens", "tokens the base model generated for this step (0 if the small step was kept)"),
    ("base_time_s", "float", "s", "wall time of the base model's generation call for this step"),
    ("base_prompt_tokens", "int", "tokens", "prompt tokens of the base generation call"),
    ("base_cached_tokens", "int", "tokens", "prompt tokens of the base generation call served from the prefix cache"),
    ("spec_gamma", "int", "tokens", "speculative tokens per iteration in the base call (0 = no speculative decoding)"),
    ("spec_drafted_per_pos", "list[int]", "tokens", "drafted tokens at each speculative position 1..gamma in this call"),
    ("spec_accepted_per_pos", "list[int]", "tokens", "accepted tokens at each speculative position 1..gamma in this call"),
    ("context_tokens", "int", "tokens", "CoT length (prompt + kept steps) before this step, in base-model tokens"),
    ("kept_tokens", "int", "tokens", "tokens of the kept step (counts toward the thinking budget)"),
    ("text", "str", "", "text of the kept step"),
    ("started_at", "float", "s", "unix time the step started"),
)

REQUEST_FIELDS = _fields(
    ("schema_version", "int", "", "trace schema version"),
    ("kind", "str", "", "always 'request'"),
    ("request_id", "int", "", "index of the request in the dataset slice of this run"),
    ("problem_id", "str", "", "dataset-specific id of the problem"),
    ("system", "str", "", "vanilla-base | vanilla-small | specdecode | specreason | specreason-decode"),
    ("num_steps", "int", "", "steps in the request"),
    ("num_small_steps", "int", "", "steps kept from the small model"),
    ("num_base_steps", "int", "", "steps generated by the base model"),
    ("thinking_tokens", "int", "tokens", "tokens of kept steps (the budgeted quantity)"),
    ("small_tokens", "int", "tokens", "all tokens proposed by the small model, kept or not"),
    ("base_tokens", "int", "tokens", "all tokens generated by the base model"),
    ("small_time_s", "float", "s", "sum of small-model proposal times"),
    ("score_time_s", "float", "s", "sum of scoring times"),
    ("base_time_s", "float", "s", "sum of base generation times"),
    ("spec_drafted_tokens", "int", "tokens", "speculative tokens drafted over the request"),
    ("spec_accepted_tokens", "int", "tokens", "speculative tokens accepted over the request"),
    ("stop_reason", "str", "", "answer | budget | eos | max_steps"),
    ("answer", "str", "", "extracted final answer ('' if none)", False),
    ("reference_answer", "str", "", "the dataset's answer ('' if unknown)"),
    ("correct", "bool", "", "answer equals the reference (numeric compare when both parse)", True),
    ("latency_s", "float", "s", "end-to-end wall time of the request"),
    ("started_at", "float", "s", "unix time the request started"),
)

MICROBENCH_FIELDS = _fields(
    ("schema_version", "int", "", "trace schema version"),
    ("kind", "str", "", "always 'microbench'"),
    ("op", "str", "", "decode | prefill | score | draft | verify"),
    ("model", "str", "", "which model ran the op: 'base' or 'draft'"),
    ("batch", "int", "", "sequences in the batch"),
    ("new_tokens", "int", "tokens", "prompt tokens computed (prefill/score/verify) or tokens generated (decode/draft) per sequence"),
    ("cached_tokens", "int", "tokens", "context tokens already in the KV/prefix cache per sequence"),
    ("gamma", "int", "tokens", "speculative tokens (draft/verify ops; 0 otherwise)"),
    ("wall_time_s", "float", "s", "median wall time of one op over the repeats"),
    ("wall_times_s", "list[float]", "s", "every repeat's wall time"),
    ("repeats", "int", "", "measured repeats (after warm-up)"),
)

SERVE_REQUEST_FIELDS = _fields(
    ("schema_version", "int", "", "trace schema version"),
    ("kind", "str", "", "always 'serve_request'"),
    ("request_id", "int", "", "index of the request in submission order (closed loop) or arrival order (open loop)"),
    ("problem_id", "str", "", "dataset-specific id of the problem whose prompt was sent"),
    ("user", "int", "", "closed-loop user that sent the request (-1 for open-loop arrivals)"),
    ("arrival_s", "float", "s", "arrival instant relative to the run start (open loop: the scheduled Poisson instant)"),
    ("submitted_s", "float", "s", "when the driver handed the request to the engine (>= arrival_s: only between steps)"),
    ("first_token_s", "float", "s", "end of the engine step that produced the first output token"),
    ("done_s", "float", "s", "end of the engine step that produced the last output token"),
    ("prompt_tokens", "int", "tokens", "prompt tokens"),
    ("cached_tokens", "int", "tokens", "prompt tokens served from the prefix cache"),
    ("output_tokens", "int", "tokens", "generated tokens (= max_tokens: EOS is ignored)"),
    ("max_tokens", "int", "tokens", "the request's fixed generation length (seeded draw)"),
    ("ttft_s", "float", "s", "first_token_s - arrival_s"),
    ("latency_s", "float", "s", "done_s - arrival_s"),
)

SERVE_STEP_FIELDS = _fields(
    ("schema_version", "int", "", "trace schema version"),
    ("kind", "str", "", "always 'serve_step'"),
    ("step_index", "int", "", "0-based index of the engine step in the run"),
    ("started_s", "float", "s", "start of the step relative to the run start"),
    ("duration_s", "float", "s", "wall time of the step (schedule + forward + sample + output processing)"),
    ("running", "int", "", "requests scheduled in this step (the batch size)"),
    ("waiting", "int", "", "requests left waiting in the engine's queue after scheduling"),
    ("scheduled_tokens", "int", "tokens", "tokens computed in the step (sum of new_tokens)"),
    ("prefill_requests", "int", "", "scheduled requests computing prompt tokens (new_tokens > 1 or first pass)"),
    ("request_ids", "list[int]", "", "the scheduled requests"),
    ("new_tokens", "list[int]", "tokens", "tokens computed per scheduled request"),
    ("context_tokens", "list[int]", "tokens", "tokens already in the KV cache per scheduled request before the step"),
    ("spec_tokens", "list[int]", "tokens", "draft tokens verified per scheduled request (included in new_tokens); "
     "speculative runs only", False, True),
    ("emitted", "list[int]", "tokens", "output tokens each scheduled request gained in the step (accepted drafts + 1 "
     "when verifying); speculative runs only", False, True),
)

SERVE_CALL_FIELDS = _fields(
    ("schema_version", "int", "", "trace schema version"),
    ("kind", "str", "", "always 'serve_call'"),
    ("request_id", "int", "", "the request that made the call"),
    ("call_index", "int", "", "0-based index of the call within its request (calls of a request are sequential)"),
    ("engine", "str", "", "'small' or 'base': the engine that served the call"),
    ("op", "str", "", "'generate' (a step, stop at a blank line) or 'score' (one token with logprobs)"),
    ("prompt_tokens", "int", "tokens", "prompt tokens sent (the request's chain so far, plus step and judge template for a score)"),
    ("cached_tokens", "int", "tokens", "prompt tokens served from the engine's prefix cache (whole blocks)"),
    ("output_tokens", "int", "tokens", "tokens generated"),
    ("max_tokens", "int", "tokens", "the call's max_tokens"),
    ("submitted_s", "float", "s", "when the request handed the call to the driver, relative to the run start"),
    ("first_token_s", "float", "s", "end of the engine step that produced the call's first token"),
    ("done_s", "float", "s", "end of the engine step that finished the call"),
    ("spec_drafts", "list[int]", "tokens", "draft tokens verified at each of the call's verification steps; calls on a "
     "speculative base engine only", False, True),
    ("spec_emitted", "list[int]", "tokens", "output tokens the call gained at each of its verification steps (accepted "
     "drafts + 1); calls on a speculative base engine only", False, True),
)

RUN_FIELDS = _fields(
    ("schema_version", "int", "", "trace schema version"),
    ("kind", "str", "", "'run', 'microbench' or 'serve'"),
    ("created_at", "str", "", "ISO-8601 date the run directory was created"),
    ("engine", "str", "", "vllm | torch | fake"),
    ("engine_version", "str", "", "version of the engine package"),
    ("hardware", "dict", "", "detected hardware: cpu_model, cpu_count, gpu_name, gpu_count, device"),
    ("models", "dict", "", "role -> {path, architecture, num_layers, vocab_size, params, dummy_weights}"),
    ("dtype", "str", "", "weight/activation dtype"),
    ("tensor_parallel", "int", "", "tensor-parallel degree"),
    ("system", "str", "", "system run ('' for microbench)"),
    ("gamma", "int", "tokens", "speculative tokens per iteration (0 = none)"),
    ("threshold", "float", "", "SpecReason acceptance threshold"),
    ("first_n", "int", "", "first n steps generated by the base model"),
    ("budget_tokens", "int", "tokens", "thinking-token budget"),
    ("score_mode", "str", "", "greedy | mean"),
    ("sampling", "dict", "", "temperature, top_p, step_max_tokens, stop"),
    ("seed", "int", "", "run seed (request i uses seed + i)"),
    ("dataset", "str", "", "dataset spec"),
    ("num_requests", "int", "", "requests in the run"),
    ("command", "str", "", "command line that created the run"),
    ("options", "dict", "", "any further engine options (env settings, max_model_len)"),
)

# The manifest's blocks with keys of their own (every key optional, none other allowed): what
# ``calibrate.measure.hardware.detect_hardware`` and ``calibrate.measure.serve_bench.hardware_fingerprint`` detect, and what the
# runners record of their sampling. ``models`` is role -> an object (the engine's own description of the model, whose keys
# differ by engine) and ``options`` is open on purpose: docs/validation.md, "Loader gaps kept on purpose".
HARDWARE_FIELDS = _fields(
    ("cpu_model", "str", "", "CPU model name (/proc/cpuinfo)", False, True),
    ("cpu_count", "int", "", "logical CPUs", False, True),
    ("gpu_name", "str", "", "name of GPU 0 ('' without one)", False, True),
    ("gpu_count", "int", "", "visible GPUs", False, True),
    ("gpu_memory_gib", "float", "GiB", "memory of GPU 0 (0 without one)", False, True),
    ("device", "str", "", "cpu | cuda", False, True),
    ("machine", "str", "", "platform.machine(), e.g. x86_64", False, True),
    ("kernel", "str", "", "platform.release()", False, True),
    ("cpu_flags", "list[str]", "", "the CPU's AVX2 / AVX-512 / AMX flags", False, True),
    ("memory_gib", "float", "GiB", "host memory (MemTotal)", False, True),
)

SAMPLING_FIELDS = _fields(
    ("temperature", "float", "", "sampling temperature (0: greedy)", False, True),
    ("top_p", "float", "", "nucleus sampling mass", False, True),
    ("step_max_tokens", "int", "tokens", "most tokens of one reasoning step", False, True),
    ("stop", "list[str]", "", "stop strings of a step", False, True),
    ("ignore_eos", "bool", "", "generation runs past EOS (serving runs: fixed output lengths)", False, True),
    ("max_tokens", "dict", "tokens", "output-length draw of a request, {dist, min, max} (serving runs)", False, True),
)

_RUN_BLOCKS = {"hardware": HARDWARE_FIELDS, "sampling": SAMPLING_FIELDS}

_RECORD_FIELDS = {"step": STEP_FIELDS, "request": REQUEST_FIELDS, "microbench": MICROBENCH_FIELDS,
                  "serve_request": SERVE_REQUEST_FIELDS, "serve_step": SERVE_STEP_FIELDS,
                  "serve_call": SERVE_CALL_FIELDS}

_PY_TYPES: dict[str, tuple] = {
    "int": (int,),
    "float": (int, float),
    "str": (str,),
    "bool": (bool,),
    "dict": (dict,),
    "list[int]": (list,),
    "list[float]": (list,),
    "list[str]": (list,),
}


# Physical bounds of a typed number (``value_range``): a value outside them is not a measurement (a negative or 1e300 s
# time, a 1e15-token context) and is refused naming the field and the bound, before any reader sizes an array by it.
MAX_DURATION_S = 86400.0  # no engine call, step or request lasts a day
MAX_RUN_S = 30 * 86400.0  # instants relative to a run's start: no run lasts a month
UNIX_TIME_RANGE = (0.0, 4102444800.0)  # ``*_at`` instants: 1970 to 2100
MAX_TOKENS = 10_000_000  # above any model's context window (the longest served are 1-2 M tokens)
MAX_COUNT = 100_000_000  # ids, indices and counts (requests, steps, users, batch sizes, devices)
RUN_OFFSET_FIELDS = ("arrival_s", "submitted_s", "first_token_s", "done_s", "started_s")
FIELD_RANGES = {  # fields whose range is not their unit's
    "score": (0.0, 9.0),  # a judge digit or the mean of digits
    "threshold": (0.0, 10.0),  # 10 never accepts
    "user": (-1, MAX_COUNT),  # -1: an open-loop arrival
    "tensor_parallel": (1, 4096),
    "seed": None,  # any integer a generator takes
}


def value_range(f: Field) -> tuple[float, float] | None:
    """The closed range of a number (or of each number of a list) of field ``f``; None where none applies. By unit:
    tokens in [0, MAX_TOKENS]; seconds: ``*_at`` Unix instants in UNIX_TIME_RANGE, the serving runs' instants
    (RUN_OFFSET_FIELDS) in [0, MAX_RUN_S], durations in [0, MAX_DURATION_S]; a dimensionless int in [0, MAX_COUNT];
    FIELD_RANGES overrides."""
    if f.name in FIELD_RANGES:
        return FIELD_RANGES[f.name]
    if f.unit == "tokens":
        return (0, MAX_TOKENS)
    if f.unit == "s":
        if f.name.endswith("_at"):
            return UNIX_TIME_RANGE
        return (0.0, MAX_RUN_S) if f.name in RUN_OFFSET_FIELDS else (0.0, MAX_DURATION_S)
    if f.unit == "" and f.type in ("int", "list[int]"):
        return (0, MAX_COUNT)
    return None


def _out_of_range(f: Field, v: Any) -> str | None:
    rng = value_range(f)
    if rng is None or isinstance(v, (str, bool, dict)):
        return None
    lo, hi = rng
    for x in v if isinstance(v, list) else [v]:
        if isinstance(x, (int, float)) and not lo <= x <= hi:
            unit = f" {f.unit}" if f.unit else ""
            return f"must be in [{lo:g}, {hi:g}]{unit} (got {x!r}): not a physically possible value"
    return None


def _check_value(f: Field, v: Any) -> str | None:
    if v is None:
        return None if f.nullable else "must not be null"
    if f.type in ("int", "float") and isinstance(v, bool):
        return f"expected {f.type}, got bool"
    if not isinstance(v, _PY_TYPES[f.type]):
        return f"expected {f.type}, got {type(v).__name__}"
    if f.type.startswith("list["):
        inner = {"list[int]": int, "list[float]": (int, float), "list[str]": str}[f.type]
        if not all(isinstance(x, inner) and not isinstance(x, bool) for x in v):
            return f"expected {f.type}"
    # json.loads reads NaN, Infinity and 1e999 as floats: a typed number of a trace is a finite one
    if isinstance(v, float) and not math.isfinite(v) or \
            f.type.startswith("list[") and any(isinstance(x, float) and not math.isfinite(x) for x in v):
        return f"must be a finite number (got {v!r})"
    return _out_of_range(f, v)


def _check_block(block: Any, fields: dict[str, Field], where: str, name: str) -> None:
    """A manifest block with keys of its own (:data:`HARDWARE_FIELDS`, :data:`SAMPLING_FIELDS`): unknown keys and
    wrong types are errors naming ``name.key``."""
    for k, v in block.items():
        f = fields.get(k)
        if f is None:
            raise InputError(where, f"{name}.{k}", f"unknown field (known: {', '.join(fields)})")
        err = _check_value(f, v)
        if err:
            raise InputError(where, f"{name}.{k}", err)


def _check_run_blocks(rec: dict, where: str) -> None:
    """The manifest past its top-level fields: every number finite (the open blocks included), hardware and sampling
    closed, each model an object."""
    bad = non_finite_path(rec)
    if bad:
        raise InputError(where, bad, "must be a finite number (NaN / Infinity are not measurements)")
    for name, fields in _RUN_BLOCKS.items():
        _check_block(rec[name], fields, where, name)
    for role, desc in rec["models"].items():
        if not isinstance(desc, dict):
            raise InputError(where, f"models.{role}", f"expected an object describing the model, got {type(desc).__name__}")


def check_record(rec: Any, fields: dict[str, Field], file: str, line: int | None = None) -> dict:
    """Validate one record against ``fields``; raise :class:`InputError` naming file and line."""
    where = f"{file}:{line}" if line is not None else file
    if not isinstance(rec, dict):
        raise InputError(where, None, "record is not a JSON object")
    missing = [k for k, f in fields.items() if k not in rec and not f.optional]
    if missing:
        raise InputError(where, missing[0], "missing field")
    extra = [k for k in rec if k not in fields]
    if extra:
        raise InputError(where, extra[0], "unknown field")
    for name, f in fields.items():
        if name not in rec:
            continue  # an absent optional field
        err = _check_value(f, rec[name])
        if err:
            raise InputError(where, name, err)
    if rec["schema_version"] != SCHEMA_VERSION:
        raise InputError(where, "schema_version", f"unsupported version {rec['schema_version']} (expected {SCHEMA_VERSION})")
    if fields is RUN_FIELDS:
        _check_run_blocks(rec, where)
    return rec


class _DuplicateKey(ValueError):
    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _unique_object(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


def _loads_json(text: str, where: str) -> Any:
    """``json.loads`` refusing an object that repeats a key (json keeps the last one without a word): an
    :class:`InputError` at ``where`` naming the key; bad JSON is ``not valid JSON (...)`` there."""
    try:
        return json.loads(text, object_pairs_hook=_unique_object)
    except _DuplicateKey as e:
        raise InputError(where, e.key, "duplicate key (JSON would keep only the last value)") from None
    except json.JSONDecodeError as e:
        raise InputError(where, None, f"not valid JSON ({e.msg})") from None


def record_file(run_dir: str | Path, name: str) -> Path | None:
    """``run_dir/name`` or, for committed (compressed) runs, ``run_dir/name.gz``; None when neither exists."""
    p = Path(run_dir) / name
    if p.exists():
        return p
    gz = p.with_name(p.name + ".gz")
    return gz if gz.exists() else None


def jsonl_lines(path: str | Path) -> list[str]:
    """The lines of a JSONL file, read transparently from gzip when the name ends in ``.gz``;
    a corrupt or truncated archive is an :class:`InputError` naming the file."""
    import gzip
    import zlib

    path = Path(path)
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rt", encoding="utf-8") as fh:
                return fh.read().splitlines()
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as e:
        raise InputError(str(path), None, f"cannot read ({type(e).__name__}: {e})") from None


# What identifies a record within its file: a second record with the same key is a duplicated line (a copy, or two
# runs appended into one folder), refused rather than counted twice. Microbench records may repeat a configuration.
RECORD_KEYS = {"step": ("request_id", "step_index"), "request": ("request_id",), "serve_request": ("request_id",),
               "serve_step": ("step_index",), "serve_call": ("request_id", "call_index")}


def check_jsonl_lines(path: str | Path, kind: str) -> list[tuple[int, dict]]:
    """Load and validate a JSONL trace file (``.jsonl`` or ``.jsonl.gz``): (line number, record) per record. Every
    bad line is an :class:`InputError` with file:line; a record repeating another's key (:data:`RECORD_KEYS`) is one
    naming both lines."""
    path = Path(path)
    fields, key = _RECORD_FIELDS[kind], RECORD_KEYS.get(kind)
    out: list[tuple[int, dict]] = []
    seen: dict[tuple, int] = {}
    for i, raw in enumerate(jsonl_lines(path), start=1):
        if not raw.strip():
            continue
        rec = _loads_json(raw, f"{path}:{i}")
        check_record(rec, fields, str(path), i)
        if rec["kind"] != kind:
            raise InputError(f"{path}:{i}", "kind", f"expected {kind!r}, got {rec['kind']!r}")
        if key is not None:
            k = tuple(rec[n] for n in key)
            if k in seen:
                what = ", ".join(f"{n} {v}" for n, v in zip(key, k))
                raise InputError(f"{path}:{i}", "/".join(key), f"duplicate record: {what} is also at {path}:{seen[k]} "
                                 f"(each {kind} is recorded once; counting it twice would skew every figure)")
            seen[k] = i
        out.append((i, rec))
    return out


def check_jsonl(path: str | Path, kind: str) -> list[dict]:
    """The records of a JSONL trace file, validated by :func:`check_jsonl_lines`."""
    return [rec for _, rec in check_jsonl_lines(path, kind)]


RUN_FILES = (("step", "steps.jsonl"), ("request", "requests.jsonl"), ("microbench", "microbench.jsonl"),
             ("serve_request", "serve_requests.jsonl"), ("serve_step", "serve_steps.jsonl"),
             ("serve_call", "serve_calls.jsonl"), ("serve_small_step", "serve_small_steps.jsonl"))


def check_run_dir(run_dir: str | Path) -> dict[str, list[dict]]:
    """Validate a whole run directory: the manifest, every JSONL file present (each record by its fields), then the
    folder as a whole (:func:`calibrate.contracts.trace_rules.check_run`: the files its kind needs, a known system, no orphan
    step or call, counts that match). What this accepts, every reader of a run directory can use."""
    from calibrate.contracts.trace_rules import check_run

    run_dir = Path(run_dir)
    manifest = run_dir / "run.json"
    if not manifest.is_file():
        raise InputError(str(run_dir), "run.json", "missing manifest (not a run directory)")
    try:
        text = manifest.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(str(manifest), None, f"not UTF-8 text (byte {e.start}): not a run manifest") from None
    except OSError as e:
        raise InputError(str(manifest), None, f"cannot read ({type(e).__name__}: {e})") from None
    meta = _loads_json(text, str(manifest))
    check_record(meta, RUN_FIELDS, str(manifest))
    files: dict[str, tuple[Path, list[tuple[int, dict]]]] = {}
    for kind, name in RUN_FILES:
        if (f := record_file(run_dir, name)) is not None:
            files[kind] = (f, check_jsonl_lines(f, "serve_step" if kind == "serve_small_step" else kind))
    check_run(run_dir, meta, files)
    out: dict[str, list[dict]] = {"run": [meta]}
    out.update({kind: [rec for _, rec in lines] for kind, (_, lines) in files.items()})
    return out


def markdown_table(fields: dict[str, Field]) -> str:
    """The field table as Markdown (used to keep docs/trace-format.md in sync)."""
    rows = ["| field | type | unit | meaning |", "|---|---|---|---|"]
    for f in fields.values():
        t = f.type + (" or null" if f.nullable else "") + (" (optional)" if f.optional else "")
        rows.append(f"| `{f.name}` | {t} | {f.unit or '-'} | {f.meaning} |")
    return "\n".join(rows)
