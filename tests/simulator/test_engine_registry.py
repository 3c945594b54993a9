"""Engines and γ policies are chosen by looking their names up: every registered engine fills the same result
columns (one result record), an unknown name is one input error that lists the known names."""

from __future__ import annotations

import pytest

from simulator.engines.gamma_choice import GAMMA_POLICIES, GoodputPolicy, gamma_policy
from simulator.engines.registry import DES_COLUMNS, ENGINES, PointResult, get_engine
from simulator.errors import InputError
from simulator.inputs.systems import SystemConfig
from simulator.studies.whatif import RESULT_COLUMNS, run_grid
from simulator.inputs.scenario import load_scenario


def test_unknown_engine_lists_the_known_ones():
    with pytest.raises(InputError, match="unknown engine 'vidur'; known: analytic, des"):
        get_engine("vidur")
    with pytest.raises(InputError, match="known: analytic, des"):
        run_grid(load_scenario("cpu-smollm2"), engine="nope")


def test_every_engine_fills_the_result_columns():
    rs = load_scenario("cpu-smollm2")
    cfgs = [SystemConfig(system="specdecode", gamma=2)]
    for name, engine in ENGINES.items():
        df = run_grid(rs, engine=name, configs=cfgs, requests=4, seed=1)
        assert list(df.columns[: len(RESULT_COLUMNS)]) == RESULT_COLUMNS
        assert set(engine.columns) <= set(df.columns) and (df.engine == name).all()
    assert ENGINES["des"].columns == DES_COLUMNS and ENGINES["des"].samples and not ENGINES["analytic"].samples


def test_result_row_keeps_the_summary_and_components():
    out = {"latency_s": 2.0, "small_step_fraction": 0.5, "acceptance_length": 1.5, "thinking_tokens": 10.0,
           "steps": 3.0, "requests": 7}
    from simulator.cost.cost_tables import COMPONENTS

    out.update(dict.fromkeys(COMPONENTS, 0.25))
    row = PointResult.from_summary(out, ("requests",)).row()
    assert row == out


def test_gamma_policies_by_name(workload):
    assert set(GAMMA_POLICIES) == {"fixed", "goodput"}
    cfg = SystemConfig(system="specdecode", gamma=3, gamma_policy="goodput")
    assert isinstance(gamma_policy(cfg, {}, workload), GoodputPolicy)
    assert gamma_policy(SystemConfig(system="specdecode", gamma=3), {}, workload) is None
