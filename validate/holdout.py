"""Held-out discipline: which runs are predicted, and by a profile fitted on which runs.

Rules (``--holdout``):

- ``profile`` (default): predict every input run the profile was *not* fitted on
  (``fit.runs`` of the profile); an error if none is left.
- ``runs:SPEC`` (``runs:4-7``, ``runs:a,b``): predict these runs; each must be outside ``fit.runs``.
- ``config:KEY=VALUE`` (``config:threshold=9``, ``config:system=specdecode``): predict the runs
  whose configuration matches; each must be outside ``fit.runs``.
- ``loro``: leave one run out: for every input run, refit the cost profile (same hardware,
  models and priors as ``--profile``) on all the other input runs and predict that run.

In-sample error is never reported as validation: every fold records its fit and test runs.
"""

from __future__ import annotations

from dataclasses import dataclass

from calibrate.fit_cost import MeasuredSet, Setup, build_profile, fit_cost, parse_run_rule
from simulator.cost_model import CostProfile, prior_profile
from simulator.errors import InputError


@dataclass
class Fold:
    name: str
    fit_runs: list[str]
    test_runs: list[str]
    profile: CostProfile


def _profile_runs(profile: CostProfile) -> list[str]:
    return [str(r) for r in (profile.fit or {}).get("runs", [])]


def _disjoint(test: set[str], fit_runs: list[str], rule: str) -> None:
    overlap = sorted(test & set(fit_runs))
    if overlap:
        raise InputError(None, "--holdout", f"{rule}: run(s) {', '.join(overlap)} were used to fit the profile; "
                                            "in-sample error is not validation")


def make_folds(ms: MeasuredSet, profile: CostProfile, setup: Setup, rule: str | None) -> list[Fold]:
    known = ms.run_keys
    fit_runs = _profile_runs(profile)
    rule = rule or "profile"
    if rule == "profile":
        test = [k for k in known if k not in set(fit_runs)]
        if not test:
            raise InputError(None, "--holdout", "every input run was used to fit the profile; give held-out runs "
                                                "(or --holdout loro)")
        return [Fold("held-out", fit_runs, test, profile)]
    if rule.startswith("runs:"):
        test = parse_run_rule(rule[5:], known)
        _disjoint(test, fit_runs, rule)
        return [Fold(rule, fit_runs, [k for k in known if k in test], profile)]
    if rule.startswith("config:"):
        key, _, value = rule[7:].partition("=")
        if key not in ms.requests.columns or not value:
            raise InputError(None, "--holdout", "expected config:KEY=VALUE with KEY one of system, threshold, gamma, config")
        col = ms.requests[key].astype(str).str.replace(r"\.0$", "", regex=True)
        test = set(ms.requests.loc[col == value, "run_key"])
        if not test:
            raise InputError(None, "--holdout", f"no run has {key}={value}")
        _disjoint(test, fit_runs, rule)
        return [Fold(rule, fit_runs, [k for k in known if k in test], profile)]
    if rule == "loro":
        if len(known) < 2:
            raise InputError(None, "--holdout", "loro needs at least 2 runs")
        folds = []
        for k in known:
            train = [x for x in known if x != k]
            sub = ms.select_runs(set(train))
            # the datasheet prior, not --profile's values: those may have seen run k
            f = fit_cost(sub.calls, setup, prior=prior_profile(setup.hardware, profile.engine))
            p = build_profile(f, setup, name=f"{profile.name}-loro-{k}", engine=profile.engine, inputs=ms.inputs,
                              runs=train, hardware_note=(profile.fit or {}).get("hardware_note", ""),
                              date=(profile.fit or {}).get("date"), command=f"leave-one-run-out fold {k}")
            folds.append(Fold(f"loro-{k}", train, [k], p))
        return folds
    raise InputError(None, "--holdout", f"unknown rule {rule!r}; expected profile, runs:SPEC, config:KEY=VALUE or loro")
