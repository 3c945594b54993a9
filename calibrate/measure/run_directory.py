"""A resumable run directory: ``run.json`` + JSONL record files written record by record.

Crash safety: each record is one line, written and flushed (and fsynced) before the next.
A request's ``request`` record is written after all its ``step`` records, so it marks the
request complete. On resume (:meth:`RunDirectory.open`) a torn last line is dropped, step
records of requests without a ``request`` record are removed, and those requests run again:
the final directory holds each record exactly once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from calibrate.contracts.trace_schema import (
    MICROBENCH_FIELDS,
    REQUEST_FIELDS,
    RUN_FIELDS,
    SERVE_CALL_FIELDS,
    SERVE_REQUEST_FIELDS,
    SERVE_STEP_FIELDS,
    STEP_FIELDS,
    check_record,
)
from simulator.errors import InputError
from simulator.inputs.loading import iter_jsonl

_FILES = {"step": ("steps.jsonl", STEP_FIELDS), "request": ("requests.jsonl", REQUEST_FIELDS),
          "microbench": ("microbench.jsonl", MICROBENCH_FIELDS),
          "serve_request": ("serve_requests.jsonl", SERVE_REQUEST_FIELDS),
          "serve_step": ("serve_steps.jsonl", SERVE_STEP_FIELDS),
          "serve_small_step": ("serve_small_steps.jsonl", SERVE_STEP_FIELDS),
          "serve_call": ("serve_calls.jsonl", SERVE_CALL_FIELDS)}
# Manifest keys that must agree for a resume to be valid (the rest is provenance).
_RESUME_KEYS = ("engine", "system", "gamma", "threshold", "first_n", "budget_tokens", "score_mode",
                "sampling", "seed", "dataset", "num_requests", "dtype")


def _read_lines_dropping_torn_tail(path: Path) -> list[dict]:
    """Parse a JSONL file; a last line without newline (torn write) is dropped and truncated."""
    if not path.exists():
        return []
    data = path.read_bytes()
    good_end = data.rfind(b"\n") + 1
    if good_end != len(data):
        with path.open("r+b") as fh:
            fh.truncate(good_end)
    return [rec for _, rec in iter_jsonl(data[:good_end].decode("utf-8").splitlines(), str(path))]


class RunDirectory:
    """Append-only writer over a run directory; use :meth:`open` to create or resume."""

    def __init__(self, path: Path, manifest: dict):
        self.path = path
        self.manifest = manifest
        self._handles: dict[str, object] = {}
        self.done_request_ids: set[int] = set()

    @classmethod
    def open(cls, path: str | Path, manifest: dict) -> "RunDirectory":
        path = Path(path)
        check_record(manifest, RUN_FIELDS, str(path / "run.json"))
        path.mkdir(parents=True, exist_ok=True)
        mpath = path / "run.json"
        rd = cls(path, manifest)
        if mpath.exists():
            old = json.loads(mpath.read_text(encoding="utf-8"))
            for k in _RESUME_KEYS:
                if old.get(k) != manifest.get(k):
                    raise InputError(str(mpath), k, f"existing run has {old.get(k)!r}, this command {manifest.get(k)!r};"
                                     " use a new --out directory")
            rd.manifest = old
            rd._recover()
        else:
            tmp = mpath.with_suffix(".json.tmp")
            tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            os.replace(tmp, mpath)
        return rd

    def _recover(self) -> None:
        requests = _read_lines_dropping_torn_tail(self.path / "requests.jsonl")
        self.done_request_ids = {r["request_id"] for r in requests}
        steps_path = self.path / "steps.jsonl"
        steps = _read_lines_dropping_torn_tail(steps_path)
        kept = [s for s in steps if s.get("request_id") in self.done_request_ids]
        if len(kept) != len(steps):
            tmp = steps_path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(s) + "\n" for s in kept), encoding="utf-8")
            os.replace(tmp, steps_path)
        _read_lines_dropping_torn_tail(self.path / "microbench.jsonl")

    def write(self, kind: str, record: dict) -> None:
        name, fields = _FILES[kind]
        check_record(record, fields, str(self.path / name))
        fh = self._handles.get(kind)
        if fh is None:
            fh = self._handles[kind] = open(self.path / name, "a", encoding="utf-8")
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())

    def write_request(self, steps: list[dict], request: dict) -> None:
        """Steps first, the request record last: its presence marks the request complete."""
        for s in steps:
            self.write("step", s)
        self.write("request", request)
        self.done_request_ids.add(request["request_id"])

    def close(self) -> None:
        for fh in self._handles.values():
            fh.close()
        self._handles.clear()


def execution_of_run(run_dir: str | Path) -> dict:
    """How a runner run executed, in the simulator's terms (``simulator.cost.execution.Execution`` fields):

    - ``step_calls``: the runner runs every system one engine call per step (``options.call_granularity``;
      runs recorded before that field existed ran step by step too);
    - ``prefix_cache_block``: ``options.prefix_cache_block`` (vLLM's KV block size; 0 = prefix caching off,
      mapped to the largest block: every call re-prefills its prompt); for older runs without it, the
      greatest common divisor of the engine-reported cached counts in ``steps.jsonl`` (vLLM caches whole
      blocks, so every count is a multiple of the block), 1 when nothing was cached.

    Returns those two fields plus ``source`` (where the block came from)."""
    import math

    run_dir = Path(run_dir)
    meta = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    opts = meta.get("options") or {}
    step_calls = opts.get("call_granularity", "step") == "step"
    block, source = opts.get("prefix_cache_block"), "run.json options.prefix_cache_block"
    if block is None:
        g = 0
        from calibrate.contracts.trace_schema import jsonl_lines, record_file

        f = record_file(run_dir, "steps.jsonl")
        for _, rec in iter_jsonl(jsonl_lines(f) if f is not None else [], str(f or run_dir / "steps.jsonl")):
            for k in ("score_cached_tokens", "base_cached_tokens"):
                g = math.gcd(g, int(rec.get(k) or 0))
        block, source = (g or 1), "inferred: gcd of the cached-token counts in steps.jsonl"
    block = int(block)
    if block == 0:
        block, source = 65536, source + " (0: prefix caching off)"
    return {"prefix_cache_block": block, "step_calls": step_calls, "source": source}
