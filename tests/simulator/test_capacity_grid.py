"""What a capacity search runs (issue 41 item 6): ``--hardware`` / ``--tp`` as in ``whatif`` (one option definition;
the worker processes load the same overridden grid), and a large default grid trimmed to each unnamed knob's middle
value with a note saying what was trimmed and how to get the full grid."""

from __future__ import annotations

import json

import pytest

import specsim_cli.main as cli
from simulator.studies.capacity import DEFAULT_GRID_MAX, LoadSpec, capacity_points, search_grid
from simulator.studies.capacity.search import cached_scenario
from simulator.inputs.scenario import load_scenario
from simulator.engines.serving.slo import parse_slo


def _option(command: str, name: str):
    for path, cmd in cli.command_tree():
        if path == tuple(command.split()):
            return next(p for p in cmd.params if name in p.opts)
    raise AssertionError(command)


@pytest.mark.parametrize("name", ["--hardware", "--tp"])
def test_capacity_and_report_take_whatifs_grid_options(name):
    ref = _option("simulate whatif", name)
    for command in ("simulate capacity", "simulate report"):
        opt = _option(command, name)
        assert (opt.help, opt.metavar, opt.multiple) == (ref.help, ref.metavar, ref.multiple), command


def test_points_carry_the_overridden_grid_to_the_workers():
    rs = load_scenario("reference-a6000-qwq32b", {"hardware": ["h200", "b200"], "tp": [1, 2]})
    pts = capacity_points(rs, parse_slo("p99_latency<=40s"), LoadSpec(), rs.system_configs(["vanilla-base"]))
    assert {(p.hardware, p.tp) for p in pts} == {("h200", 1), ("h200", 2), ("b200", 1), ("b200", 2)}
    # a worker process rebuilds the scenario from the point alone: the same grid, not the YAML's
    again = cached_scenario(pts[0].scenario, pts[0].grid)
    assert again.hardware_names == ["h200", "b200"] and again.tps == [1, 2]
    assert cached_scenario(pts[0].scenario).hardware_names == ["rtx-a6000"]


def test_capacity_on_other_hardware(capsys):
    rc = cli.main(["simulate", "capacity", "cpu-smollm2", "--system", "vanilla-base", "--hardware", "h100-sxm", "--tp", "1",
                   "--requests", "20", "--max-replications", "3", "--workers", "1", "--format", "json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    rows = json.loads(out.out)["results"]
    assert [(r["hardware"], r["tp"]) for r in rows] == [("h100-sxm", 1)] and rows[0]["max_qps"] > 0


@pytest.mark.parametrize("args, field", [(["--hardware", "no-such-gpu"], "--hardware"), (["--tp", "0"], "--tp"),
                                         (["--tp", "2"], "error: --tp: tp=2 exceeds hardware.count=1 (scenario ")])
def test_capacity_grid_options_refuse_bad_values(capsys, args, field):
    rc = cli.main(["simulate", "capacity", "cpu-smollm2", "--system", "vanilla-base", *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and field in err[0], err
    assert "grid." not in err[0]  # the command line's value, not blamed on the scenario file


def test_the_reference_default_grid_is_trimmed_with_a_note():
    rs = load_scenario("reference-a6000-qwq32b")
    full = rs.system_configs()
    configs, note = search_grid(rs)
    assert len(full) == 46 and len(configs) <= DEFAULT_GRID_MAX
    assert [c.label for c in configs] == ["vanilla-base", "vanilla-small", "specdecode g=5", "specreason t=7",
                                         "specreason-decode g=5 t=7"]
    assert "trimmed to 5 of 46" in note and "the full grid: --gamma 1-8 --threshold 3,5,7,9" in note
    # the note's command line gives the full grid back, untrimmed
    again, none = search_grid(rs, gammas=list(range(1, 9)), thresholds=[3, 5, 7, 9])
    assert none is None and again == full


@pytest.mark.parametrize("systems, gammas, thresholds", [
    (None, None, None), (["specreason-decode"], None, None), (["specreason-decode"], [2, 4], None),
    (["specdecode", "specreason"], None, [3, 5, 7, 9]), (None, [1, 2], [3, 5])])
def test_trimming_keeps_what_the_command_line_names(systems, gammas, thresholds):
    rs = load_scenario("reference-a6000-qwq32b")
    full = rs.system_configs(systems, gammas, thresholds)
    configs, note = search_grid(rs, systems, gammas, thresholds)
    assert set(configs) <= set(full) and len(configs) >= 1
    assert {c.system for c in configs} == {c.system for c in full}  # every system named stays
    for knob, named in (("gamma", gammas), ("threshold", thresholds)):
        if named:  # a knob the command line names is searched in full
            assert {getattr(c, knob) for c in configs} == {getattr(c, knob) for c in full}
    assert (note is None) == (configs == full)
    assert note is None or len(configs) <= DEFAULT_GRID_MAX or (gammas and thresholds)
    assert search_grid(rs, systems, gammas, thresholds, trim=False) == (full, None)


def test_the_note_comes_before_the_search_and_the_search_gets_the_trimmed_grid(monkeypatch, capsys):
    """The command announces the trimmed grid on stderr before searching, and searches exactly the trimmed grid (the
    search itself is replaced here by a double that records its configurations and stops)."""
    import simulator.studies.capacity as capacity

    seen = []

    class Stop(Exception):
        pass

    def search_table(rs, slo, load, configs, *a, **k):
        seen.append(([c.label for c in configs], capsys.readouterr().err))
        raise Stop

    monkeypatch.setattr(capacity, "search_table", search_table)
    with pytest.raises(Stop):
        capacity.capacity_from_cli("reference-a6000-qwq32b", None, requests=20, workers=1, trim_grid=True,
                                   announce=lambda note: print(f"note: {note}", file=__import__("sys").stderr))
    (labels, err), = seen
    assert labels == [c.label for c in search_grid(load_scenario("reference-a6000-qwq32b"))[0]]
    assert err.startswith("note: default grid trimmed to 5 of 46 searches")
    # library callers (validate-capacity) and load checks are never trimmed
    seen.clear()
    with pytest.raises(Stop):
        capacity.capacity_from_cli("reference-a6000-qwq32b", None, requests=20, workers=1)
    assert len(seen[0][0]) == 46
