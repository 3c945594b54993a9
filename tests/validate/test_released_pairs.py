"""Async-scheduling pairs of the released serving tables (validate/serving/released.py: async_pairs)."""

import pandas as pd
import pytest

from validate.serving.released import async_pairs


def _row(run, async_on, meas, pred, **kw):
    base = {"run": run, "version": "0.11", "gpu": "h100-sxm", "model": "gpt-oss-20b", "weight_dtype": "bf16", "tp": 1,
            "requests": 1000, "input_tokens": 215, "output_tokens": 194, "concurrency": 0, "in_fit": True,
            "async_scheduling": async_on, "batch_mean": 900.0, "meas_out_tps": meas, "pred_out_tps": pred}
    return {**base, **kw}


def test_pairs_match_runs_that_differ_only_in_async():
    t = pd.DataFrame([
        _row("a.md#1", False, 1000.0, 800.0), _row("a.md#2", True, 1160.0, 1000.0, output_tokens=190),
        _row("a.md#3", True, 5000.0, 5000.0, tp=2),  # another TP: no partner
        _row("b.md#1", False, 1000.0, 1000.0),  # another doc: not paired with a.md's runs
        _row("a.md#4", False, 10.0, 10.0, in_fit=False), _row("a.md#5", True, 20.0, 20.0, in_fit=False,
                                                                 input_tokens=128)])
    p = async_pairs(t)
    assert len(p) == 1
    r = p.iloc[0]
    assert r["measured on/off"] == pytest.approx(1.16) and r["predicted on/off"] == pytest.approx(1.25)
    assert r["error"] == pytest.approx(1.25 / 1.16 - 1)


def test_no_pairs_is_an_empty_table():
    assert async_pairs(pd.DataFrame([_row("a.md#1", False, 1.0, 1.0)])).empty
