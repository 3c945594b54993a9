"""Adding a system is one file (issue 29): a ``SystemSpec`` in ``simulator/inputs/systems.py``'s ``REGISTRY``. Every rule that
depends on the system reads its spec, never its name, so an entry added at run time (a copy of an existing system under
another name) is accepted by the scenario loader and the CLI and behaves exactly as the system it copies, in the
analytic engine and in the discrete-event simulator."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import yaml

import specsim_cli.main as cli
from simulator.inputs.systems import REGISTRY, SYSTEMS, SystemSpec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def copies(monkeypatch):
    """Two systems added at run time: copies of specreason-decode and vanilla-small under new names."""
    added = {"spec-copy": SystemSpec("spec-copy", "speculative", draft=True, description="test copy"),
             "small-copy": SystemSpec("small-copy", "small", description="test copy")}
    for name, spec in added.items():
        monkeypatch.setitem(REGISTRY, name, spec)
    return added


def _rows(out: str) -> dict[str, dict]:
    return {r["system"]: r for r in csv.DictReader(io.StringIO(out))}


def test_a_system_added_in_one_place_runs_like_the_one_it_copies(copies, tmp_path, capsys):
    assert "spec-copy" in SYSTEMS and "spec-copy" in ", ".join(SYSTEMS)  # the names follow the registry
    sc = yaml.safe_load((REPO / "scenarios" / "reference-a6000-qwq32b.yaml").read_text(encoding="utf-8"))
    sc["systems"] = ["specreason-decode", "spec-copy", "vanilla-small", "small-copy"]
    sc["grid"].update(gamma=[3], threshold=[7])
    f = tmp_path / "copies.yaml"
    f.write_text(yaml.safe_dump(sc, sort_keys=False), encoding="utf-8")
    rc = cli.main(["simulate", "whatif", str(f), "--format", "csv"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    rows = _rows(out.out)
    assert set(rows) == {"specreason-decode", "spec-copy", "vanilla-small", "small-copy"}
    for orig, copy in (("specreason-decode", "spec-copy"), ("vanilla-small", "small-copy")):
        a, b = float(rows[orig]["latency_s"]), float(rows[copy]["latency_s"])
        assert a > 0 and a == pytest.approx(b, rel=1e-9), (orig, a, copy, b)
    assert float(rows["spec-copy"]["latency_s"]) != pytest.approx(float(rows["small-copy"]["latency_s"]))


def test_an_unknown_system_is_refused_by_name(tmp_path, capsys):
    rc = cli.main(["simulate", "whatif", "scenarios/reference-a6000-qwq32b.yaml", "--system", "spec-copy"])
    err = capsys.readouterr().err
    assert rc == 2 and "unknown system 'spec-copy'" in err and err.count("\n") == 1


def test_the_des_runs_an_added_system_like_the_one_it_copies(copies):
    """The discrete-event simulator, same seed: the copy's requests are the original's, call for call."""
    from simulator.cost.cost_tables import CostTables
    from simulator.engines.des import simulate
    from simulator.inputs.scenario import load_scenario
    from simulator.inputs.systems import SystemConfig

    rs = load_scenario(REPO / "scenarios" / "reference-a6000-qwq32b.yaml")
    dep = rs.deployments(rs.hardware_names[0], rs.tps[0])
    tables = CostTables(dep["base"], dep["small"], dep["draft"], rs.workload, 3, execution=rs.scenario.execution)
    for orig, copy in ((SystemConfig(system="specreason-decode", gamma=3, threshold=7),
                        SystemConfig(system="spec-copy", gamma=3, threshold=7)),
                       (SystemConfig(system="vanilla-small"), SystemConfig(system="small-copy"))):
        a, _ = simulate(orig, tables, 30, 11)
        b, _ = simulate(copy, tables, 30, 11)
        assert len(a) == 30 and a.drop(columns="system", errors="ignore").equals(b.drop(columns="system", errors="ignore"))
