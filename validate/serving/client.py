"""Engine steps as a benchmark client implies them (``vllm bench serve`` imports: requests only, no engine steps).

One request at a time (closed loop of 1 user) the engine runs one sequence, so the client's timings are its
steps: the first token ends the prefill (new = prompt tokens, context 0, duration = TTFT, so HTTP, tokenization
and queueing count as step time), and every later streamed chunk ends one decode step (new = 1, context = prompt
+ tokens so far, duration = the chunk's ITL). That is what a user's one-request-at-a-time run gives to fit the
step-time parameters on (``validate-serving --fit-levels closed-1``); concurrent levels imply no such steps (who
shared a step is not seen) and are refused as fit data."""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.errors import InputError

from .load import ServingRun


def client_steps(run: ServingRun) -> pd.DataFrame:
    """Synthetic engine steps of a one-user ``vllm bench serve`` run (``engine`` base), in the serve_steps layout."""
    if not run.client_side:
        return run.steps
    if run.mode != "closed" or run.users != 1:
        raise InputError(str(run.path), "--fit-levels", f"{run.label}: a `vllm bench serve` run implies engine steps "
                         "only one request at a time (max concurrency 1): fit on closed-1")
    rows = []
    for r in run.requests.itertuples():
        gaps = run.client_itls.get(int(r.request_id), [])
        t = float(r.arrival_s)
        rows.append((t, float(r.ttft_s), int(r.request_id), int(r.prompt_tokens), 0, 1))
        t += float(r.ttft_s)
        for k, g in enumerate(gaps):
            rows.append((t, float(g), int(r.request_id), 1, int(r.prompt_tokens) + k + 1, 0))
            t += float(g)
    rows.sort()
    rows = [x for x in rows if x[1] > 0]
    return pd.DataFrame({"step_index": np.arange(len(rows)), "started_s": [x[0] for x in rows],
                         "duration_s": [x[1] for x in rows], "running": 1, "waiting": 0,
                         "scheduled_tokens": [x[3] for x in rows], "prefill_requests": [x[5] for x in rows],
                         "request_ids": [[x[2]] for x in rows], "new_tokens": [[x[3]] for x in rows],
                         "context_tokens": [[x[4]] for x in rows], "engine": "base"})


def fit_client(runs: list[ServingRun], params, setup) -> tuple[object, dict]:
    """The step fit for one-user `vllm bench serve` runs, in two stages: the step-time parameters on the decode
    steps (the ITLs: one sequence, one token each), then ``call_overhead_s`` -- paid once per request before it is
    scheduled (``simulator.engines.serving.replica``) -- as the median of TTFT minus the predicted prefill pass. A server's
    per-request cost (HTTP, tokenization, scheduling hand-off) is then not charged to prefill compute, where it
    would grow with the prompt and with the batch."""
    from dataclasses import replace

    from .fit import step_times, fit_step_params, step_aggregates

    st = pd.concat([client_steps(r) for r in runs], ignore_index=True)
    dec, pre = st[st.prefill_requests == 0], st[st.prefill_requests == 1]
    if len(dec) < 2 or not len(pre):
        raise InputError(str(runs[0].path), "--fit-levels", "a one-user bench run with at least 2 output tokens per "
                         "request is needed to fit on")
    p2, facts = fit_step_params(dec, params, setup)
    gap = pre.duration_s.to_numpy(float) - step_times(p2, setup, step_aggregates(pre))
    call = float(max(0.0, np.median(gap)))
    facts["values"]["call_overhead_s"] = float(f"{call:.4g}")
    facts["rel_stderr"]["call_overhead_s"] = float("inf")
    facts.setdefault("notes", {})["call_overhead_s"] = (f"median of TTFT - predicted prefill pass over {len(pre)} "
                                                        f"requests (profile value {params.call_overhead_s:.4g})")
    facts["client_two_stage"] = True
    return replace(p2, call_overhead_s=call), facts
