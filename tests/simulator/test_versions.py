"""One ordering of engine versions for every catalog and fit (simulator/catalog/versions.py): numbers, not text;
a short version equals its .0 release; a local build label is its release; anything else is refused by name."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware
from simulator.catalog.engine_hosts import ServingEngine, batch_defaults, engine_version, running_version
from simulator.catalog.versions import version_key
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
