"""Ties and the recommendation name a configuration by its label, hardware and TP: on a grid of several GPUs or TP
degrees one label names several rows, and only the rows that tie with the best are recommended."""

from __future__ import annotations

import pandas as pd

from simulator.studies.capacity import recommend
from simulator.studies.capacity.table import config_key, rank_configurations


def _table():
    # the same label on two GPUs: h200 tp=2 is best, h100 tp=2 ties with it, h100 tp=1 is far below
    rows = [("vanilla-base", "h200", 2, (5.0, 5.1, 4.9)), ("vanilla-base", "h100-sxm", 2, (4.95, 5.05, 4.9)),
            ("vanilla-base", "h100-sxm", 1, (1.0, 1.1, 0.9))]
    df = pd.DataFrame([{"label": l, "hardware": h, "tp": t, "capacities": c, "max_qps": sum(c) / len(c),
                        "qps_per_gpu": sum(c) / len(c) / t} for l, h, t, c in rows])
    return rank_configurations(df)


def test_ties_name_hardware_and_tp_when_the_grid_has_several():
    df = _table()
    rec = recommend(df)
    assert config_key(rec["best"]) == ("vanilla-base", "h200", 2)  # the most requests/s per GPU
    assert rec["tie_keys"] == {("vanilla-base", "h100-sxm", 2)}  # 1% apart: within the 5% equivalence
    assert rec["ties"] == ["vanilla-base [h100-sxm tp=2]"]  # never a bare label that names three rows


def test_one_gpu_one_tp_keeps_bare_labels():
    df = _table()
    df = df[(df.hardware == "h200")].reset_index(drop=True)
    rec = recommend(rank_configurations(df.drop(columns=["rank", "ties"])))
    assert rec["ties"] == [] and rec["tie_keys"] == set()


def test_the_interval_keeps_the_search_resolution_when_replications_agree():
    from simulator.studies.capacity.search import IntervalSpec, interval_fields

    spec = IntervalSpec(rel_tol=0.04)
    f = interval_fields([6.0, 6.0, 6.0], spec)  # warm-started replications bisecting to the same lower bracket
    assert f["max_qps_lo"] == 6.0 and f["max_qps_hi"] == 6.0 * 1.04 and f["converged"]
    g = interval_fields([5.0, 6.0, 7.0], spec)
    assert g["max_qps_lo"] < 6.0 < 6.0 * 1.04 < g["max_qps_hi"] and g["max_qps_hi"] - 6.0 * 1.04 == 6.0 - g["max_qps_lo"]
