"""The MATH500 / GPQA-Diamond workloads are labelled published priors and keep the paper's chain-length order."""

import pytest

from simulator.inputs.scenario import PROFILES_DIR, load_scenario
from simulator.inputs.workload import load_workload


@pytest.mark.parametrize("key", ["math500", "gpqa-diamond"])
def test_published_prior_is_labelled(key):
    w = load_workload(PROFILES_DIR / f"workload_{key}_qwq32b_r1-1.5b.yaml")
    assert w.provenance.kind == "published" and "PUBLISHED PRIOR" in w.provenance.method
    assert "35.7" in w.provenance.source and w.problems is None


def test_t3_latency_follows_the_papers_order():
    """Paper, SpecReason at t=3: MATH500 35.7 s < GPQA 72.7 s < AIME 109.4 s; the priors reproduce the order
    (and the ratio to AIME within 5%) on the reference scenario."""
    from calibrate.fit.published_priors import PUBLISHED_SPECREASON_LATENCY_S, _latency

    lat = {k: _latency(load_workload(PROFILES_DIR / f"workload_{k}_qwq32b_r1-1.5b.yaml"), 3)
           for k in ("math500", "gpqa-diamond", "aime")}
    assert lat["math500"] < lat["gpqa-diamond"] < lat["aime"], lat
    for k in ("math500", "gpqa-diamond"):
        want = PUBLISHED_SPECREASON_LATENCY_S[k][0] / PUBLISHED_SPECREASON_LATENCY_S["aime"][0]
        assert lat[k] / lat["aime"] == pytest.approx(want, rel=0.05)


@pytest.mark.parametrize("name", ["reference-a6000-qwq32b-math500", "reference-a6000-qwq32b-gpqa-diamond"])
def test_dataset_scenarios_load(name):
    rs = load_scenario(name)
    assert rs.workload.provenance.kind == "published"
