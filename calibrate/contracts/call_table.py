"""The call-table contract: one row per measured engine call, whatever the source, and the per-request table that
goes with it.

A *call table* (``CALL_COLUMNS``, in this order) is what the cost fit (``calibrate.fit.fit_cost``) and the replay
validation read: the SpecReason per-step traces and the runner's run directories both become one
(``calibrate.fit.measured``). A *request table* (``REQUEST_COLUMNS``) holds the per-request measurements of the same
inputs (what a request took as a whole, its steps and acceptance). Units are suffixes (``_s`` seconds); a column
that does not apply to a call is 0 (``spec_gamma`` / ``spec_iterations`` outside speculative calls).
:func:`check_call_table` checks that a table has every column; other columns (a fit's residuals) ride along.
"""

from __future__ import annotations

from simulator.errors import InputError

CALL_FIELDS = {
    "source": "file or run directory the call came from",
    "run_id": "independent run (held-out unit)",
    "request_id": "request within the run",
    "config": "configuration label (system and knobs)",
    "system": "system that served the request (specreason, a run's system name)",
    "threshold": "acceptance threshold of the system (NaN: none)",
    "gamma": "speculative tokens per iteration of the system (0: none)",
    "step_index": "reasoning step of the request the call belongs to",
    "role": "model that served the call: base | small",
    "op": "small_generate | score | base_generate | spec_generate",
    "new_tokens": "prompt tokens not in the prefix cache",
    "cached_tokens": "prompt tokens served from the prefix cache",
    "output_tokens": "generated tokens (score: 1)",
    "spec_gamma": "speculative tokens per iteration (spec_generate only, else 0)",
    "spec_iterations": "verification iterations (spec_generate only, else 0)",
    "wall_s": "measured wall time of the call",
}
CALL_COLUMNS = list(CALL_FIELDS)

REQUEST_FIELDS = {
    "source": "file or run directory the request came from",
    "run_id": "independent run, as the input names it",
    "run_key": "the run's full key (calibrate.fit.measured.run_key)",
    "request_id": "request within the run",
    "config": "configuration label (system and knobs)",
    "system": "system that served the request",
    "threshold": "acceptance threshold of the system (NaN: none)",
    "gamma": "speculative tokens per iteration of the system (0: none)",
    "measured_s": "sum of the modelled engine calls (what replay predicts)",
    "measured_e2e_s": "end-to-end wall time as recorded (incl. calls the model does not know)",
    "to_answer_s": "modelled calls up to the end rule of the workload model (distribution mode)",
    "to_answer_censored": "the request never reached that end inside the recording",
    "steps": "reasoning steps of the request",
    "small_step_fraction": "fraction of the request's steps kept from the small model",
    "acceptance_length": "1 + accepted draft tokens per verification iteration (NaN: no speculation)",
    "run_hash": "content hash of the run's requests and steps (calibrate.fit.measured.run_content_hash): its identity",
}
REQUEST_COLUMNS = list(REQUEST_FIELDS)


def check_call_table(calls, where: str | None = None) -> None:
    """Raise :class:`InputError` (``where: calls: ...``) when the table ``calls`` (a DataFrame) lacks a column of
    ``CALL_COLUMNS``; extra columns are allowed (a fit adds its predictions and residuals)."""
    missing = [c for c in CALL_COLUMNS if c not in calls.columns]
    if missing:
        raise InputError(where, "calls", f"call table lacks column(s) {', '.join(missing)} "
                                         f"(expected {', '.join(CALL_COLUMNS)})")
