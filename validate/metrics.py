"""Error figures of predictions against measurements.

For predictions p_i of measurements m_i (m_i > 0):

    relative error e_i = p_i / m_i - 1        (signed: > 0 means over-prediction)
    APE_i = |e_i|
    median / mean / p90 APE over i; bias = median e_i (mean e_i alongside)
    coverage = fraction of m_i inside their prediction interval [lo_i, hi_i]
    pi_rel_width = median_i (hi_i - lo_i) / p_i   (how wide the intervals are, relative to the
                   prediction: coverage bought with absurd width shows here)
"""

from __future__ import annotations

import numpy as np
import pandas as pd


def relative_error(predicted, measured) -> np.ndarray:
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    return p / m - 1.0


def ape(predicted, measured) -> np.ndarray:
    return np.abs(relative_error(predicted, measured))


def coverage(measured, low, high) -> float:
    m, lo, hi = (np.asarray(x, dtype=float) for x in (measured, low, high))
    ok = ~(np.isnan(lo) | np.isnan(hi) | np.isnan(m))
    return float(np.mean((m[ok] >= lo[ok]) & (m[ok] <= hi[ok]))) if ok.any() else float("nan")


def rel_width(predicted, low, high) -> float:
    """Median (hi - lo) / p over the rows that have an interval."""
    p, lo, hi = (np.asarray(x, dtype=float) for x in (predicted, low, high))
    ok = ~(np.isnan(lo) | np.isnan(hi) | np.isnan(p)) & (p > 0)
    return float(np.median((hi[ok] - lo[ok]) / p[ok])) if ok.any() else float("nan")


def summarize(predicted, measured, low=None, high=None) -> dict:
    """n, median/mean/p90 APE, bias (median and mean signed relative error), interval coverage and
    median relative interval width."""
    p, m = np.asarray(predicted, dtype=float), np.asarray(measured, dtype=float)
    ok = ~(np.isnan(p) | np.isnan(m)) & (m > 0)
    e = relative_error(p[ok], m[ok])
    a = np.abs(e)
    out = {"n": int(ok.sum()),
           "median_ape": float(np.median(a)) if len(a) else np.nan,
           "mean_ape": float(a.mean()) if len(a) else np.nan,
           "p90_ape": float(np.quantile(a, 0.9)) if len(a) else np.nan,
           "bias": float(np.median(e)) if len(e) else np.nan,
           "mean_bias": float(e.mean()) if len(e) else np.nan,
           "coverage": np.nan, "pi_rel_width": np.nan}
    if low is not None and high is not None:
        lo, hi = np.asarray(low, dtype=float)[ok], np.asarray(high, dtype=float)[ok]
        out["coverage"] = coverage(m[ok], lo, hi)
        out["pi_rel_width"] = rel_width(p[ok], lo, hi)
    return out


def percent(value: float, why: str, spec: str = ".0f") -> str:
    """A fraction as a percentage in a line of text (``spec``: its format, e.g. ``+.1f``), or ``n/a (why)`` when
    it is not a number: never ``nan%``."""
    v = float(value)
    return f"{100 * v:{spec}}%" if np.isfinite(v) else f"n/a ({why})"


def summary_text(a, level: float | None = None) -> str:
    """One :func:`summarize` row as text: n, median / p90 APE, bias, interval coverage and width (``level``: the
    interval's nominal level); a figure that does not exist says why."""
    none = "no requests to compare" if not a["n"] else None
    no_pi = none or "no prediction intervals"
    text = (f"n={a['n']:3d} median APE {percent(a['median_ape'], none, '.1f')} p90 {percent(a['p90_ape'], none, '.1f')} "
            f"bias {percent(a['bias'], none, '+.1f')} coverage {percent(a['coverage'], no_pi)}")
    if level is not None:
        text += f" (median {100 * level:g}% interval width {percent(a['pi_rel_width'], no_pi)} of the prediction)"
    return text


def summarize_frame(df: pd.DataFrame, pred: str, meas: str, low: str | None = None, high: str | None = None,
                    by: list[str] | None = None) -> pd.DataFrame:
    """:func:`summarize` over all rows and, with ``by``, per group (first row: ``all``)."""
    def one(d: pd.DataFrame) -> dict:
        return summarize(d[pred], d[meas], d[low] if low else None, d[high] if high else None)

    rows = [{"group": "all", **one(df)}]
    if by:
        for key, d in df.groupby(by, sort=True, dropna=False):
            key = key if isinstance(key, tuple) else (key,)
            rows.append({"group": " ".join(f"{k}={v}" for k, v in zip(by, key)), **one(d)})
    return pd.DataFrame(rows)
