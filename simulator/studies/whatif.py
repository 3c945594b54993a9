"""What-if grid: every (hardware, TP, system, gamma, threshold, first_n) point of a scenario
through one engine, into one results DataFrame (the documented result columns below).

Result columns: hardware, tp, system, gamma, threshold, first_n, engine, latency_s,
speedup (vanilla-base latency on the same hardware/TP divided by this one),
small_step_fraction, acceptance_length (tokens per verification, NaN without speculative
decoding), thinking_tokens, steps, the breakdown components (``cost_tables.COMPONENTS``),
for the DES: latency_p50_s, latency_p90_s, latency_p99_s, ci_low_s, ci_high_s, requests; last,
accuracy, accuracy_lo, accuracy_hi (simulator/inputs/accuracy.py; NaN = unknown, shown as "unknown"),
accuracy_floor (meets | fails | unknown) and accuracy_why: the accuracy floor's verdict.

The best configuration (:func:`best_line`) is the fastest one shown to meet the accuracy floor -- the rule
``capacity`` and ``report`` recommend by (``simulator.inputs.accuracy.floor_status``); faster ones that are not are
named beside it, never picked.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from simulator.engines.analytic import MixturePredictor
from simulator.cost.cost_tables import COMPONENTS, CostTables
from simulator.engines.registry import GridPoint, get_engine
from simulator.inputs.accuracy import accuracy_text
from simulator.inputs.scenario import ResolvedScenario
from simulator.inputs.systems import SystemConfig
from simulator.paths import code_version

KEY_COLUMNS = ["hardware", "tp", "system", "gamma", "threshold", "first_n"]
RESULT_COLUMNS = [*KEY_COLUMNS, "engine", "latency_s", "speedup", "small_step_fraction", "acceptance_length",
                  "thinking_tokens", "steps", *COMPONENTS]
ACCURACY_COLUMNS = ["accuracy", "accuracy_lo", "accuracy_hi", "accuracy_floor", "accuracy_why"]  # NaN: unknown


def run_grid(rs: ResolvedScenario, engine: str | None = None, configs: list[SystemConfig] | None = None,
             requests: int | None = None, seed: int | None = None, floor=None) -> pd.DataFrame:
    """Predict every grid point with the engine registered as ``engine`` (default: the scenario's;
    :mod:`simulator.engines.registry`); vanilla-base is always computed as the speedup reference. ``floor``: the
    accuracy floor judged in ``accuracy_floor`` (default: ``parse_floor(None)``)."""
    engine = engine or rs.scenario.engine
    impl = get_engine(engine)
    requests = requests or rs.scenario.requests
    seed = rs.scenario.seed if seed is None else seed
    configs = configs if configs is not None else rs.system_configs()
    reference = SystemConfig(system="vanilla-base")
    todo = configs if reference in configs else [reference, *configs]
    w = rs.workload
    rows = []
    mix = MixturePredictor(w)  # one DP pass per problem for every chain the grid needs
    mix.prepare(todo)
    for hw in rs.hardware_names:
        for tp in rs.tps:
            dep = rs.deployments(hw, tp)
            ex = rs.scenario.execution
            tables = {None: CostTables(dep["base"], dep["small"], dep["draft"], w, None, execution=ex)}
            vectors = {None: mix.vectors(tables[None])}
            for cfg in todo:
                g = cfg.gamma
                if g not in tables:
                    tables[g] = CostTables(dep["base"], dep["small"], dep["draft"], w, g, execution=ex)
                    # gamma-free vectors once per hardware/TP and base engine (a speculating one may run otherwise)
                    src = next((vectors[k] for k in tables if k != g and tables[k].base == tables[g].base), None)
                    vectors[g] = mix.vectors(tables[g], shared=src)
                point = GridPoint(cfg, tables[g], mix, vectors[g], f"{hw}|{tp}|{cfg.label}", requests, seed)
                out = impl.predict(point).row()
                rows.append({"hardware": hw, "tp": tp, "system": cfg.system, "gamma": cfg.gamma,
                             "threshold": cfg.threshold, "first_n": cfg.first_n, "engine": engine,
                             "in_grid": cfg in configs, **out})
    df = pd.DataFrame(rows)
    ref = df[df.system == "vanilla-base"].set_index(["hardware", "tp"])["latency_s"]
    df["speedup"] = [ref[(h, t)] / lat for h, t, lat in zip(df.hardware, df.tp, df.latency_s)]
    df = df[df.pop("in_grid")].reset_index(drop=True)
    for c in ("gamma", "threshold"):
        df[c] = pd.array([None if v is None or v != v else int(v) for v in df[c]], dtype="Int64")
    # predicted accuracy and the floor's verdict (simulator/inputs/accuracy.py): NaN = unknown, never guessed
    from simulator.inputs.accuracy import add_accuracy, parse_floor, scenario_accuracy

    df = add_accuracy(df, scenario_accuracy(rs), floor or parse_floor(None))
    cols = RESULT_COLUMNS + list(impl.columns)
    return df[cols + ACCURACY_COLUMNS]


def whatif_from_cli(scenario: str, systems=None, gammas=None, thresholds=None, first_ns=None, engine=None,
                    requests=None, seed=None, grid_overrides: dict | None = None, accuracy_floor: str | None = None,
                    accuracy_margin: float | None = None) -> tuple[pd.DataFrame, str, dict]:
    """Resolve the scenario, apply command-line grid overrides (validated), run the grid; ``meta["best"]``:
    :func:`best_line` under ``--accuracy-floor`` / ``--accuracy-margin``."""
    from simulator.inputs.accuracy import parse_floor
    from simulator.errors import InputError
    from simulator.inputs.scenario import load_scenario
    from simulator.inputs.systems import expand_systems

    floor = parse_floor(accuracy_floor, accuracy_margin)
    rs = load_scenario(scenario, grid_overrides)
    sc = rs.scenario
    rs.check_systems(systems or [], None, "--system")
    configs = expand_systems(systems or sc.systems, gammas or sc.grid.gamma, thresholds or sc.grid.threshold,
                             first_ns or sc.grid.first_n)
    engine = engine or sc.engine
    df = run_grid(rs, engine=engine, configs=configs, requests=requests, seed=seed, floor=floor)
    meta = {"scenario": str(rs.path), "name": sc.name, "code": code_version(), "engine": engine, "workload": rs.workload.name,
            "workload_provenance": rs.workload.provenance.model_dump(mode="json"),
            "cost_profiles": {h: rs.cost_profile(h).provenance.model_dump(mode="json") for h in rs.hardware_names},
            "requests": requests or sc.requests if get_engine(engine).samples else None,
            "seed": (sc.seed if seed is None else seed) if get_engine(engine).samples else None,
            "accuracy_floor": floor.describe(), "best": best_line(df, floor)}
    title = f"{sc.name} — {engine} engine — workload {rs.workload.name}"
    note = rs.workload_note()
    if note:  # a borrowed workload is said in the table's header
        title = f"note: {note}\n{title}"
        meta["workload_note"] = note
    return df, title, meta


def best_line(df: pd.DataFrame, floor) -> str:
    """One line: the fastest configuration (lowest ``latency_s``) among those shown to meet the accuracy floor,
    and the faster ones left out with why (accuracy unknown or below the floor: never a silent winner)."""
    from simulator.studies.capacity.table import config_names

    names = dict(zip(df.index, config_names(df.assign(label=_labels(df)), df)))
    ok = df[df.accuracy_floor == "meets"].sort_values("latency_s", kind="stable")
    rule = f"accuracy floor: {floor.describe()}"
    if len(ok):
        b = ok.iloc[0]
        acc = accuracy_text(b.accuracy, b.accuracy_why)
        line = f"Best: {names[b.name]}: {b.latency_s:.3g} s per request ({b.speedup:.3g}x vanilla-base); {acc}; {rule}"
        faster = df[(df.latency_s < b.latency_s) & (df.accuracy_floor != "meets")]
    else:
        line = f"Best: none: no configuration is shown to meet the {rule}"
        faster = df[df.accuracy_floor != "meets"]
    if len(faster):
        f = faster.sort_values("latency_s", kind="stable")
        shown = [f"{names[i]} {r.latency_s:.3g} s ({r.accuracy_floor}: {r.accuracy_why})"
                 for i, r in f.head(3).iterrows()]
        more = f" and {len(f) - 3} more" if len(f) > 3 else ""
        line += f". Faster, not picked (accuracy not shown to meet the floor): {'; '.join(shown)}{more}"
    return line + "."


def _labels(df: pd.DataFrame) -> list[str]:
    """Each row's configuration label (``SystemConfig.label``: system with its gamma / threshold / first_n)."""
    return [SystemConfig(system=s, gamma=None if pd.isna(g) else int(g), threshold=None if pd.isna(t) else int(t),
                         first_n=int(n)).label for s, g, t, n in zip(df.system, df.gamma, df.threshold, df.first_n)]
