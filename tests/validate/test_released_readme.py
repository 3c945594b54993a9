"""The released-table report's README quotes the figures its own files hold.

``reports/serving-released/README.md`` is written by hand around the command's output (the held-out summaries and the
every-run fit); its headline figures must be the ones in ``summary-<by>-by-<group>.csv`` and ``fits-all.json`` of the
same folder, rounded as quoted, so a rerun that moves them fails here until the README is updated."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from calibrate.fit.host_fit import FIGS
from simulator.paths import REPO

FOLDER = REPO / "reports" / "serving-released"
GPUS = {"A100": "a100-80gb", "H100 PCIe": "h100-pcie", "H100 SXM": "h100-sxm", "H200": "h200"}
NUM = r"([\d.]+)"
FOUR = rf"{NUM} / {NUM} / {NUM} / {NUM}%"


def _text() -> str:
    return re.sub(r"\s+", " ", (FOLDER / "README.md").read_text())


def _medians(by: str, group: str) -> dict[str, list[float]]:
    d = pd.read_csv(FOLDER / f"summary-{by}-by-{group}.csv", dtype={group: str})
    return {row[group]: [round(row[f"{f} median |err| %"], 1) for f in FIGS] for _, row in d.iterrows()}


@pytest.fixture(scope="module")
def text() -> str:
    if not (FOLDER / "README.md").is_file():
        pytest.skip("no released-table report")
    return _text()


def test_headline_errors_are_the_summaries(text):
    head = re.search(rf"Held out by GPU \((\d+) runs\): median \|error\| TPOT {NUM}%, ITL \(median\) {NUM}%, TTFT "
                     rf"{NUM}%, output throughput {NUM}% \((.*?)\)\. Held out by version: {FOUR}", text)
    assert head, "README: the 'Held out by GPU (N runs): ...' headline is missing or reworded"
    by_gpu, by_version = _medians("gpu", "gpu"), _medians("version", "gpu")
    runs = int(pd.read_csv(FOLDER / "summary-gpu-by-gpu.csv").set_index("gpu").loc["all", "runs"])
    assert int(head.group(1)) == runs
    assert [float(x) for x in head.group(2, 3, 4, 5)] == by_gpu["all"]
    assert [float(x) for x in head.group(7, 8, 9, 10)] == by_version["all"]
    per_gpu = dict(re.findall(r"(A100|H100 PCIe|H100 SXM|H200) ((?:[\d.]+ / ){3}[\d.]+)%", head.group(6)))
    assert set(per_gpu) == set(GPUS)
    for name, quoted in per_gpu.items():
        assert [float(x) for x in quoted.split(" / ")] == by_gpu[GPUS[name]], name


def test_every_run_fit_is_fits_all(text):
    fit = json.loads((FOLDER / "fits-all.json").read_text())["0.11"]
    part = text[text.index("Fitted on every run by this run"):]
    quoted = {"seq_overhead_s": (rf"t_seq {NUM} us", 1e-6), "tp_step_overhead_s": (rf"t_tp {NUM} ms", 1e-3),
              "async_overlap": (rf"\bo {NUM},", 1.0), "front_end_serial_s": (rf"t_fe {NUM} ms", 1e-3),
              "call_latency_s": (rf"t_lat {NUM} ms", 1e-3), "rms_log": (rf"rms log error {NUM}", 1.0),
              "front_end_first_share": (rf"\bs {NUM},", 1.0)}
    for term, (pattern, unit) in quoted.items():
        m = re.search(pattern, part)
        assert m, f"README: {term} ({pattern}) not quoted after 'Fitted on every run by this run'"
        digits = len(m.group(1).split(".")[1]) if "." in m.group(1) else 0
        assert float(m.group(1)) == round(fit[term] / unit, digits), term


def test_the_project_readme_and_results_quote_the_same_run(text):
    """The project README's results row and docs/results.md quote the held-out medians (and the README the p90s) of
    the committed report."""
    d = pd.read_csv(FOLDER / "summary-gpu-by-gpu.csv").set_index("gpu").loc["all"]
    v = pd.read_csv(FOLDER / "summary-version-by-version.csv", dtype={"version": str}).set_index("version").loc["all"]
    med = " / ".join(f"{d[f'{f} median |err| %']:.1f}" for f in FIGS)
    p90 = " / ".join(f"{d[f'{f} p90 |err| %']:.1f}" for f in FIGS)
    ver = " / ".join(f"{v[f'{f} median |err| %']:.1f}" for f in FIGS)
    readme = re.sub(r"\s+", " ", (REPO / "README.md").read_text())
    want = f"{int(d['runs'])} runs | {med.replace(' / ', '% / ')}%, p90 {p90}% (by version: {ver}%)"
    assert want in readme, f"README.md's released-tables row should read {want!r}"
    results = re.sub(r"\s+", " ", (REPO / "docs" / "results.md").read_text())
    assert f"**{med}%**" in results and f"**{ver}%**" in results, f"docs/results.md should quote {med}% and {ver}%"
