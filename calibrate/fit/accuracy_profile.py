"""Build an accuracy profile from data (``specsim fit accuracy --help``).

Two sources: the SpecReason runs' per-problem aggregates (``aggregates``: a JSON file, read by
:func:`simulator.inputs.accuracy.from_aggregates`) or our runner's run directories (``runs``: read here with
:func:`calibrate.fit.fit_workload_runs.read_run`, their graded answers handed to
:func:`simulator.inputs.accuracy.from_graded_runs` as plain :class:`~simulator.inputs.accuracy.GradedRun` records, so the
simulator never reads run directories itself). The model and the profile format: ``simulator/inputs/accuracy.py``.
"""

from __future__ import annotations

from pathlib import Path

from simulator.inputs.accuracy import PROFILES_DIR, AccuracyProfile, GradedRun, from_aggregates, from_graded_runs
from simulator.errors import InputError


def graded_run(path: str | Path) -> GradedRun:
    """One run directory's graded answers (requests.jsonl ``correct``; requests without a grade are left out)."""
    from calibrate.fit.fit_workload_runs import read_run

    r = read_run(path)
    graded = r.requests[r.requests["correct"].notna()] if "correct" in r.requests else r.requests.iloc[:0]
    return GradedRun(source=str(path), system=r.system, meta=r.meta,
                     correct=int(graded["correct"].astype(bool).sum()), graded=int(len(graded)))


def from_runs(paths: list[str | Path], workload) -> AccuracyProfile:
    """The runner's graded answers of runs at the workload's budget (:func:`simulator.inputs.accuracy.from_graded_runs`)."""
    return from_graded_runs([graded_run(p) for p in paths], workload)



def build(source: str, inputs: list[str | Path], workload: str) -> AccuracyProfile:
    """The profile from ``aggregates`` (one JSON file) or ``runs`` (run directories) for ``workload`` (a profile name,
    e.g. ``aime_qwq32b_r1-1.5b``, or a YAML path): its models, budget and problems."""
    from simulator.inputs.workload import load_workload

    if source not in ("aggregates", "runs"):
        raise InputError(None, "SOURCE", f"expected aggregates or runs (got {source!r})")
    if source == "aggregates" and len(inputs) != 1:
        raise InputError(None, "INPUTS", f"aggregates: expected one JSON file (got {len(inputs)})")
    w = load_workload(workload if workload.endswith(".yaml") else PROFILES_DIR / f"workload_{workload}.yaml")
    return from_aggregates(inputs[0], w) if source == "aggregates" else from_runs(inputs, w)
