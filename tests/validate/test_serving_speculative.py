"""Speculative decoding under load: the serve-run driver's speculative fields (test double), their loading,
measured and fitted acceptance, trace replay through the serving simulator, and bad input (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.contracts.serving_records import ServeRequest, StepReport
from calibrate.measure.serving_run import ClosedLoop, drive
from tests.calibrate.test_serving_run import FakeClock as Clock
from tests.conftest import examples, error_lines

ROOT = Path(__file__).resolve().parents[2]
SPECSIM = [sys.executable, "-m", "specsim_cli"]
PROFILE = "simulator/profiles/cost_cpu-epyc-vllm032.yaml"


class SpecDouble:
    """A speculative continuous-batching engine double: the prefill step produces the first token; every later
    step verifies ``gamma`` drafts per request, accepting each with probability ``alpha`` (i.i.d., seeded) up to
    the first rejection, and gains accepted + 1 tokens (capped at max_tokens). Time: 2 ms + 0.1 ms per token."""

    def __init__(self, clock, gamma: int, alpha: float, seed: int = 0):
        self.clock, self.gamma, self.alpha = clock, gamma, alpha
        self.rng = np.random.default_rng(seed)
        self.held: dict[int, list] = {}

    def add(self, req: ServeRequest) -> None:
        self.held[req.request_id] = [req, 0, 0]

    def has_unfinished(self) -> bool:
        return bool(self.held)

    def step(self) -> StepReport:
        rids, new, ctx, spec, outs = [], [], [], [], []
        for rid, s in list(self.held.items()):
            req, comp, out = s
            if comp == 0:
                n, k, gain = len(req.prompt_ids), 0, 1
            else:
                k = self.gamma
                acc = 0
                while acc < k and self.rng.random() < self.alpha:
                    acc += 1
                n, gain = 1 + k, min(acc + 1, req.max_tokens - out)
            rids.append(rid), new.append(n), ctx.append(comp), spec.append(k)
            s[1], s[2] = comp + (n if comp == 0 else gain), out + gain
            done = s[2] >= req.max_tokens
            outs.append((rid, s[2], done, 0))
            if done:
                del self.held[rid]
        self.clock.t += 0.002 + 1e-4 * sum(new)
        return StepReport(rids, new, ctx, 0, outs, spec_tokens=spec)


def _reqs(n: int, seed: int = 0, lo: int = 20, hi: int = 60) -> list[ServeRequest]:
    rng = np.random.default_rng(seed)
    return [ServeRequest(i, f"p{i}", tuple(range(int(rng.integers(30, 60)))), int(rng.integers(lo, hi))) for i in range(n)]


def _manifest(users: int, gamma: int, n: int) -> dict:
    return {"schema_version": 1, "kind": "serve", "created_at": "2026-01-01T00:00:00+00:00", "engine": "fake",
            "engine_version": "0", "hardware": {}, "models": {"base": {}, "draft": {}}, "dtype": "float32",
            "tensor_parallel": 1, "system": "specdecode" if gamma else "vanilla-base", "gamma": gamma, "threshold": 0.0,
            "first_n": 0, "budget_tokens": 64, "score_mode": "", "sampling": {}, "seed": 0, "dataset": "test",
            "num_requests": n, "command": "test",
            "options": {"arrivals": {"mode": "closed", "users": users}, "label": f"closed-{users}"}}


def _spec_run_dir(path: Path, users: int, gamma: int = 2, alpha: float = 0.6, n: int = 8, seed: int = 0,
                  drop_spec_fields: bool = False) -> Path:
    from calibrate.measure.run_directory import RunDirectory

    clock = Clock()
    got, steps = drive(SpecDouble(clock, gamma, alpha, seed), _reqs(n, seed), ClosedLoop(users), clock=clock,
                       sleep=clock.sleep)
    rd = RunDirectory.open(path, _manifest(users, gamma, n))
    for s in steps:
        if drop_spec_fields:
            s = {k: v for k, v in s.items() if k not in ("spec_tokens", "emitted")}
        rd.write("serve_step", s)
    for r in got:
        rd.write("serve_request", r)
    rd.close()
    return path


def test_driver_writes_speculative_fields_that_add_up(tmp_path):
    from calibrate.contracts.trace_schema import check_run_dir

    d = check_run_dir(_spec_run_dir(tmp_path / "closed-3", 3, gamma=3))
    reqs = {r["request_id"]: r for r in d["serve_request"]}
    gained = {i: 0 for i in reqs}
    for s in d["serve_step"]:
        assert len(s["spec_tokens"]) == len(s["emitted"]) == len(s["request_ids"])
        for rid, n, k, e in zip(s["request_ids"], s["new_tokens"], s["spec_tokens"], s["emitted"]):
            assert 1 <= e <= k + 1 and (k == 0 or n == k + 1)
            gained[rid] += e
    # every output token is accounted for exactly once (the prefill's first token included)
    assert all(gained[i] == reqs[i]["output_tokens"] == reqs[i]["max_tokens"] for i in reqs)
    assert max(s["running"] for s in d["serve_step"]) == 3


def test_plain_records_stay_valid_without_speculative_fields(tmp_path):
    """The speculative fields are optional: a plain run's records (and every record written before them) check."""
    from calibrate.contracts.trace_schema import SERVE_STEP_FIELDS, check_record

    clock = Clock()
    _got, steps = drive(SpecDouble(clock, 2, 0.5), _reqs(2), ClosedLoop(1), clock=clock, sleep=clock.sleep)
    rec = {k: v for k, v in steps[0].items() if k not in ("spec_tokens", "emitted")}
    check_record(rec, SERVE_STEP_FIELDS, "x")
    from simulator.errors import InputError

    with pytest.raises(InputError, match="spec_tokens"):
        check_record({**steps[0], "spec_tokens": "three"}, SERVE_STEP_FIELDS, "x")


