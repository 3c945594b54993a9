"""Loading measured serving runs (``specsim measure serve-run`` / ``serve-systems`` directories)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.errors import InputError


@dataclass
class ServingRun:
    path: Path
    label: str  # the arrival level (closed-N | poisson-R), prefixed "SYSTEM/" for whole-system runs
    mode: str  # closed | poisson
    users: int  # closed loop: N; open loop: 0
    rate_per_s: float  # open loop: offered rate; closed: nan
    requests: pd.DataFrame
    steps: pd.DataFrame  # engine steps; column ``engine``: base (serve_steps.jsonl) or small (serve_small_steps.jsonl)
    meta: dict
    level: str = ""  # the arrival level alone
    system: str = "vanilla-base"
    calls: pd.DataFrame | None = None  # whole-system runs (serve-systems): every engine call, in order
    gamma: int = 0  # speculative serve-run (``--draft --gamma``): draft tokens per iteration
    draft: str = ""  # the draft model's folder name (speculative runs; acceptance belongs to a (gamma, draft) pair)
    client_itls: dict | None = None  # `vllm bench serve` imports: request_id -> the client's ITLs (s); no engine steps
    client_spec: tuple | None = None  # speculative bench runs: (drafts, a_1..a_gamma) from the level's /metrics scrapes

    @property
    def client_side(self) -> bool:
        """Measured by a benchmark client (`vllm bench serve`): requests only, no engine steps."""
        return self.client_itls is not None

    def matches(self, name: str) -> bool:
        """``--fit-levels`` names a level (every system's run at it) or one system's run (SYSTEM/LEVEL)."""
        return name in (self.label, self.level)


def load_run(path: str | Path) -> ServingRun:
    """A serve-run / serve-systems directory, or a `vllm bench serve` result JSON (``--save-result --save-detailed``)
    or the folder ``specsim import bench-serve`` made of one (requests and client ITLs, no engine steps)."""
    from calibrate.measure.import_bench_serve import is_bench_source, load_bench_run
    from calibrate.contracts.serving_records import load_serving_run
    from calibrate.contracts.trace_schema import SERVE_STEP_FIELDS

    bench = is_bench_source(path)
    d = load_bench_run(path) if bench else load_serving_run(path)
    meta = d["run"][0]
    arr = meta["options"].get("arrivals")
    where = str(Path(path) / "run.json")
    if not isinstance(arr, dict) or arr.get("mode") not in ("closed", "poisson"):
        raise InputError(where, "options.arrivals", "expected {mode: closed|poisson, ...}")
    req = pd.DataFrame(d["serve_request"]).sort_values("request_id").reset_index(drop=True)  # ids 0..n-1: check_run_dir
    st = pd.DataFrame(d["serve_step"], columns=None if d["serve_step"] else list(SERVE_STEP_FIELDS)).assign(engine="base")
    if d.get("serve_small_step"):
        st = pd.concat([st, pd.DataFrame(d["serve_small_step"]).assign(engine="small")], ignore_index=True)
    mode = arr["mode"]
    users = int(arr.get("users", 0)) if mode == "closed" else 0
    rate = float(arr.get("rate_per_s") if arr.get("rate_per_s") is not None else np.nan) if mode == "poisson" else np.nan
    level = meta["options"].get("label", Path(path).name)
    calls = None
    if d.get("serve_call"):
        calls = pd.DataFrame(d["serve_call"]).sort_values(["request_id", "call_index"]).reset_index(drop=True)
    system = meta.get("system") or "vanilla-base"
    gamma = int(meta.get("gamma") or 0)
    client_spec = _bench_acceptance(Path(path), gamma, meta) if bench and gamma else None
    if gamma and "spec_tokens" not in st:
        raise InputError(str(Path(path) / "serve_steps.jsonl"), "spec_tokens",
                         f"a speculative run (gamma {gamma}) needs per-step spec_tokens/emitted (recorded since 2026-11-23)")
    if gamma and calls is not None and "spec_emitted" not in calls:
        raise InputError(str(Path(path) / "serve_calls.jsonl"), "spec_emitted",
                         f"a speculative run (gamma {gamma}) needs per-call spec_drafts/spec_emitted")
    draft = Path(str((meta.get("models") or {}).get("draft", {}).get("path", ""))).name if gamma else ""
    if gamma and calls is None:
        # one speculative configuration per (draft length, draft model): runs of different drafts never pool
        system = f"{system}-g{gamma}" + (f"-{draft}" if draft else "")
    label = f"{system}/{level}" if calls is not None or gamma else level
    return ServingRun(Path(path), label, mode, users, rate, req, st, meta, level, system, calls, gamma, draft,
                      d["itls"] if bench else None, client_spec)


def _bench_acceptance(path: Path, gamma: int, meta: dict) -> tuple[int, list[float]]:
    """A speculative bench level's per-position acceptance over the level: what `vllm bench serve` itself recorded
    (``spec_decode_num_drafts``, ``spec_decode_per_position_acceptance_rates``: recent versions read the server's
    counters around the run), else the difference of the server's /metrics scrapes around it (``metrics_before.txt``
    / ``metrics_after.txt`` beside the result, as serve-bench writes them, read by ``calibrate.contracts.spec_metrics``).
    Either passes the one acceptance rule set (``calibrate.fit.fit_acceptance.check_measurement``)."""
    from calibrate.fit.fit_acceptance import Measurement, check_measurement
    from calibrate.contracts.spec_metrics import from_prometheus

    summ = ((meta.get("options") or {}).get("bench") or {}).get("summary") or {}
    if summ.get("spec_decode_per_position_acceptance_rates") and summ.get("spec_decode_num_drafts"):
        g, a, n = check_measurement(Measurement(str(path), gamma, summ["spec_decode_per_position_acceptance_rates"],
                                                summ["spec_decode_num_drafts"], "gamma",
                                                "spec_decode_per_position_acceptance_rates", "spec_decode_num_drafts"))
        return n, [float(x) for x in a]
    d = path if path.is_dir() else path.parent
    before, after = d / "metrics_before.txt", d / "metrics_after.txt"
    if not (before.is_file() and after.is_file()):
        raise InputError(str(path), "gamma", f"a `vllm bench serve` run against a speculative server (gamma {gamma}) "
                         f"needs the level's /metrics scrapes ({before.name}, {after.name} beside it; serve-bench writes them)")
    data = from_prometheus([after], [before])
    if gamma not in data:
        raise InputError(str(after), "vllm:spec_decode_num_accepted_tokens_per_pos",
                         f"expected {gamma} positions (the run's gamma), got {sorted(data)}")
    a, n = data[gamma]
    return int(n), [float(x) for x in a]

