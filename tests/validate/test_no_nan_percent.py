"""A figure that does not exist is printed as "n/a (why)", never "nan%" (validate.metrics.percent / summary_text)."""

from __future__ import annotations

import numpy as np

from validate.metrics import percent, summarize, summary_text


def test_percent():
    assert percent(0.123, "why", ".1f") == "12.3%"
    assert percent(-0.05, "why", "+.1f") == "-5.0%"
    assert percent(float("nan"), "no prediction intervals") == "n/a (no prediction intervals)"


def test_summary_without_intervals_says_why():
    a = summarize([1.0, 2.0], [1.1, 2.2])  # no interval given
    text = summary_text(a, 0.9)
    assert "nan" not in text
    assert "coverage n/a (no prediction intervals)" in text and "width n/a (no prediction intervals)" in text
    assert "median APE 9.1%" in text


def test_summary_with_intervals_and_without_requests():
    a = summarize([1.0, 2.0], [1.1, 2.2], [0.9, 1.5], [1.2, 2.1])
    assert "coverage 50%" in summary_text(a)
    empty = summarize(np.array([]), np.array([]))
    text = summary_text(empty, 0.9)
    assert "nan" not in text and "median APE n/a (no requests to compare)" in text
