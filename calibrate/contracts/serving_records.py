"""What a concurrent serving run exchanges: the driver's requests and step reports, the step record, the run loader.

The driver (``calibrate.measure.serving_run.drive``, ``calibrate.measure.serving_systems``) hands
:class:`ServeRequest` objects to any engine that follows the :class:`SteppingEngine` protocol and reads back one
:class:`StepReport` per engine step (the real one is ``calibrate.measure.vllm_stepping.VllmSteppingEngine``, a
test double in the tests). :func:`step_record` turns a report into a ``serve_step`` record of the trace schema
(``calibrate.contracts.trace_schema``); :func:`load_serving_run` is how readers (``validate/``) load a serving run
directory, checked against that schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from calibrate.contracts.trace_schema import SCHEMA_VERSION
from simulator.errors import InputError

SERVE_FILES = ("run.json", "serve_requests.jsonl", "serve_steps.jsonl")


@dataclass(frozen=True)
class ServeRequest:
    request_id: int
    problem_id: str
    prompt_ids: tuple[int, ...]
    max_tokens: int


@dataclass
class StepReport:
    """What one engine step did: the scheduled requests and the outputs it produced."""

    request_ids: list[int]
    new_tokens: list[int]
    context_tokens: list[int]  # already in the KV cache before the step
    waiting: int
    # (request_id, output tokens so far, finished, prompt tokens served from the prefix cache)
    outputs: list[tuple[int, int, bool, int]] = field(default_factory=list)
    raw: list = field(default_factory=list)  # the engine's own outputs of the step (vLLM ``RequestOutput``)
    spec_tokens: list[int] | None = None  # draft tokens verified per scheduled request (speculative engines only)
    call_ids: list[str] = field(default_factory=list)  # our id of each scheduled request ("<request>" / "<request>-<call>")


class SteppingEngine(Protocol):
    def add(self, req: ServeRequest) -> None: ...

    def step(self) -> StepReport: ...

    def has_unfinished(self) -> bool: ...


def step_record(index: int, start_s: float, dur_s: float, rep: StepReport, prompt_len: dict[int, int]) -> dict:
    """The ``serve_step`` record of one engine step (a request is prefilling while its context is shorter than
    its prompt)."""
    prefill = sum(1 for rid, nw, c in zip(rep.request_ids, rep.new_tokens, rep.context_tokens)
                  if c < prompt_len.get(rid, 0))
    return {"schema_version": SCHEMA_VERSION, "kind": "serve_step", "step_index": index, "started_s": start_s,
            "duration_s": dur_s, "running": len(rep.request_ids), "waiting": int(rep.waiting),
            "scheduled_tokens": int(sum(rep.new_tokens)), "prefill_requests": prefill,
            "request_ids": [int(x) for x in rep.request_ids], "new_tokens": [int(x) for x in rep.new_tokens],
            "context_tokens": [int(x) for x in rep.context_tokens]}


def load_serving_run(run_dir: str | Path) -> dict:
    """Validated records of a serving run directory: {'run', 'serve_request', 'serve_step'}."""
    from calibrate.contracts.trace_schema import check_run_dir

    d = check_run_dir(run_dir)
    meta = d["run"][0]
    if meta["kind"] != "serve":
        raise InputError(str(Path(run_dir) / "run.json"), "kind", f"expected 'serve' (a serve-run directory), got {meta['kind']!r}")
    for kind, name in (("serve_request", "serve_requests.jsonl"), ("serve_step", "serve_steps.jsonl")):
        if not d.get(kind):
            raise InputError(str(Path(run_dir) / name), None, "missing or empty")
    return d
