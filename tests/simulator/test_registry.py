"""Systems as a registry: a new system that reuses the existing call kinds is one SystemSpec, and every
engine (analytic, DES, serving) runs it with the same numbers as the system it copies."""

import numpy as np
import pytest

from simulator.inputs import systems
from simulator.engines.analytic import predict
from simulator.cost.cost_tables import CostTables
from simulator.engines.des import simulate
from simulator.engines.request_model import RequestSampler
from simulator.engines.serving import PoissonArrivals, simulate_serving
from simulator.inputs.systems import REGISTRY, SystemConfig, SystemSpec, expand_systems
from tests.conftest import deployments, make_workload


@pytest.fixture
def dummy_system(monkeypatch):
    monkeypatch.setitem(REGISTRY, "my-specdecode", SystemSpec("my-specdecode", "base", draft=True))
    yield "my-specdecode"


def test_a_registered_system_runs_in_every_engine(dummy_system):
    w = make_workload()
    b, s = deployments("l40s", 2)
    mine, ref = SystemConfig(system=dummy_system, gamma=3), SystemConfig(system="specdecode", gamma=3)
    tb = CostTables(b, s, s, w, 3)
    assert predict(mine, tb)["latency_s"] == predict(ref, tb)["latency_s"]
    r1, _ = simulate(mine, tb, 20, 1)
    r2, _ = simulate(ref, tb, 20, 1)
    assert np.array_equal(r1.latency_s, r2.latency_s)
    p1 = RequestSampler(mine, w).plans(5, 2)
    assert all(c.spec_cum is not None for p in p1 for c in p.calls)
    deps = {"base": b, "small": s, "draft": s}
    res = simulate_serving(mine, deps, w, PoissonArrivals(0.01), 5, 3)
    assert len(res.requests) == 5
    assert [c.gamma for c in expand_systems([dummy_system], [2, 4], [7], [0])] == [2, 4]


def test_unknown_system_is_rejected():
    with pytest.raises(ValueError, match="unknown system"):
        SystemConfig(system="nope")
    with pytest.raises(KeyError):
        systems.spec_of("nope")


def test_a_value_listed_twice_is_one_configuration():
    from simulator.inputs.systems import expand_systems

    once = expand_systems(["specdecode", "vanilla-base"], [2, 4], [7], [0])
    assert expand_systems(["specdecode", "vanilla-base", "specdecode"], [2, 4, 2], [7, 7], [0, 0]) == once
    assert [c.system for c in once] == ["specdecode", "specdecode", "vanilla-base"]


def test_whatif_with_a_system_given_twice_runs_it_once(capsys):
    from specsim_cli.main import main

    assert main(["simulate", "whatif", "reference-a6000-qwq32b", "--system", "vanilla-base", "--system",
                 "vanilla-base", "--format", "csv"]) == 0
    rows = [r for r in capsys.readouterr().out.splitlines() if ",vanilla-base," in r]
    assert len(rows) == 1
