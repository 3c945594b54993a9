"""The broker of the concurrent system runs (``specsim measure serve-systems``): request threads <-> the driver's
engines. Every request's orchestrator runs in a thread of its own against :class:`BrokeredEngine` s, whose
``generate`` / ``score`` hand the call to the :class:`Broker` and block until the driver
(:func:`calibrate.measure.serving_systems.serve`) has stepped it to completion."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from calibrate.measure.engine import Engine, Generation, Sampling, ScoreResult


# ---- the broker: request threads <-> the driver's engines -------------------------------------------
@dataclass
class CallSlot:
    request_id: int
    call_index: int
    engine: str
    op: str
    prompt_ids: list[int]
    params: object
    submitted_s: float
    first_token_s: float | None = None
    done_s: float | None = None
    output: object = None
    event: threading.Event = field(default_factory=threading.Event)
    verify: list[tuple[int, int]] = field(default_factory=list)  # speculative base engine: (drafts, tokens gained) per step

    @property
    def req_id(self) -> str:
        return f"{self.request_id}-{self.call_index}"


class Broker:
    """Hands engine calls from request threads to the driver and back (see the module docstring)."""

    def __init__(self, clock: Callable[[], float] | None = None):
        if clock is None:  # seconds since the broker was made (the run's time origin)
            t0 = time.perf_counter()
            clock = lambda: time.perf_counter() - t0  # noqa: E731
        self.clock = clock
        self.cv = threading.Condition()
        self.active = 0  # request threads running host code (neither parked on a call nor finished)
        self.submitted: list[CallSlot] = []
        self.in_flight: dict[str, CallSlot] = {}
        self.finished: list[tuple[int, float, object]] = []  # (request_id, done_s, result)
        self.errors: list[BaseException] = []
        self._local = threading.local()
        self._calls: dict[int, int] = {}

    # -- request-thread side ----------------------------------------------------------------------
    def start(self, request_id: int, fn: Callable[[], object]) -> None:
        """Run ``fn`` in a new request thread (daemon: a failed run never hangs the process)."""
        with self.cv:
            self.active += 1

        def body():
            self._local.request_id = request_id
            result = None
            try:
                result = fn()
            except BaseException as e:  # noqa: BLE001 -- re-raised by the driver
                with self.cv:
                    self.errors.append(e)
            finally:
                with self.cv:
                    self.finished.append((request_id, self.clock(), result))
                    self.active -= 1
                    self.cv.notify_all()

        threading.Thread(target=body, name=f"request-{request_id}", daemon=True).start()

    def call(self, engine: str, op: str, prompt_ids: list[int], params) -> CallSlot:
        """Submit one engine call from a request thread and block until the driver finished it."""
        rid = self._local.request_id
        with self.cv:
            k = self._calls.get(rid, 0)
            self._calls[rid] = k + 1
            slot = CallSlot(rid, k, engine, op, list(prompt_ids), params, self.clock())
            self.submitted.append(slot)
            self.active -= 1
            self.cv.notify_all()
        slot.event.wait()
        return slot

    # -- driver side --------------------------------------------------------------------------------
    def wait_parked(self) -> None:
        with self.cv:
            self.cv.wait_for(lambda: self.active == 0)
        if self.errors:
            raise self.errors[0]

    def take_submitted(self) -> list[CallSlot]:
        with self.cv:
            out, self.submitted = self.submitted, []
        for s in out:
            self.in_flight[s.req_id] = s
        return out

    def take_finished(self) -> list[tuple[int, float, object]]:
        with self.cv:
            out, self.finished = self.finished, []
        return out

    def deliver(self, slot: CallSlot) -> None:
        del self.in_flight[slot.req_id]
        with self.cv:
            self.active += 1
        slot.event.set()


# ---- the engines the orchestrator sees -----------------------------------------------------------------
class BrokeredEngine(Engine):
    """An :class:`~calibrate.measure.engine.Engine` whose calls run on a shared stepping engine via the broker.

    ``stepping`` supplies the tokenizer, model facts and version (``VllmSteppingEngine``); the
    sampling parameters and results are built exactly as ``calibrate.measure.vllm_engine.VllmEngine`` builds
    them (its module-level helpers), so a call means the same thing alone and under load."""

    name = "vllm"

    def __init__(self, role: str, stepping, broker: Broker, model_dir: str | Path):
        self.role, self.stepping, self.broker = role, stepping, broker
        self.tok = getattr(stepping, "tok", None)
        self.model_dir = Path(model_dir)
        self.gamma = int(getattr(stepping, "gamma", 0) or 0)

    # overridable for a test double (no vLLM there)
    def _gen_params(self, max_tokens, stop, sampling, seed):
        from calibrate.measure.vllm_engine import generation_params

        return generation_params(max_tokens, stop, sampling, seed, False)

    def _gen_result(self, out, dt, prompt_ids) -> Generation:
        from calibrate.measure.vllm_engine import generation_result

        return generation_result(out, dt, prompt_ids)

    def _score_params(self, top_k):
        from calibrate.measure.vllm_engine import score_params

        return score_params(top_k, False)

    def _score_result(self, out, dt, prompt_ids) -> ScoreResult:
        from calibrate.measure.vllm_engine import score_result

        return score_result(out, dt, prompt_ids)

    def generate(self, prompt_ids, max_tokens, stop, sampling: Sampling, seed) -> Generation:
        s = self.broker.call(self.role, "generate", prompt_ids, self._gen_params(max_tokens, stop, sampling, seed))
        gen = self._gen_result(s.output, s.done_s - s.submitted_s, prompt_ids)
        if self.gamma:  # per-position counts from the call's own verification steps (the engine's step records)
            from calibrate.measure.vllm_engine import per_position_counts

            gen.spec_drafted_per_pos, gen.spec_accepted_per_pos = per_position_counts(
                [k for k, _e in s.verify], [max(e - 1, 0) for _k, e in s.verify], self.gamma)
        return gen

    def score(self, prompt_ids, top_k: int = 10) -> ScoreResult:
        s = self.broker.call(self.role, "score", prompt_ids, self._score_params(top_k))
        return self._score_result(s.output, s.done_s - s.submitted_s, prompt_ids)

    def describe(self) -> dict:
        return dict(self.stepping.info)

    def version(self) -> str:
        return self.stepping.version()
