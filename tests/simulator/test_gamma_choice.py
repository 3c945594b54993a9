"""simulator.engines.gamma_choice: the per-iteration expected-goodput γ rule and the best-γ-vs-concurrency table."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment, Drafting
from simulator.cost.cost_profile import prior_profile
from simulator.engines.gamma_choice import best_gamma_vs_concurrency, gamma_rule_table, goodput_gamma, iteration_time
from tests.conftest import examples


def _deps(draft_kind: str = "model", hw: str = "h100-sxm"):
    h = get_hardware(hw, None, "hw")
    params = prior_profile(h).params(h)
    target = Deployment(get_model("qwq-32b", None, "m"), h, 1, params)
    draft = Deployment(get_model("r1-distill-qwen-1.5b", None, "m"), h, 1, params, Drafting(kind=draft_kind))
    return target, draft


def test_gamma_zero_is_plain_decoding():
    """γ = 0: a plain server's decode step (no speculator configured, so async scheduling as the version runs it)."""
    t, d = _deps()
    for b in (1, 8, 64):
        plain = b / t.batch_forward_time(np.ones(b), np.full(b, 2000.0), np.ones(b))
        c = goodput_gamma(t, d, np.full(4, 0.7), b, 2000, 4)
        assert c.per_gamma[0] == pytest.approx(plain, rel=1e-12)
        assert iteration_time(t, d, b, 2000, 0) == iteration_time(t, None, b, 2000, 3)


def test_perfect_acceptance_and_free_drafting_at_batch_one_drafts_the_most():
    """α = 1 with prompt lookup (no draft cost): γ+1 tokens per memory-bound iteration -> γ_max."""
    t, d = _deps("ngram")
    c = goodput_gamma(t, d, np.ones(8), 1, 1000, 8)
    assert c.gamma == 8
    assert c.tokens_per_s == pytest.approx(9 / iteration_time(t, d, 1, 1000, 8), rel=1e-12)


def test_no_acceptance_never_speculates():
    t, d = _deps()
    for b in (1, 16, 256):
        assert goodput_gamma(t, d, np.zeros(6), b, 1000, 6).gamma == 0


@settings(max_examples=examples(30), deadline=None)
@given(alpha=st.floats(0.0, 1.0), batch=st.integers(1, 512), context=st.integers(0, 16384), gmax=st.integers(1, 8))
def test_rule_never_worse_than_plain_decoding_and_picks_the_max(alpha, batch, context, gmax):
    t, d = _deps()
    c = goodput_gamma(t, d, alpha ** np.arange(1, gmax + 1), batch, context, gmax)
    assert c.tokens_per_s >= c.per_gamma[0]
    assert c.tokens_per_s == max(c.per_gamma.values())


def test_compute_bound_batches_draft_less_at_short_context():
    """At a short context a large batch makes verification compute-bound: the rule's γ does not grow."""
    t, d = _deps()
    a = 0.8 ** np.arange(1, 9)
    tab = gamma_rule_table(t, d, a, [1, 4, 16, 64, 256, 1024], 256, 8)
    g = tab["rule_gamma"].to_numpy()
    assert g[-1] <= g[0]
    assert (tab["rule_speedup"] >= 1.0 - 1e-12).all()


def test_head_drafts_no_slower_than_a_separate_model_of_more_layers():
    t, d_model = _deps("model")
    head = dataclasses.replace(d_model, model=get_model("qwq-32b", None, "m").draft_head(1), drafting=Drafting(kind="head"))
    for b in (1, 32):
        assert iteration_time(t, head, b, 2000, 4) <= iteration_time(t, d_model, b, 2000, 4)


def test_best_gamma_table_picks_the_highest_throughput_and_lists_ties():
    rows = pd.DataFrame({
        "users": [1, 1, 1, 8, 8, 8], "gamma": [0, 2, 4, 0, 2, 4],
        "output_throughput": [10.0, 19.0, 20.0, 70.0, 100.0, 80.0],
        "request_throughput": [0.1, 0.19, 0.2, 0.7, 1.0, 0.8], "median_tpot_ms": [100.0, 52.0, 50.0, 110.0, 80.0, 95.0]})
    out = best_gamma_vs_concurrency(rows).set_index("users")
    assert out.loc[1, "best_gamma"] == 4 and out.loc[1, "tied_gammas"] == "2,4"
    assert out.loc[8, "best_gamma"] == 2 and out.loc[8, "tied_gammas"] == "2"
    assert out.loc[8, "speedup_vs_gamma0"] == pytest.approx(100 / 70)
    with pytest.raises(ValueError, match="lack"):
        best_gamma_vs_concurrency(rows.drop(columns="median_tpot_ms"))


def test_bad_arguments():
    t, d = _deps()
    with pytest.raises(ValueError):
        goodput_gamma(t, d, np.ones(2), 1, 100, 4)  # fewer acceptance positions than gamma_max
    with pytest.raises(ValueError):
        iteration_time(t, d, 0, 100, 1)


def test_cli_best_gamma_rule_agrees_with_the_simulated_best(tmp_path):
    """`specsim capacity ... --users ... --gamma 0-5 --best-gamma`: per user count the simulated best γ, and the
    per-iteration rule's γ at that load's batch is among the γs tied with it (within 5% throughput)."""
    from typer.testing import CliRunner

    from specsim_cli.main import full_app

    out = tmp_path / "bg.csv"
    r = CliRunner().invoke(full_app(), ["simulate", "capacity", "fp8-qwq32b-head-h100-h200", "--system", "specdecode", "--users", "1,16",
                                        "--gamma", "0-5", "--best-gamma", "--requests", "60", "--workers", "1",
                                        "--out", str(out)])
    assert r.exit_code == 0, r.output
    d = pd.read_csv(out)
    assert set(d.users) == {1, 16} and (d.best_gamma >= 1).all() and (d.speedup_vs_gamma0 > 1).all()
    for row in d.itertuples():
        assert str(row.rule_gamma) in str(row.tied_gammas).split(","), row
    # γ chosen per engine iteration by the same rule: within the ties' 5% of the best fixed γ, γ in range
    assert (d.adaptive_vs_best >= 0.95).all() and d.adaptive_gamma_mean.between(0, 5).all()
    assert ((d.adaptive_tok_per_s / d.output_tok_per_s - d.adaptive_vs_best).abs() < 1e-9).all()


def test_cli_best_gamma_without_users_exits_2(capsys):
    from specsim_cli.main import main

    assert main(["simulate", "capacity", "fp8-qwq32b-head-h100-h200", "--best-gamma"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--users" in err[0]
