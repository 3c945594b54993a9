"""One ordering of engine versions for every catalog and fit (simulator/catalog/versions.py): numbers, not text;
a short version equals its .0 release; a local build label is its release; anything else is refused by name."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware
from simulator.catalog.engine_hosts import ServingEngine, batch_defaults, engine_version, running_version
from simulator.catalog.versions import nearest_version, version_key
from simulator.cost.memory_plan import cudagraphs_counted
from simulator.errors import InputError
from tests.conftest import examples

parts = st.lists(st.integers(0, 40), min_size=1, max_size=4)


@settings(max_examples=examples(200))
@given(a=parts, b=parts)
def test_versions_order_as_their_numbers_padded_with_zeros(a, b):
    ka, kb = version_key(".".join(map(str, a))), version_key(".".join(map(str, b)))
    pad = lambda v: tuple(v) + (0,) * (4 - len(v))  # noqa: E731
    assert (ka < kb) == (pad(a) < pad(b)) and (ka == kb) == (pad(a) == pad(b))


def test_short_versions_local_labels_and_two_digit_minors():
    assert version_key("0.11") == version_key("0.11.0") == version_key("0.11.0+cu128") == (0, 11, 0)
    assert version_key("0.10") > version_key("0.9.2")


@pytest.mark.parametrize("bad", ["v0.11", "0.11.0rc1", "latest", "0..1", ""])
def test_anything_but_dotted_numbers_is_refused_naming_where_it_came_from(bad):
    with pytest.raises(InputError) as e:
        version_key(bad, "catalog.yaml", "engines.vllm.version")
    assert e.value.file == "catalog.yaml" and e.value.field == "engines.vllm.version" and repr(bad) in e.value.message


def test_a_scenario_version_is_checked_by_the_same_rule():
    with pytest.raises(InputError) as e:
        engine_version(ServingEngine(name="vllm", version="0.11.x"))
    assert e.value.field == "serving_engine.version"
    assert engine_version(ServingEngine(name="vllm", version="0.11")) == engine_version(
        ServingEngine(name="vllm", version="0.11.0"))


def test_the_running_version_is_the_stated_one_else_the_newest_fitted():
    newest = engine_version(ServingEngine(name="vllm")).version
    assert running_version(ServingEngine(name="vllm")) == newest
    assert running_version(ServingEngine(name="vllm", version="0.99.0")) == "0.99.0"
    h100 = get_hardware("h100-sxm")
    assert batch_defaults(ServingEngine(name="vllm", version="0.7.3"), h100) == (None, 256)
    assert not cudagraphs_counted("0.20") and cudagraphs_counted("0.21.0+cu128")


def test_a_table_folder_is_ordered_by_its_version_and_named_when_it_is_not_one():
    from pathlib import Path

    from simulator.catalog.versions import folder_version

    paths = [Path(f"kernels/h100_sxm/moe/vllm/{v}/moe_perf.parquet") for v in ("0.24.0", "0.9.2", "0.14.0")]
    assert [p.parent.name for p in sorted(paths, key=folder_version)] == ["0.9.2", "0.14.0", "0.24.0"]
    with pytest.raises(InputError) as e:
        folder_version(Path("kernels/h100_sxm/moe/vllm/latest/moe_perf.parquet"))
    assert e.value.file == str(Path("kernels/h100_sxm/moe/vllm/latest")) and "latest" in e.value.message


minors = st.lists(st.integers(0, 40), min_size=1, max_size=6, unique=True)


@settings(max_examples=examples(200))
@given(have=minors, want=st.integers(0, 40))
def test_nearest_version_is_the_nearest_minor_a_tie_the_older(have, want):
    versions = [f"0.{m}" for m in have]
    got = int(nearest_version(f"0.{want}", versions).split(".")[1])
    assert f"0.{got}" in versions
    assert all(abs(got - want) < abs(m - want) or (abs(got - want) == abs(m - want) and got <= m) for m in have)
    assert nearest_version(f"0.{want}.0", versions) == nearest_version(f"0.{want}", versions)  # 0.11.0 is 0.11


def test_nearest_version_across_majors_and_empty():
    assert nearest_version("1.2", ["0.5", "0.30"]) == "0.30"  # no 1.x entry: the newest below
    assert nearest_version("0.3", ["1.0", "2.0"]) == "1.0"  # nothing below: the oldest above
    assert nearest_version("0.11", []) is None
    with pytest.raises(InputError, match="not dotted numbers"):
        nearest_version("latest", ["0.11"])


def test_catalog_and_fit_take_the_same_entry_for_every_version():
    """The engine catalog and the released fit's folds resolve a version by one rule: vLLM 0.10 (a V1 engine) takes
    0.11's terms, as the held-out tables predicted its runs, not 0.5's V0-era terms."""
    from calibrate.fit.host_fit import nearest
    from simulator.catalog.engine_hosts import engine_hosts

    entries = {e.version: e for e in engine_hosts()["vllm"]}
    oldest = min(entries, key=version_key)
    for minor in range(version_key(oldest)[1], 40):
        v = f"0.{minor}"
        assert engine_version(ServingEngine(version=v)) is nearest(v, entries)
    if {"0.5", "0.11"} <= set(entries):
        assert engine_version(ServingEngine(version="0.10")).version == "0.11"
