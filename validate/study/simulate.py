"""The full simulator on measured acceptance: (c) the CPU prediction for the measured pairs,
and the what-if transfer of the distilled draft's acceptance gain to the reference deployments."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.inputs.scenario import PROFILES_DIR, Scenario, ResolvedScenario, find_scenario
from simulator.inputs.loading import read_yaml

CPU_SCENARIO = "cpu-smollm2"
REFERENCE_SCENARIO = "reference-a6000-qwq32b"


def _resolve(ref: str, **changes) -> ResolvedScenario:
    path = find_scenario(ref)
    data = {**read_yaml(path), **changes}
    return ResolvedScenario(Scenario.model_validate(data), path)


def monotone_acceptance(a) -> list[float]:
    """a_i clipped to [1e-6, 1] and made non-increasing (the workload profile's contract)."""
    out, last = [], 1.0
    for x in np.nan_to_num(np.asarray(a, dtype=float), nan=0.0):
        last = min(last, float(np.clip(x, 1e-6, 1.0)))
        out.append(last)
    return out


def cpu_cost_profile() -> tuple[list[str], str]:
    """The calibrated CPU cost profile if one is shipped, else the prior (and which)."""
    found = sorted(PROFILES_DIR.glob("cost_cpu*.yaml"))
    if found:
        return [found[0].stem.removeprefix("cost_")], f"calibrated ({found[0].name})"
    return ["prior"], "prior (no simulator/profiles/cost_cpu*.yaml exists)"


def simulate_cpu_speedups(a: np.ndarray, draft_layers: int | None, gammas: list[int]) -> dict[int, float]:
    """specdecode / vanilla-base latency ratio on the CPU scenario with the measured a_i and a
    draft of ``draft_layers`` layers of SmolLM2-135M (None: the scenario's cut6)."""
    from simulator.engines.analytic import CostVectors, chain_for, predict_point
    from simulator.catalog.model_lookup import get_model
    from simulator.cost.cost_model import Deployment
    from simulator.cost.cost_tables import CostTables
    from simulator.inputs.systems import SystemConfig

    rs = _resolve(CPU_SCENARIO, cost_profiles=cpu_cost_profile()[0],
                  workload_overrides={"token_acceptance": monotone_acceptance(a)})
    hw, tp = rs.hardware_names[0], rs.tps[0]
    dep = rs.deployments(hw, tp)
    if draft_layers is not None:
        spec = get_model("smollm2-135m").cut(draft_layers, name=f"smollm2-135m-cut{draft_layers}")
        dep["draft"] = Deployment(spec, dep["draft"].hardware, tp, dep["draft"].cost)
    w, chains, out = rs.workload, {}, {}
    base_cfg = SystemConfig(system="vanilla-base")
    base = predict_point(base_cfg, chain_for(base_cfg, w, chains),
                         CostVectors(CostTables(dep["base"], dep["small"], dep["draft"], w, None)))["latency_s"]
    for g in gammas:
        cfg = SystemConfig(system="specdecode", gamma=g)
        vec = CostVectors(CostTables(dep["base"], dep["small"], dep["draft"], w, g))
        out[g] = base / predict_point(cfg, chain_for(cfg, w, chains), vec)["latency_s"]
    return out


def transfer_acceptance(a_ref, a_before, a_after) -> list[float]:
    """Apply the measured relative reduction of the per-position *rejection* rate to a_ref.

    With conditional rates rho_i = a_i / a_(i-1): rho'_i = 1 - (1 - rho_ref_i) (1 - rho_after_i) / (1 - rho_before_i)
    (bounded in [0, 1], unlike a ratio of acceptances). Positions with no measurement keep rho_ref."""
    from calibrate.measure.study.acceptance import conditional_acceptance

    n = len(a_ref)
    rho_ref = conditional_acceptance(np.asarray(a_ref, dtype=float))
    pad = lambda a: np.concatenate([np.asarray(a, dtype=float)[:n], np.full(max(0, n - len(a)), np.nan)])
    rb, ra = conditional_acceptance(pad(a_before)), conditional_acceptance(pad(a_after))
    with np.errstate(invalid="ignore", divide="ignore"):
        keep = np.nan_to_num((1 - ra) / (1 - rb), nan=1.0, posinf=1.0)
    rho = np.clip(1 - (1 - rho_ref) * keep, 0.0, 1.0)
    return monotone_acceptance(np.cumprod(rho))


def transfer_gain(a_before: np.ndarray, a_after: np.ndarray, gammas: list[int]) -> list[dict]:
    """Reference scenario (2x A6000) and the same on 2x H100: SpecDecode and SpecReason+Decode at
    the best gamma, with the reference workload's a_i and with a_i x (after / before) per position.

    The relative per-position gain measured on the 135M pair is ASSUMED to carry over to the
    QwQ-32B / R1-1.5B pair; nothing here measures that."""
    from simulator.studies.whatif import run_grid
    from simulator.inputs.systems import expand_systems

    ref_data = read_yaml(find_scenario(REFERENCE_SCENARIO))
    rows = []
    for label, hw in (("2x RTX A6000 (reference)", None), ("2x H100 SXM (hardware override)", "h100-sxm")):
        for variant in ("baseline", "distilled-gain"):
            over = {}
            rs0 = _resolve(REFERENCE_SCENARIO, **({"hardware": {"gpu": hw, "count": 2}} if hw else {}))
            a_ref = rs0.workload.acceptance_per_position(max(gammas))
            if variant != "baseline":
                over = {"workload_overrides": {**(ref_data.get("workload_overrides") or {}),
                                               "token_acceptance": transfer_acceptance(a_ref, a_before, a_after)}}
            rs = _resolve(REFERENCE_SCENARIO, **({"hardware": {"gpu": hw, "count": 2}} if hw else {}), **over)
            cfgs = expand_systems(["specdecode", "specreason-decode"], gammas, [7], [0])
            df = run_grid(rs, engine="analytic", configs=cfgs)
            for system, d in df.groupby("system"):
                best = d.loc[d.latency_s.idxmin()]
                rows.append({"hardware": label, "variant": variant, "system": system, "best_gamma": int(best.gamma),
                             "latency_s": float(best.latency_s), "speedup": float(best.speedup),
                             "acceptance_length": float(best.acceptance_length),
                             "a": [round(float(x), 4) for x in rs.workload.acceptance_per_position(max(gammas))]})
    return rows
