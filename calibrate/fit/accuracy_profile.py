"""Build an accuracy profile from data (``python -m calibrate.fit.accuracy_profile --help``).

Two sources: the SpecReason runs' per-problem aggregates (``aggregates``: a JSON file, read by
:func:`simulator.accuracy.from_aggregates`) or our runner's run directories (``runs``: read here with
:func:`calibrate.fit.fit_workload_runs.read_run`, their graded answers handed to
:func:`simulator.accuracy.from_graded_runs` as plain :class:`~simulator.accuracy.GradedRun` records, so the
simulator never reads run directories itself). The model and the profile format: ``simulator/accuracy.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from simulator.accuracy import (PROFILES_DIR, AccuracyProfile, GradedRun, from_aggregates, from_graded_runs,
                                profile_yaml)
from simulator.errors import InputError


def graded_run(path: str | Path) -> GradedRun:
    """One run directory's graded answers (requests.jsonl ``correct``; requests without a grade are left out)."""
    from calibrate.fit.fit_workload_runs import read_run

    r = read_run(path)
    graded = r.requests[r.requests["correct"].notna()] if "correct" in r.requests else r.requests.iloc[:0]
    return GradedRun(source=str(path), system=r.system, meta=r.meta,
                     correct=int(graded["correct"].astype(bool).sum()), graded=int(len(graded)))


def from_runs(paths: list[str | Path], workload) -> AccuracyProfile:
    """The runner's graded answers of runs at the workload's budget (:func:`simulator.accuracy.from_graded_runs`)."""
    return from_graded_runs([graded_run(p) for p in paths], workload)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="python -m calibrate.fit.accuracy_profile", description="Build an accuracy profile from data.")
    ap.add_argument("source", choices=["aggregates", "runs"])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--workload", required=True, help="workload profile name or path (its models, budget, problems)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        from simulator.workload import load_workload

        wp = a.workload if a.workload.endswith(".yaml") else PROFILES_DIR / f"workload_{a.workload}.yaml"
        w = load_workload(wp)
        prof = from_aggregates(a.inputs[0], w) if a.source == "aggregates" else from_runs(a.inputs, w)
        cmd = ".venv/bin/python -m calibrate.fit.accuracy_profile " + " ".join(argv if argv is not None else sys.argv[1:])
        Path(a.out).write_text(profile_yaml(prof, cmd), encoding="utf-8")
    except InputError as e:
        print(f"error: {' '.join(e.one_line().split())}", file=sys.stderr)
        return 2
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