def test_loader_labels_and_measured_iterations(tmp_path):
    from validate.serving.load import load_run
    from validate.serving.predict import acceptance_from_runs, measured_spec_cum

    r = load_run(_spec_run_dir(tmp_path / "closed-2", 2, gamma=2))
    assert (r.system, r.gamma, r.label, r.level) == ("specdecode-g2", 2, "specdecode-g2/closed-2", "closed-2")
    cum = measured_spec_cum(r)
    for q in r.requests.itertuples():
        c = cum[(q.request_id, 0)]
        assert c[-1] == q.output_tokens - 1 and np.all(np.diff(np.r_[0, c]) >= 1) and np.all(np.diff(np.r_[0, c]) <= 3)
    a = acceptance_from_runs([r])[(2, "")]["a"]
    assert 0 <= a[1] <= a[0] <= 1


def test_fitted_acceptance_recovers_the_double_alpha(tmp_path):
    """i.i.d. acceptance alpha = 0.6 at gamma = 3: a_i within 4 binomial standard errors of alpha^i."""
    from validate.serving.load import load_run
    from validate.serving.predict import acceptance_from_runs

    r = load_run(_spec_run_dir(tmp_path / "closed-4", 4, gamma=3, alpha=0.6, n=40, seed=5))
    fit = acceptance_from_runs([r])[(3, "")]
    n = fit["iterations"]
    for i, a in enumerate(fit["a"], 1):
        p = 0.6 ** i
        # censoring at max_tokens lowers the acceptance of a request's last iteration a little: 4 se + 0.03
        assert abs(a - p) < 4 * np.sqrt(p * (1 - p) / n) + 0.03, (i, a, p, n)


def test_replay_reproduces_measured_acceptance_and_fitted_acceptance_predicts_it(tmp_path):
    from validate.serving import validate_serving

    runs = [_spec_run_dir(tmp_path / "spec" / f"closed-{u}", u, gamma=2, alpha=0.7, n=24, seed=u) for u in (1, 4)]
    v = validate_serving(runs, PROFILE, None, ["specdecode-g2/closed-1"])
    q = v.per_request
    replay = q[q.model == "profile"]
    # replayed verifications: the predicted acceptance length is the measured one, request by request
    assert np.allclose(replay.pred_accept_len, replay.accept_len)
    fitted = q[(q.model == "profile+acceptance-fit") & (q.label == "specdecode-g2/closed-4")]
    assert set(fitted.role) == {"held out"}
    # drawn from the 1-user run's a_i (same alpha): the 4-user run's mean acceptance length within 10%
    assert abs(fitted.pred_accept_len.mean() / fitted.accept_len.mean() - 1) < 0.10
    assert v.headline["speculative"]["model"] == "profile+acceptance-fit"
    assert np.isfinite(v.headline["speculative"]["tpot_median_ape"])
    # the 1-user run named for acceptance is in-sample for that model
    assert set(q[(q.model == "profile+acceptance-fit") & (q.label == "specdecode-g2/closed-1")].role) == {"fit (in-sample)"}


