"""A number written as a string in a scenario (``tp: "8"``, ``gpu_memory_utilization: "0.9"``) is refused, naming
the field, not read as the number: every numeric field of every shipped scenario, quoted, is an input error whose
field is that field's path. A union field's error names every form it takes."""

from __future__ import annotations

import copy
import warnings

import pytest
import yaml

from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario, list_scenarios
from specsim_cli.main import main


def numeric_leaves(d, path=()):
    if isinstance(d, dict):
        for k, v in d.items():
            yield from numeric_leaves(v, (*path, k))
    elif isinstance(d, list):
        for i, v in enumerate(d):
            yield from numeric_leaves(v, (*path, i))
    elif isinstance(d, (int, float)) and not isinstance(d, bool):
        yield path, d


def quoted(raw, path):
    r = copy.deepcopy(raw)
    node = r
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = str(node[path[-1]])
    return r


@pytest.mark.parametrize("scenario", list_scenarios(), ids=lambda p: p.stem)
def test_every_number_given_as_a_string_is_refused_naming_its_field(tmp_path, scenario):
    raw = yaml.safe_load(scenario.read_text(encoding="utf-8"))
    leaves = list(numeric_leaves(raw))
    assert leaves, f"{scenario.name} has numbers"
    for path, _ in leaves:
        f = tmp_path / scenario.name
        f.write_text(yaml.safe_dump(quoted(raw, path)), encoding="utf-8")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(InputError) as e:
                load_scenario(f)
        want = ".".join(str(p) for p in path if not isinstance(p, int))
        assert want.split(".")[0] in (e.value.field or ""), f"{scenario.name}: {path}: {e.value}"


def test_a_union_field_names_every_form_it_takes(tmp_path, capsys):
    src = next(p for p in list_scenarios() if "gpu_memory_utilization" in yaml.safe_load(p.read_text()))
    raw = yaml.safe_load(src.read_text())
    raw["gpu_memory_utilization"] = "0.9"
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(raw))
    assert main(["simulate", "whatif", str(f)]) == 2
    err = capsys.readouterr().err
    assert "gpu_memory_utilization: Input should be a valid number or a valid dictionary" in err and "'0.9'" in err
    assert "Traceback" not in err and ".float" not in err
