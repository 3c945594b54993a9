"""Speculation under load on a GPU no fit saw: the B200 closed-loop sweep's data, predictions and host-term fit.

``engine-measurements/speculators-b200-concurrency`` (shared data): vLLM 0.30 on one B200, closed-loop streams
1-128, math-reasoning prompts (~111 tokens, ~270 output), three arms: no speculation, DSpark (k = 7) and MTP. Each
arm's ITL per concurrency is predicted from the engine-level step model (``Deployment.pass_time``, the one formula)
and the arm's *own* measured acceptance length AL (tokens per iteration, bonus included):

    ITL(c) = T_iter(c) / AL(c),   T_iter(c) = draft(c) + verify(c)      (baseline: T_iter = one decode step, AL = 1)

with, for c running sequences at the sweep's mean context (prompt + half the output), verify = one pass of c (k+1)
tokens (k+1 logit rows each) and the closed loop's prefills spread over the iterations (c x prompt / iterations per
request extra tokens per pass). The model and the drafters are not published with the data, so stated assumptions
stand in for them (``ARMS``): the target is the catalog's ``qwen3.8-27b`` (``engine_fit.B200_MODEL``: Qwen3.5-27B's
hybrid shape, its fixed linear-attention state per sequence in fp32);
MTP drafts k = 2 tokens, one pass of a one-layer module per token (vLLM's MTP; k is not in the data: the k whose
AL on Qwen3.5's own MTP curve, ``acceptance-length-vs-k/qwen3.5_mtp.yaml``, is nearest the arm's measured AL among the
k it can have, :func:`nearest_k`; the evidence is in docs/results.md); DSpark drafts its
k = 7 tokens in one pass of a one-layer drafter over k positions (a block drafter: the batch-1 ITL fits this and
not k serial passes). DSpark at 128 streams queues (its median TTFT jumps from 64 streams: the engine ran fewer
than 128 sequences at once) and is left out of the growth and speedup at 128.

The B200's compute efficiency has no engine-level evidence in the fit: the catalog's is the B200's own GEMM kernels'
fraction of F (AIConfigurator) times the engine/kernel ratio of the engine-fitted GPUs (its ``source`` says which). Two
predictions per arm: ``catalog`` (every parameter as in ``simulator/catalog/gpu_priors.yaml``) and
``mtp-fitted`` (eta_comp of the B200 fitted on the MTP arm alone, the one fitter; the baseline and DSpark arms are
then held out). The comparison with the measured sweep is ``validate.spec_sweep``; vLLM 0.30's host terms fitted
on the baseline arm are written into the engine catalog here (:func:`write_sweep_version`).

    specsim validate spec-sweep --out reports/b200-speculation
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd

from calibrate.gpu_priors.engine_data import ENGINE
from calibrate.gpu_priors.engine_fit import B200_MODEL
from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.catalog.engine_hosts import ServingEngine
from simulator.cost.cost_profile import prior_profile
from simulator.cost.pass_time import draft_deployment

SWEEP = ENGINE / "speculators-b200-concurrency"


@dataclass(frozen=True)
class Arm:
    file: str
    k: int  # draft tokens per iteration (0: no speculation)
    block: bool  # the drafter proposes its k tokens in one pass (else k passes of one token)
    note: str


ARMS = {"baseline": Arm("baseline_math_reasoning.csv", 0, False, "no speculation"),
        "mtp": Arm("mtp_math_reasoning.csv", 2, False, "MTP, k = 2 (inferred from the measured AL, nearest_k), one "
                   "1-layer pass per draft token"),
        "dspark": Arm("dspark_math_reasoning.csv", 7, True, "DSpark, k = 7, one 1-layer block pass over 7 positions")}

# the sweep's server: vLLM 0.30, async scheduling on (vLLM's default since 0.14); host terms of the fitted version
# that stands for it (simulator.catalog.versions.nearest_version; simulator/catalog/engine_hosts.yaml: 0.30 itself
# once :func:`sweep_host_terms` wrote it)
SWEEP_ENGINE = ServingEngine(name="vllm", version="0.30", async_scheduling=True)
# the held-out prediction: the terms fitted on the released GPUStack runs (vLLM 0.11), async on
HELD_OUT_ENGINE = ServingEngine(name="vllm", version="0.11", async_scheduling=True)
REF_VERSION = "0.11"  # where the terms the sweep does not identify come from (async overlap, serial front end)


MTP_CURVE = ENGINE / "acceptance-length-vs-k" / "qwen3.5_mtp.yaml"  # Qwen3.5's MTP: AL per k, thinking on / off


def nearest_k(al: float, curve: dict[int, float]) -> int:
    """The drafts per iteration an arm ran where its data does not say: among the k it can have (AL <= k + 1, the bonus
    token included), the one whose published AL for the same drafter family (``curve``: k -> AL) is nearest ``al``."""
    possible = [k for k in curve if al <= k + 1]
    if not possible:
        raise ValueError(f"acceptance length {al} exceeds every k + 1 of the curve")
    return min(possible, key=lambda k: abs(curve[k] - al))


def load(root: Path | None = None) -> pd.DataFrame:
    rows = []
    for name, arm in ARMS.items():
        f = pd.read_csv((root or SWEEP) / arm.file)
        for r in f.itertuples():
            al = 1.0 if arm.k == 0 else float(r.acceptance_length)
            rows.append({"arm": name, "concurrency": int(r.offered_concurrency), "itl_ms": float(r.median_itl_ms),
                         "al": al, "prompt": float(r.mean_prompt_tokens), "output": float(r.mean_output_tokens),
                         "ttft_ms": float(r.median_ttft_ms)})
    return pd.DataFrame(rows).sort_values(["arm", "concurrency"]).reset_index(drop=True)


def deployments(eta_comp: float | None = None, engine: ServingEngine = SWEEP_ENGINE, host: dict | None = None):
    hw = get_hardware("b200")
    p = prior_profile(hw, serving_engine=engine, host=host).params(hw)
    if eta_comp is not None:
        p = replace(p, compute_efficiency=eta_comp)
    tgt = Deployment(get_model(B200_MODEL), hw, 1, p)
    return tgt, draft_deployment(tgt, "head", p)


def arm_capacity(arm: str, prompt: float, output: float, deps: tuple[Deployment, Deployment] | None = None) -> int:
    """Sequences of ``prompt`` + ``output`` tokens the B200 holds at once for ``arm`` (vLLM's memory plan at its
    default gpu_memory_utilization 0.9: weights, activation peak and graphs off the top; each running sequence its
    full-attention KV and 1 + k linear-attention states, k the drafts it verifies per step); ``deps``: the (target,
    draft) of :func:`deployments` (default: the catalog's)."""
    from simulator.engines.serving.kv_cache import kv_layout

    tgt, head = deps or deployments()
    k = ARMS[arm].k
    cap, reserve = kv_layout(0.9, [tgt, head] if k else [tgt], spec_tokens=k)
    return int(cap // (reserve + prompt + output + k))


def _pass(dep: Deployment, seqs: float, n: float, ctx: float, extra: float = 0.0, rows: float | None = None) -> float:
    """One pass of ``seqs`` sequences with ``n`` new tokens each at context ``ctx``, plus ``extra`` prefill tokens."""
    N = seqs * n + extra
    return float(dep.pass_time(N, seqs * (ctx + n) + extra, seqs * n * (ctx + (n + 1) / 2) + extra * extra / 2,
                               seqs if rows is None else rows, seqs))


def predict(d: pd.DataFrame, eta_comp: float | None = None, engine: ServingEngine = SWEEP_ENGINE,
            host: dict | None = None) -> np.ndarray:
    tgt, head = deployments(eta_comp, engine, host)
    out = np.empty(len(d))
    for i, r in enumerate(d.itertuples()):
        arm = ARMS[r.arm]
        # the engine runs at most the sequences its memory holds (the other streams queue)
        c = min(r.concurrency, arm_capacity(r.arm, r.prompt, r.output, (tgt, head)))
        ctx = r.prompt + r.output / 2
        extra = c * r.prompt / (r.output / r.al)  # the closed loop's prefills, spread over a request's iterations
        if arm.k == 0:
            t = _pass(tgt, c, 1, ctx, extra)
        else:
            k = arm.k
            draft = _pass(head, c, k, ctx, rows=c * k) if arm.block else k * _pass(head, c, 1, ctx)
            t = draft + _pass(tgt, c, k + 1, ctx, extra, rows=c * (k + 1))
        out[i] = t / r.al * 1e3
    return out


def fit_eta_comp(d: pd.DataFrame, host: dict | None = None) -> tuple[float, float]:
    """eta_comp of the B200 from the rows given (the one fitter, log ITL, around the catalog's value); ``host``:
    explicit host terms (:func:`predict`)."""
    from calibrate.fit.log_time_fit import fit_log_times

    hw = get_hardware("b200")
    prior = prior_profile(hw).params(hw).compute_efficiency
    r = fit_log_times(lambda v: predict(d, v["compute_efficiency"], host=host) / 1e3, np.log(d["itl_ms"].to_numpy() / 1e3),
                      {"compute_efficiency": prior}, ("compute_efficiency",), names=("compute_efficiency",),
                      build=lambda v: v, bounds={"compute_efficiency": (1e-3, 1.0)})
    return float(r.values["compute_efficiency"]), float(r.stderr.get("compute_efficiency", float("nan")))


def sweep_host_terms(d: pd.DataFrame | None = None) -> dict:
    """What the baseline arm says about vLLM 0.30's host terms (async scheduling on throughout). t_call: the 1-stream
    TTFT less the predicted first step (the prompt's prefill; the dense step model is validated at batch 1). The
    per-sequence slope: t_seq by least squares on the arm's log ITL with the async overlap o of :data:`REF_VERSION`,
    i.e. the ITL growth beyond the GPU model, (1 - o) t_seq per sequence while the GPU paces the step (t_seq once the
    host does: :func:`simulator.cost.roofline.step_time`) -- reported, not adopted: the B200's
    efficiencies are transferred (no engine-level fit saw it), so the GPU's own batch growth (sampling over the
    vocabulary, the linear-attention kernels) is not told apart from the host's. The serial front-end
    share is not measured by a closed loop of <= 128 streams. {term: value, ...}"""
    from scipy.optimize import least_squares

    from simulator.catalog.engine_hosts import engine_version

    d = load() if d is None else d
    base = d[d["arm"] == "baseline"].reset_index(drop=True)
    ref = engine_version(ServingEngine(version=REF_VERSION))
    o = ref.async_overlap.value
    y = np.log(base["itl_ms"].to_numpy())
    res = least_squares(lambda x: np.log(predict(base, host={"seq_overhead_s": float(np.exp(x[0])), "async_overlap": o}))
                        - y, [np.log(5e-5)], bounds=([np.log(1e-7)], [np.log(1e-3)]), diff_step=0.02)
    t_seq = float(np.exp(res.x[0]))
    cov = np.linalg.pinv(res.jac.T @ res.jac) * (res.fun @ res.fun) / max(len(y) - 1, 1)
    one = base[base["concurrency"] == 1].iloc[0]
    tgt, _ = deployments(engine=HELD_OUT_ENGINE)
    prefill = _pass(tgt, 1, one["prompt"], 0.0)
    t_call = float(one["ttft_ms"] / 1e3 - prefill)
    return {"call_overhead_s": t_call, "ttft_1_ms": float(one["ttft_ms"]), "prefill_1_ms": prefill * 1e3,
            "slope_seq_overhead_s": t_seq, "slope_seq_overhead_s_stderr": float(np.sqrt(cov[0, 0])) * t_seq,
            "slope_effective_s": (1 - o) * t_seq, "slope_itl_rms_log": float(np.sqrt(np.mean(res.fun ** 2))),
            "reference": REF_VERSION}


def write_sweep_version(path: Path, command: str, date: str, terms: dict | None = None) -> dict:
    """Write vLLM 0.30's entry into the engine catalog at ``path`` (the other versions stay): t_call from the sweep
    (:func:`sweep_host_terms`), t_seq, the serial front-end share (capped at t_call) with its first-stage share s
    where the reference has one, and the async overlap transferred from :data:`REF_VERSION`. Returns the sweep's
    terms."""
    from calibrate.fit.host_fit import put_versions
    from simulator.catalog.engine_hosts import engine_version

    t = sweep_host_terms() if terms is None else terms
    ref = engine_version(ServingEngine(version=t["reference"]))
    src = f"speculators-b200-concurrency baseline arm (vLLM 0.30, B200, 1-128 streams) via `{command}`, {date}"
    tr = f"transferred from vLLM {t['reference']} (the released-table fit, simulator/catalog/engine_hosts.yaml)"
    fe = ref.front_end_serial_s.value if ref.front_end_serial_s else ref.call_overhead_s.value
    entry = {"version": "0.30",
             "seq_overhead_s": {"value": ref.seq_overhead_s.value, "kind": "transferred",
                                "source": f"{tr}; the sweep's ITL growth beyond the GPU model would be "
                                          f"{t['slope_effective_s'] * 1e6:.0f} us per sequence (async on), not adopted: "
                                          f"not separable from the B200's own batch growth (spec_sweep.sweep_host_terms)"},
             "call_overhead_s": {"value": float(f"{t['call_overhead_s']:.4g}"), "kind": "calibrated",
                                 "source": f"{src}: 1-stream median TTFT {t['ttft_1_ms']:.1f} ms less the predicted "
                                           f"prefill {t['prefill_1_ms']:.1f} ms"},
             "front_end_serial_s": {"value": float(f"{min(fe, t['call_overhead_s']):.4g}"), "kind": "transferred",
                                    "source": f"{tr}; a closed loop of <= 128 streams does not measure it"},
             "async_overlap": {"value": ref.async_overlap.value, "kind": "transferred",
                               "source": f"{tr}; every sweep run had async scheduling on"}}
    if ref.tp_step_overhead_s is not None:
        entry["tp_step_overhead_s"] = {"value": ref.tp_step_overhead_s.value, "kind": "transferred",
                                       "source": f"{tr}; every sweep run was at TP 1"}
    if ref.front_end_first_share is not None:  # t_fe was fitted with it: the pair travels together
        entry["front_end_first_share"] = {"value": ref.front_end_first_share.value, "kind": "transferred",
                                          "source": f"{tr}, with its serial front end; a closed loop of <= 128 "
                                                    f"streams does not measure it"}
    put_versions(path, [entry])
    return t