def test_speculative_steps_are_never_step_fit_data(tmp_path):
    from validate.serving import validate_serving

    runs = [_spec_run_dir(tmp_path / "spec" / "closed-2", 2), _spec_run_dir(tmp_path / "plain" / "closed-2", 2, gamma=0)]
    runs.append(_spec_run_dir(tmp_path / "plain" / "closed-1", 1, gamma=0))
    v = validate_serving(runs, PROFILE, ["closed-2"])
    # the level name picked the plain run only; the speculative run at that level stays held out
    assert v.fit["runs"] == [str(runs[1])]
    q = v.per_request[v.per_request.model == "profile+step-fit"]
    assert set(q[q.label == "specdecode-g2/closed-2"].role) == {"held out"}


def _run(args):
    return subprocess.run([*SPECSIM, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_bad_speculative_inputs_exit_2(tmp_path):
    spec = _spec_run_dir(tmp_path / "s" / "closed-2", 2)
    plain = _spec_run_dir(tmp_path / "p" / "closed-2", 2, gamma=0)
    rep = str(tmp_path / "rep")
    # acceptance from runs that hold no speculative run
    r = _run(["validate", "serving", str(plain), "--profile", PROFILE, "--out", rep, "--acceptance-levels", "closed-2"])
    assert r.returncode == 2 and "--acceptance-levels" in r.stderr and "Traceback" not in r.stderr
    for extra, field in ((["--fit-levels", "specdecode-g2/closed-2"], "--fit-levels"),  # speculative steps as fit data
                         (["--acceptance-levels", "closed-9"], "--acceptance-levels")):  # no such level
        r = _run(["validate", "serving", str(spec), str(plain), "--profile", PROFILE, "--out", rep, *extra])
        assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr, (extra, r.stderr)
        assert len(error_lines(r.stderr)) == 1
    # a speculative run recorded without the per-step fields cannot be replayed: one line naming the field
    old = _spec_run_dir(tmp_path / "old" / "closed-2", 2, drop_spec_fields=True)
    r = _run(["validate", "serving", str(old), "--profile", PROFILE, "--out", rep])
    assert r.returncode == 2 and "spec_tokens" in r.stderr and "Traceback" not in r.stderr
    # serve-run: gamma without a draft, and a draft with gamma 0
    r = _run(["measure", "serve-run", "--gamma", "2", "--out", str(tmp_path / "o")])
    assert r.returncode == 2 and "--gamma" in r.stderr and "Traceback" not in r.stderr
    r = _run(["measure", "serve-run", "--draft", str(tmp_path / "nodraft"), "--out", str(tmp_path / "o")])
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert not (tmp_path / "o").exists()


@settings(max_examples=examples(60), deadline=None)
@given(a1=st.floats(0, 1), ratio=st.floats(0, 1), gamma=st.integers(1, 6),
       r=st.lists(st.integers(0, 200), min_size=1, max_size=5), seed=st.integers(0, 2**16))
def test_split_iterations_conserves_tokens(a1, ratio, gamma, r, seed):
    """The sampler's one iteration rule: each segment's iterations produce exactly r tokens, 1..gamma+1 each,
    at increasing offsets starting at 0."""
    from simulator.engines.speculative import iteration_cdf, split_iterations

    a = a1 * ratio ** np.arange(gamma)  # non-increasing a_i in [0, 1]
    seg, g, toks = split_iterations(iteration_cdf(a), np.array(r), np.random.default_rng(seed))
    for k, need in enumerate(r):
        m = seg == k
        assert toks[m].sum() == need
        assert np.all((toks[m] >= 1) & (toks[m] <= gamma + 1))
        if need:
            assert g[m][0] == 0 and np.all(np.diff(g[m]) == toks[m][:-1])


def test_measured_iterations_reconcile_with_the_call_output(tmp_path):
    """A call's replayed iterations produce exactly its tokens after the first: tokens accepted past a stop
    string are cut from the last iteration, unseen ones are filled with one-token iterations (never a call
    that cannot finish); the raw measurement is kept for the acceptance length."""
    from validate.serving.load import load_run
    from validate.serving.predict import measured_spec_cum

    r = load_run(_spec_run_dir(tmp_path / "closed-2", 2, gamma=3, alpha=0.9))
    r.requests.loc[0, "output_tokens"] -= 2  # as if a stop string had dropped 2 accepted tokens
    r.requests.loc[1, "output_tokens"] += 3  # as if 3 tokens had not been seen
    rec, raw = measured_spec_cum(r), measured_spec_cum(r, reconcile=False)
    for q in r.requests.itertuples():
        c = rec[(q.request_id, 0)]
        assert c[-1] == q.output_tokens - 1 and np.all(np.diff(np.r_[0, c]) >= 1)
    assert raw[(0, 0)][-1] == rec[(0, 0)][-1] + 2 and raw[(1, 0)][-1] == rec[(1, 0)][-1] - 3
    assert len(rec[(1, 0)]) == len(raw[(1, 0)]) + 3


def test_runs_of_different_drafts_never_pool(tmp_path):
    """Acceptance belongs to a (gamma, draft) pair: two drafts at the same gamma get their own labels and a_i."""
    import json

    from validate.serving.load import load_run
    from validate.serving.predict import acceptance_from_runs

    runs = []
    for name, alpha in (("weak", 0.1), ("strong", 0.8)):
        d = _spec_run_dir(tmp_path / name / "closed-2", 2, gamma=2, alpha=alpha, n=12)
        m = json.loads((d / "run.json").read_text())
        m["models"]["draft"] = {"path": f"/models/{name}-draft"}
        (d / "run.json").write_text(json.dumps(m))
        runs.append(load_run(d))
    assert [r.label for r in runs] == ["specdecode-g2-weak-draft/closed-2", "specdecode-g2-strong-draft/closed-2"]
    acc = acceptance_from_runs(runs)
    assert set(acc) == {(2, "weak-draft"), (2, "strong-draft")}
    assert acc[(2, "weak-draft")]["a"][0] < 0.3 < 0.6 < acc[(2, "strong-draft")]["a"][0]


def test_measured_itl_is_one_gap_per_emitting_step(tmp_path):
    """vLLM's ITL measured from serve steps: at one user every verification step after the prefill is one gap of
    that step's duration (the double's 2 ms + 0.1 ms per token); with more users one gap per (request, emitting
    step), each at least the step's own duration."""
    from validate.serving.load import load_run
    from validate.serving.predict import measured_itl

    r1 = load_run(_spec_run_dir(tmp_path / "u1" / "closed-1", 1, gamma=2, n=5))
    gaps = measured_itl(r1)
    n_verify = sum(1 for ctx, rids, p in zip(r1.steps.context_tokens, r1.steps.request_ids, r1.steps.prefill_requests) if p == 0)
    assert len(gaps) == n_verify
    assert np.allclose(gaps, 0.002 + 1e-4 * 3)
    r3 = load_run(_spec_run_dir(tmp_path / "u3" / "closed-3", 3, gamma=2, n=9))
    gaps3 = measured_itl(r3)
    emitting = sum(sum(1 for e, c, rid in zip(em, ctx, rids) if e > 0 and c > 0)
                   for em, ctx, rids in zip(r3.steps.emitted, r3.steps.context_tokens, r3.steps.request_ids))
    assert len(gaps3) == emitting and gaps3.min() >= 0.002 + 1e-4 * 3 - 1e-12


def test_replay_costs_the_run_s_own_draft_depth(tmp_path):
    """A run whose draft recorded another depth than the profile's draft model is replayed with that depth
    (same width); the same depth, or an unknown width, keeps the profile's model."""
    import json

    from calibrate.fit.fit_cost import Setup
    from validate.serving.load import load_run
    from validate.serving.predict import run_models

    setup = Setup.from_names("cpu", 1, "smollm2-135m", "smollm2-135m-cut6", "smollm2-135m-cut6")
    got = []
    for name, layers, hidden in (("four", 4, 576), ("six", 6, 576), ("wide", 4, 1024)):
        d = _spec_run_dir(tmp_path / name / "closed-1", 1, gamma=2, n=3)
        m = json.loads((d / "run.json").read_text())
        m["models"]["draft"] = {"path": f"/models/{name}", "num_layers": layers, "hidden_size": hidden}
        (d / "run.json").write_text(json.dumps(m))
        got.append(run_models(load_run(d), setup)["draft"])
    assert got[0].layers == 4 and got[0].hidden == 576 and got[0].vocab == setup.models["draft"].vocab
    assert got[1] is setup.models["draft"] and got[2] is setup.models["draft"]
    assert got[0].weight_bytes_read < setup.models["draft"].weight_bytes_read
