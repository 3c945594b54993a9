"""Held-out discipline: which runs (or requests) are predicted, and by a profile fitted on which.

Rules (``--holdout``):

- ``profile`` (default): predict every input run the profile was *not* fitted on
  (``fit.runs`` of the profile); an error if none is left.
- ``runs:SPEC`` (``runs:4-7``, ``runs:a,b``): predict these runs; each must be outside ``fit.runs``.
- ``config:KEY=VALUE`` (``config:threshold=9``, ``config:system=specdecode``): predict the runs
  whose configuration matches; each must be outside ``fit.runs``.
- ``loro``: leave one run out: for every input run, refit the cost profile (same hardware,
  models and priors as ``--profile``) on all the other input runs and predict that run.
- ``batches:A/B[/...]`` (``batches:0-3/4-7``): leave one batch out: each ``/``-separated group of runs (a
  ``runs:`` spec) is a batch; per batch, refit the cost profile as ``loro`` on every input run outside it and
  predict the batch (with ``--batch-spread``, the intervals are for a new batch: ``validate.batch``).
- ``requests:SPEC``: hold out *requests*, not runs. ``requests:odd`` / ``requests:even`` predict
  the requests at odd / even index (0-based position in its run's request order) of every run
  and fit on the others; ``requests:kfold=K[,seed=S]`` splits all (run, request) pairs into K
  folds, stratified per run (each run's requests are shuffled with ``numpy.random.default_rng(S)``,
  default S = 0, and dealt round-robin over the folds, continuing the deal from run to run, so
  every run's requests spread evenly over the folds and the fold sizes differ by at most one) and
  predicts each fold from a fit on the other K-1. Per fold the cost profile is refitted from the
  datasheet prior (as ``loro``) on the fit requests' calls of all runs. The SpecReason traces
  hold one request per run, so there ``requests:kfold=K`` is K-fold over runs and
  ``requests:odd|even`` is an error (the other parity would be empty).

In-sample error is never reported as validation: every fold records its fit and test runs and
(run, request) keys, and :func:`check_out_of_sample` refuses a fold whose test set meets its fit
set.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrate.fit.fit_cost import build_profile, fit_cost, loro_run_offsets, run_hashes_of
from simulator.cost.setup import Setup
from calibrate.fit.measured import MeasuredSet, parse_run_rule, resolve_run_names, suffix_match as _suffix_match
from simulator.cost.cost_profile import CostProfile, prior_profile
from simulator.errors import InputError

RequestKey = tuple[str, str]  # (run key, request id as in MeasuredSet.requests)


@dataclass
class Fold:
    name: str
    fit_runs: list[str]
    test_runs: list[str]
    profile: CostProfile
    unit: str = "runs"                                # "runs" or "requests": what is held out
    fit_requests: list[RequestKey] | None = None       # None: the given profile's fit runs, not among the inputs
    test_requests: list[RequestKey] | None = None


def _profile_runs(profile: CostProfile) -> list[str]:
    return [str(r) for r in (profile.fit or {}).get("runs", [])]


def _run_identity(path: str | Path) -> tuple | None:
    """(created_at, command) of a run directory's run.json; None where there is none to read."""
    try:
        meta = json.loads((Path(path) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return (meta.get("created_at"), meta.get("command")) if isinstance(meta, dict) else None


def _is_recorded_run(key: str, recorded: str, inputs: list[str]) -> bool:
    """Whether input run ``key`` is the profile's fit run ``recorded`` (``key`` already matches it by name). A
    run recorded by its folder name alone (``specdecode-g4``) names the one recorded input path ending in it; an
    input elsewhere with the same folder name is that run only if its run.json says so (same creation time and
    command: a copy). Where the recorded directory cannot be read, a name match counts (never predict a run the
    profile may have been fitted on)."""
    full = [p for p in inputs if p == recorded or p.endswith("/" + recorded)]
    if len(full) != 1 or _suffix_match(full[0], key):
        return True
    theirs = _run_identity(full[0])
    return theirs is None or _run_identity(key) == theirs


def profile_fit_keys(ms: MeasuredSet, profile: CostProfile) -> tuple[list[str], list[str]]:
    """(the profile's fit runs, each as the input run key it names where it is among the inputs --
    also when the profile recorded a shorter or longer path, ``calibrate.fit.fit_cost.resolve_run_names`` --
    else as recorded; the ones among the inputs). A recorded run matching several inputs is an error.
    A run recorded by folder name only is matched to its recorded input path (``_is_recorded_run``)."""
    inputs = [str(p).strip().rstrip("/") for p in (profile.fit or {}).get("inputs", []) or []]
    names = _profile_runs(profile)
    known = [k for k in ms.run_keys if all(_is_recorded_run(k, n, inputs) for n in names if _suffix_match(n, k))]
    res = resolve_run_names(names, known, "--profile fit.runs")
    keys = [k or n for n, k in res.items()]
    return keys, [k for k in res.values() if k is not None]


def _same_content_as_fit_runs(ms: MeasuredSet, profile: CostProfile, fit_runs: list[str]) -> None:
    """Run identity is content (``calibrate.fit.measured.run_content_hash``), not name: an input run whose requests and
    steps are those of one of the profile's fit runs, under another name or in another file, is that fit run. Where
    its name does not say so, refused (InputError, exit 2): validating it would report in-sample error as held-out."""
    recorded = {h: k for k, h in ((profile.fit or {}).get("run_hashes") or {}).items()}
    if not recorded or "run_hash" not in ms.requests.columns:
        return
    for key, h in run_hashes_of(ms).items():
        if h in recorded and key not in set(fit_runs):
            raise InputError(None, "inputs", f"run {key} is the profile's fit run {recorded[h]} under another name "
                                             "(same requests and steps); in-sample error is not validation: leave it "
                                             "out or give it its recorded name")


def _disjoint(test: set[str], fit_runs: list[str], rule: str) -> None:
    overlap = sorted(test & set(fit_runs))
    if overlap:
        raise InputError(None, "--holdout", f"{rule}: run(s) {', '.join(overlap)} were used to fit the profile; "
                                            "in-sample error is not validation")


def request_keys(ms: MeasuredSet, runs: set[str] | None = None) -> list[RequestKey]:
    """(run key, request id) of every request of ``ms`` (of ``runs`` only, when given), in input order."""
    r = ms.requests if runs is None else ms.requests[ms.requests["run_key"].isin(runs)]
    return list(zip(r["run_key"].astype(str), r["request_id"].astype(str)))


def select_requests(ms: MeasuredSet, keys) -> MeasuredSet:
    """The measured set restricted to the requests ``keys`` ((run key, request id) pairs)."""
    ids = {str(rid) for _, rid in keys}
    c = ms.calls[ms.calls["request_id"].astype(str).isin(ids)].reset_index(drop=True)
    r = ms.requests[ms.requests["request_id"].astype(str).isin(ids)].reset_index(drop=True)
    s = None
    if ms.steps is not None:  # SpecReason traces: one request per run, steps keyed by run id
        s = ms.steps[ms.steps["run_id"].astype(str).isin(set(r["run_id"].astype(str)))].reset_index(drop=True)
    return MeasuredSet(c, r, ms.inputs, ms.kind, ms.hint, s, ms.trace)


def fold_test_set(ms: MeasuredSet, fold: Fold) -> MeasuredSet:
    """What ``fold`` predicts: its test requests (request folds) or its test runs."""
    if fold.unit == "requests":
        return select_requests(ms, fold.test_requests or [])
    return ms.select_runs(set(fold.test_runs))


def check_out_of_sample(fold: Fold) -> None:
    """Refuse (InputError) a fold whose test runs/requests were used to fit it: in-sample is not validation."""
    if fold.unit == "requests":
        if fold.fit_requests is None or fold.test_requests is None:
            raise InputError(None, "--holdout", f"fold {fold.name}: a request fold must record its fit and test requests")
        overlap = sorted(set(fold.test_requests) & set(fold.fit_requests))
        what = [f"{k}:{r}" for k, r in overlap]
    else:
        overlap = sorted(set(fold.test_runs) & set(fold.fit_runs))
        if not overlap and fold.fit_requests is not None and fold.test_requests is not None:
            overlap = sorted(f"{k}:{r}" for k, r in set(fold.test_requests) & set(fold.fit_requests))
        what = list(overlap)
    if overlap:
        raise InputError(None, "--holdout", f"fold {fold.name}: {', '.join(what[:5])}{' ...' if len(what) > 5 else ''} "
                                            "used to fit the profile that predicts it; in-sample error is not validation")
    if not (fold.test_requests if fold.unit == "requests" else fold.test_runs):
        raise InputError(None, "--holdout", f"fold {fold.name} predicts nothing")


def _refit(ms: MeasuredSet, profile: CostProfile, setup: Setup, name: str, runs: list[str], command: str) -> CostProfile:
    """The cost profile refitted on ``ms``'s calls from the datasheet prior (not from --profile's values:
    those may have seen the held-out data)."""
    prior = prior_profile(setup.hardware, profile.engine)
    f = fit_cost(ms.calls, setup, prior=prior)
    return build_profile(f, setup, name=name, engine=profile.engine, inputs=ms.inputs, runs=runs,
                         hardware_note=(profile.fit or {}).get("hardware_note", ""),
                         date=(profile.fit or {}).get("date"), command=command,
                         loro=loro_run_offsets(ms.calls, setup, prior, start=f.values), run_hashes=run_hashes_of(ms))


REQUESTS_USAGE = "expected requests:odd, requests:even or requests:kfold=K[,seed=S] (K >= 2 integer, S integer)"


def parse_requests_spec(spec: str) -> tuple[str, int, int]:
    """``odd`` | ``even`` | ``kfold=K[,seed=S]`` -> (kind, K, seed); InputError otherwise."""
    spec = spec.strip()
    if spec in ("odd", "even"):
        return spec, 2, 0
    parts = [p.strip() for p in spec.split(",")]
    kv: dict[str, str] = {}
    for p in parts:
        k, eq, v = p.partition("=")
        if not eq or k.strip() not in ("kfold", "seed") or k.strip() in kv:
            raise InputError(None, "--holdout", f"requests:{spec}: {REQUESTS_USAGE}")
        kv[k.strip()] = v.strip()
    if "kfold" not in kv:
        raise InputError(None, "--holdout", f"requests:{spec}: {REQUESTS_USAGE}")
    try:
        k, seed = int(kv["kfold"]), int(kv.get("seed", "0"))
    except ValueError:
        raise InputError(None, "--holdout", f"requests:{spec}: {REQUESTS_USAGE}") from None
    if k < 2 or seed < 0:
        raise InputError(None, "--holdout", f"requests:{spec}: {REQUESTS_USAGE}")
    return "kfold", k, seed


def assign_request_folds(keys: list[RequestKey], k: int, seed: int = 0) -> dict[RequestKey, int]:
    """Fold (0..k-1) of every (run, request) key: per run (in order of first appearance) the run's
    requests are shuffled with one ``default_rng(seed)`` and dealt round-robin, the deal continuing
    from run to run. Every run's requests spread over the folds evenly (counts differ by <= 1) and
    so do the fold sizes."""
    rng = np.random.default_rng(seed)
    by_run: dict[str, list[RequestKey]] = {}
    for key in keys:
        by_run.setdefault(key[0], []).append(key)
    out: dict[RequestKey, int] = {}
    deal = 0
    for run, ks in by_run.items():
        for j, i in enumerate(rng.permutation(len(ks))):
            out[ks[i]] = (deal + j) % k
        deal += len(ks)
    return out


def request_splits(ms: MeasuredSet, spec: str) -> list[tuple[str, list[RequestKey], list[RequestKey]]]:
    """(fold name, fit keys, test keys) per fold of ``requests:SPEC``; fit and test partition the
    input requests in every fold."""
    kind, k, seed = parse_requests_spec(spec)
    keys = request_keys(ms)
    if kind in ("odd", "even"):
        pos: dict[str, int] = {}
        test, fit = [], []
        for key in keys:
            i = pos.get(key[0], 0)
            pos[key[0]] = i + 1
            (test if (i % 2 == 1) == (kind == "odd") else fit).append(key)
        if not test or not fit:
            one = all(n == 1 for n in pos.values())
            why = ("every run holds a single request (the SpecReason traces: one request per run); "
                   "use requests:kfold=K (K-fold over runs there) or loro" if one else
                   f"no request left to {'predict' if not test else 'fit on'}")
            raise InputError(None, "--holdout", f"requests:{kind}: {why}")
        return [(f"requests-{kind}", fit, test)]
    if k > len(keys):
        raise InputError(None, "--holdout", f"requests:{spec}: {k} folds but only {len(keys)} requests")
    fold_of = assign_request_folds(keys, k, seed)
    return [(f"kfold{k}-{i}", [x for x in keys if fold_of[x] != i], [x for x in keys if fold_of[x] == i])
            for i in range(k)]


def batch_groups(rule: str, known: list[str]) -> list[set[str]]:
    """The run keys of each ``/``-separated batch of ``batches:A/B[/...]``: at least 2, disjoint (InputError)."""
    groups = [parse_run_rule(g, known) for g in rule[len("batches:"):].split("/") if g.strip()]
    if len(groups) < 2:
        raise InputError(None, "--holdout", f"{rule}: expected at least 2 batches, e.g. batches:0-3/4-7")
    seen: set[str] = set()
    for g in groups:
        if g & seen:
            raise InputError(None, "--holdout", f"{rule}: run(s) {', '.join(sorted(g & seen))} in two batches")
        seen |= g
    return groups


def _runs_of(keys: list[RequestKey]) -> list[str]:
    return list(dict.fromkeys(r for r, _ in keys))


def make_folds(ms: MeasuredSet, profile: CostProfile, setup: Setup, rule: str | None) -> list[Fold]:
    folds = _make_folds(ms, profile, setup, rule)
    for f in folds:
        check_out_of_sample(f)
    return folds


def _config_test(ms: MeasuredSet, rule: str) -> set:
    """The runs ``config:KEY=VALUE`` names."""
    key, _, value = rule[7:].partition("=")
    if key not in ms.requests.columns or not value:
        raise InputError(None, "--holdout", "expected config:KEY=VALUE with KEY one of system, threshold, gamma, config")
    col = ms.requests[key].astype(str).str.replace(r"\.0$", "", regex=True)
    test = set(ms.requests.loc[col == value, "run_key"])
    if not test:
        raise InputError(None, "--holdout", f"no run has {key}={value}")
    return test


def _loro_folds(ms: MeasuredSet, profile: CostProfile, setup: Setup, known: list[str]) -> list[Fold]:
    """Leave one run out: the profile refitted on the other runs."""
    if len(known) < 2:
        raise InputError(None, "--holdout", "loro needs at least 2 runs")
    folds = []
    for k in known:
        train = [x for x in known if x != k]
        p = _refit(ms.select_runs(set(train)), profile, setup, f"{profile.name}-loro-{k}", train,
                   f"leave-one-run-out fold {k}")
        folds.append(Fold(f"loro-{k}", train, [k], p, fit_requests=request_keys(ms, set(train)),
                          test_requests=request_keys(ms, {k})))
    return folds


def _batch_folds(ms: MeasuredSet, profile: CostProfile, setup: Setup, rule: str, known: list[str]) -> list[Fold]:
    """Leave one batch of runs out: the profile refitted on the other batches."""
    folds = []
    for g in batch_groups(rule, known):
        test = [k for k in known if k in g]
        train = [k for k in known if k not in g]
        label = f"{test[0]}..{test[-1]}" if len(test) > 1 else test[0]
        p = _refit(ms.select_runs(set(train)), profile, setup, f"{profile.name}-lobo", train,
                   f"leave-one-batch-out fold {label}")
        folds.append(Fold(f"lobo-{label}", train, test, p, fit_requests=request_keys(ms, set(train)),
                          test_requests=request_keys(ms, set(test))))
    return folds


def _request_folds(ms: MeasuredSet, profile: CostProfile, setup: Setup, rule: str) -> list[Fold]:
    """Requests split within the runs: the profile refitted on each fold's fit requests."""
    folds = []
    for name, fit, test in request_splits(ms, rule[len("requests:"):]):
        fit_set = set(fit)
        assert not fit_set & set(test), "request folds must not overlap"  # also checked by check_out_of_sample
        p = _refit(select_requests(ms, fit), profile, setup, f"{profile.name}-{name}", _runs_of(fit),
                   f"{rule} fold {name} ({len(fit)} fit requests)")
        folds.append(Fold(name, _runs_of(fit), _runs_of(test), p, unit="requests", fit_requests=fit,
                          test_requests=test))
    return folds


def _make_folds(ms: MeasuredSet, profile: CostProfile, setup: Setup, rule: str | None) -> list[Fold]:
    known = ms.run_keys
    fit_runs, fit_in_inputs = profile_fit_keys(ms, profile)
    rule = rule or "profile"
    _same_content_as_fit_runs(ms, profile, fit_runs)

    def given(name: str, test: list[str]) -> Fold:
        return Fold(name, fit_runs, test, profile, test_requests=request_keys(ms, set(test)),
                    fit_requests=request_keys(ms, set(fit_in_inputs)) if fit_in_inputs else None)

    if rule == "profile":
        test = [k for k in known if k not in set(fit_runs)]
        if not test:
            raise InputError(None, "--holdout", "every input run was used to fit the profile; give held-out runs "
                                                "(or --holdout loro / requests:kfold=K)")
        return [given("held-out", test)]
    if rule.startswith("runs:") or rule.startswith("config:"):
        test = parse_run_rule(rule[5:], known) if rule.startswith("runs:") else _config_test(ms, rule)
        _disjoint(test, fit_runs, rule)
        return [given(rule, [k for k in known if k in test])]
    if rule == "loro":
        return _loro_folds(ms, profile, setup, known)
    if rule.startswith("batches:"):
        return _batch_folds(ms, profile, setup, rule, known)
    if rule.startswith("requests:"):
        return _request_folds(ms, profile, setup, rule)
    raise InputError(None, "--holdout", f"unknown rule {rule!r}; expected profile, runs:SPEC, config:KEY=VALUE, loro, "
                                        "batches:A/B or requests:odd|even|kfold=K[,seed=S]")
