"""Host costs by engine version (simulator/catalog/engine_hosts.py): the catalog, version resolution, the async
overlap rule, and where the cost profile takes them (GPU priors only; a profile's own values win)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.catalog import get_hardware
from simulator.catalog.engine_hosts import (ASYNC_DEFAULT_FROM, HOST_TERMS, ServingEngine, async_on, engine_hosts,
                                            engine_version, host_terms)
from simulator.cost.cost_model import Deployment
from simulator.catalog import get_model
from simulator.cost.cost_profile import prior_profile
from simulator.errors import InputError
from tests.conftest import examples

VERSIONS = [e.version for e in engine_hosts()["vllm"]]


def test_catalog_versions_sorted_and_default_is_newest():
    keys = [tuple(int(x) for x in v.split(".")) for v in VERSIONS]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert engine_version(ServingEngine()).version == VERSIONS[-1]
    for e in engine_hosts()["vllm"]:
        assert 0.0 <= e.async_overlap.value < 1.0
        assert e.seq_overhead_s.source and e.call_overhead_s.source


def test_version_resolution():
    assert engine_version(ServingEngine(version=VERSIONS[0])).version == VERSIONS[0]
    # a version between two fitted ones takes the nearer (versions.nearest_version); one past the newest, the newest
    assert engine_version(ServingEngine(version="99.0")).version == VERSIONS[-1]
    with pytest.raises(InputError, match="older than every fitted version"):
        engine_version(ServingEngine(version="0.1"))
    with pytest.raises(InputError, match="no host costs for engine"):
        engine_version(ServingEngine(name="tgi"))


@pytest.mark.parametrize("version", VERSIONS)
def test_async_scheduling_sets_the_overlap_and_leaves_the_terms(version):
    """Async scheduling changes no host term: it gives the profile the version's overlap o (off: 0), which the step
    time applies (:func:`simulator.cost.roofline.step_time`)."""
    gpu_step = get_hardware("h100-sxm").cost_prior["step_overhead_s"]
    off = host_terms(ServingEngine(version=version, async_scheduling=False), gpu_step)
    on = host_terms(ServingEngine(version=version, async_scheduling=True), gpu_step)
    o = engine_version(ServingEngine(version=version)).async_overlap.value
    terms = set(off) - {"async_overlap"}
    optional = {"front_end_serial_s", "front_end_first_share", "front_end_token_s", "tp_step_overhead_s"}
    assert set(HOST_TERMS) - optional <= terms <= set(HOST_TERMS)
    assert off["async_overlap"].value == 0.0 and on["async_overlap"].value == o
    for t in terms:
        assert (t in on) and on[t].value == off[t].value
    if "front_end_serial_s" in off:  # the serial part of t_call is a part of it
        assert off["front_end_serial_s"].value <= off["call_overhead_s"].value


def test_async_default_follows_the_version():
    """Unstated, async scheduling is on from the version vLLM turned it on by default (0.14), off before; stated, as
    stated. The default engine (the newest fitted version) gets its version's default."""
    first = ".".join(map(str, ASYNC_DEFAULT_FROM["vllm"]))
    assert first == "0.14"
    assert not async_on(ServingEngine(version="0.11"), "0.11") and async_on(ServingEngine(version="0.14"), "0.11")
    assert async_on(ServingEngine(version="0.30"), "0.30")
    assert not async_on(ServingEngine(version="0.30", async_scheduling=False), "0.30")
    assert async_on(ServingEngine(version="0.10", async_scheduling=True), "0.10")
    newest = VERSIONS[-1]
    default = host_terms(ServingEngine(), get_hardware("h100-sxm").cost_prior["step_overhead_s"])
    stated = host_terms(ServingEngine(version=newest), get_hardware("h100-sxm").cost_prior["step_overhead_s"])
    assert default["seq_overhead_s"].value == stated["seq_overhead_s"].value


def test_gpu_prior_takes_the_versions_terms_cpu_prior_does_not():
    h = get_hardware("h100-sxm")
    for v in VERSIONS:
        ev = engine_version(ServingEngine(version=v))
        p = prior_profile(h, serving_engine=ServingEngine(version=v, async_scheduling=False))
        assert p.seq_overhead_s.value == ev.seq_overhead_s.value
        assert p.call_overhead_s.value == ev.call_overhead_s.value
        assert "engine_hosts.yaml" in p.seq_overhead_s.source
        # the GPU-side terms are the GPU's, whatever the version
        assert p.mem_efficiency == prior_profile(h).mem_efficiency
    cpu = get_hardware("cpu")
    assert prior_profile(cpu, serving_engine=ServingEngine(version=VERSIONS[0])) == prior_profile(cpu)


