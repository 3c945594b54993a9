"""The released validation's folds run as tasks of one worker pool: the same tables and fits whatever the pool."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from validate.serving.released import fit_folds

RUNS = [SimpleNamespace(key=f"r{i}", gpu=g, version=v)
        for i, (g, v) in enumerate([("a100", "0.10"), ("a100", "0.11"), ("h100", "0.11"), ("h200", "0.11"),
                                    ("h200", "0.13"), ("h100", "0.13"), ("a100", "0.11")])]


def fake_fold(runs, by, value):
    """A stand-in for host_fit.holdout_fold with its contract: fit on the others, predict the held-out runs."""
    train = [r.key for r in runs if by is None or getattr(r, by) != value]
    test = [r.key for r in runs if by is not None and getattr(r, by) == value]
    return pd.DataFrame({"run": test, "held_out": [value] * len(test)}), {"trained": train}


@pytest.mark.parametrize("workers", [1, 2])
def test_folds_and_the_fit_on_every_run_do_not_depend_on_the_pool(workers):
    folds, fitted = fit_folds(RUNS, ["gpu", "version"], True, workers, fold=fake_fold)
    assert fitted == {"trained": [r.key for r in RUNS]}
    for by in ("gpu", "version"):
        table, fits = folds[by]
        values = sorted({getattr(r, by) for r in RUNS})
        assert list(fits) == values  # one fit per held-out value, in order
        assert sorted(table.run) == sorted(r.key for r in RUNS)  # every run predicted once, held out
        for v, f in fits.items():
            held = {r.key for r in RUNS if getattr(r, by) == v}
            assert held.isdisjoint(f["trained"]) and len(f["trained"]) == len(RUNS) - len(held)
        assert list(table.held_out) == sorted(table.held_out)  # the folds' tables in the order of their values


def test_without_the_catalog_fit_there_is_no_fit_on_every_run():
    folds, fitted = fit_folds(RUNS, ["gpu"], False, 1, fold=fake_fold)
    assert fitted is None and list(folds) == ["gpu"]