def test_explicit_host_values_replace_the_catalogs():
    h = get_hardware("a100-80gb")
    p = prior_profile(h, host={"seq_overhead_s": 2e-5, "call_overhead_s": 1e-3, "async_overlap": 0.5},
                      serving_engine=ServingEngine(async_scheduling=True))
    assert p.seq_overhead_s.value == 2e-5 and p.call_overhead_s.value == 1e-3 and p.async_overlap.value == 0.5
    off = prior_profile(h, host={"async_overlap": 0.5}, serving_engine=ServingEngine(async_scheduling=False))
    assert off.async_overlap.value == 0.0


@settings(max_examples=examples(30), deadline=None)
@given(batch=st.integers(1, 512), ctx=st.integers(1, 8192), version=st.sampled_from(VERSIONS))
def test_async_scheduling_never_slows_a_step(batch, ctx, version):
    h, m = get_hardware("h100-sxm"), get_model("qwen3-8b")
    t = {}
    for a in (False, True):
        c = prior_profile(h, serving_engine=ServingEngine(version=version, async_scheduling=a)).params(h)
        t[a] = float(Deployment(m, h, 1, c).pass_time(batch, batch * ctx, batch * ctx, batch, batch))
    assert t[True] <= t[False] + 1e-15


def test_scenario_field_selects_the_version(tmp_path):
    import yaml

    from simulator.inputs.scenario import load_scenario

    src = load_scenario("cpu-smollm2").scenario.model_dump(mode="json", exclude_defaults=True)
    src.update(hardware={"gpu": "h100-sxm", "count": 1}, cost_profiles=["prior"],
               serving_engine={"name": "vllm", "version": VERSIONS[0]})
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(src))
    sc = load_scenario(p)
    assert sc.cost_profile("h100-sxm").seq_overhead_s.value == engine_version(
        ServingEngine(version=VERSIONS[0])).seq_overhead_s.value
    cpu = load_scenario("cpu-smollm2")  # a fitted CPU profile keeps its own host terms
    own = cpu.cost_profiles.get("cpu")
    if own is not None:
        assert cpu.cost_profile("cpu") is own


@pytest.mark.parametrize("engine, says", [({"name": "vllm", "version": "0.1"}, "older than every fitted version"),
                                          ({"name": "vllm", "version": "abc"}, "not dotted numbers"),
                                          ({"name": "sglang"}, "no host costs for engine 'sglang'")])
def test_a_scenario_with_an_engine_the_catalog_cannot_price_is_refused_when_it_loads(tmp_path, capsys, engine, says):
    import yaml

    from specsim_cli.main import main

    sc = yaml.safe_load(open("scenarios/cpu-smollm2.yaml"))
    sc["serving_engine"] = engine
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(sc))
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: serving_engine" in err and says in err and "Traceback" not in err


def test_a_scenarios_own_host_terms_replace_the_catalogs_and_say_so(tmp_path, capsys):
    """``serving_engine.host``: the deployment's own terms (e.g. its front end measured on its host) win over the
    catalog entry's, each named as the scenario's; the rest stay the catalog's; a fitter's trial values win over both;
    out-of-range values are refused when the scenario loads (exit 2, the field named)."""
    import yaml

    from simulator.catalog.engine_hosts import HostTerms
    from specsim_cli.main import main

    h = get_hardware("h100-sxm")
    own = ServingEngine(host=HostTerms(front_end_token_s=5e-5, seq_overhead_s=1e-5))
    p = prior_profile(h, serving_engine=own)
    base = prior_profile(h, serving_engine=ServingEngine())
    assert p.front_end_token_s.value == 5e-5 and p.seq_overhead_s.value == 1e-5
    assert "serving_engine.host" in p.seq_overhead_s.source and p.call_overhead_s.value == base.call_overhead_s.value
    assert prior_profile(h, serving_engine=own, host={"seq_overhead_s": 3e-5}).seq_overhead_s.value == 3e-5
    sc = yaml.safe_load(open("scenarios/cpu-smollm2.yaml"))
    for bad, field in (({"front_end_first_share": 1.5}, "front_end_first_share"), ({"t_tok": 1e-5}, "t_tok")):
        sc["serving_engine"] = {"name": "vllm", "host": bad}
        path = tmp_path / "host.yaml"
        path.write_text(yaml.safe_dump(sc))
        assert main(["show", str(path)]) == 2
        err = capsys.readouterr().err
        assert f"{path}: serving_engine.host.{field}" in err and "Traceback" not in err
