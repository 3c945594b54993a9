"""Drafters by architecture (issue 38; docs/drafters.md): the laws of the acceptance priors per drafter kind and of
the EAGLE-3 / MTP / block drafters' pricing.

- per-position acceptance from any family is non-increasing and in [0, 1]; AL(k) is non-decreasing and <= k + 1;
- AL(k) is reproduced exactly when all k points are given (a scenario's ``a``, the AL <-> a conversion);
- an EAGLE-3 head carries its fusion (3H x H), its 2H-wide first attention input and its own draft vocabulary;
- an MTP draft runs one module per drafted token whatever the checkpoint's module count (vLLM);
- a block drafter drafts gamma tokens in one pass: equal to a chain at gamma = 1, cheaper than a chain after;
- a deployment's measured a_1..a_m are kept and extended with the kind's shape (``fit-acceptance --drafter-kind``);
- bad drafter configurations name the file and field.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from simulator.catalog import get_hardware, get_model
from simulator.catalog.draft_heads import eagle3_head
from simulator.cost.cost_model import Deployment, Drafting
from simulator.cost.cost_profile import prior_profile
from simulator.inputs.drafter_priors import (FAMILIES, PRIOR_KINDS, acceptance_length, extend, from_acceptance_length,
                                      kind_prior, per_position, prior_acceptance)
from simulator.errors import InputError
from simulator.inputs.scenario import load_scenario
from simulator.cost.spec_iteration import speculative_iteration
from tests.conftest import examples, error_lines

ROOT = Path(__file__).resolve().parents[2]


@settings(max_examples=examples(200), deadline=None)
@given(family=st.sampled_from(sorted(FAMILIES)), a1=st.floats(0.0, 1.0),
       params=st.lists(st.floats(-20.0, 20.0), min_size=2, max_size=2), k=st.integers(1, 16))
def test_per_position_acceptance_non_increasing_in_unit_interval(family, a1, params, k):
    a = per_position(family, a1, params[:FAMILIES[family]], k)
    assert len(a) == k and a[0] == pytest.approx(a1)
    assert np.all(a >= 0.0) and np.all(a <= 1.0)
    assert np.all(np.diff(a) <= 1e-12)
    al = acceptance_length(a)
    assert np.all(np.diff(al) >= 0.0) and np.all(al <= np.arange(1, k + 1) + 1.0 + 1e-12)


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=16))
def test_all_k_points_given_reproduce_al_exactly(xs):
    a = np.sort(np.asarray(xs))[::-1]  # any non-increasing a_1..a_k in [0, 1]
    al = acceptance_length(a)
    np.testing.assert_allclose(acceptance_length(from_acceptance_length(al)), al, rtol=0, atol=1e-12)


def test_scenario_a_reproduces_its_al_exactly():
    rs = load_scenario("fp8-qwq32b-head-h100-h200")
    a = rs.workload.acceptance_per_position(8)
    want = 1.0 + np.cumsum([0.8, 0.616, 0.4558, 0.3236, 0.2201, 0.1431, 0.0887, 0.0523])
    np.testing.assert_allclose(acceptance_length(a), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", PRIOR_KINDS)
def test_shipped_priors_take_their_level_from_al1(kind):
    a = prior_acceptance(kind, 1.8)
    assert a[0] == pytest.approx(0.8) and all(x >= y for x, y in zip(a, a[1:]))
    assert kind_prior(kind)["family"] in FAMILIES and "843c6254" in kind_prior(kind)["source"]


# ---- pricing from the drafter's shape -------------------------------------------------------------------------
def _dep(model, kind="model", hw="h200", tp=1):
    h = get_hardware(hw)
    return Deployment(model, h, tp, prior_profile(h).params(h), Drafting(kind))


@pytest.mark.parametrize("target", ["qwen3-32b", "llama-3.1-8b", "deepseek-r1"])
def test_eagle3_head_is_priced_from_its_shape(target):
    t = get_model(target)
    e3, e1 = eagle3_head(t), t.draft_head()
    H = t.hidden
    qkv_in = ((e3.q_lora_rank or e3.heads * (e3.qk_nope_head_dim + e3.qk_rope_head_dim)) + e3.kv_lora_rank
              + e3.qk_rope_head_dim) if e3.is_mla else (t.heads + 2 * t.kv_heads) * t.head_dim
    assert e3.extra_matmul_params == 3 * H * H + H * qkv_in and e3.vocab == 32000 and not e3.is_moe
    # the same vocabulary: EAGLE-3's layer is wider than EAGLE-1's (fusion and attention input), so never cheaper
    same_vocab = eagle3_head(t, vocab=t.vocab)
    assert same_vocab.weight_bytes_read > e1.weight_bytes_read
    assert _dep(same_vocab, "eagle3").decode_time(4096) >= _dep(e1, "head").decode_time(4096)
    # its own 32k LM head is resident (EAGLE-1 shares the target's)
    assert e3.weight_bytes_resident - e1.weight_bytes_resident > 32000 * H * e3.head_bytes - t.vocab * H * e3.head_bytes


def test_mtp_runs_one_module_per_drafted_token():
    r1 = get_model("deepseek-r1")
    three = r1.model_copy(update={"mtp_layers": 3})
    assert three.mtp_head().layers == r1.mtp_head().layers == 1


@pytest.mark.parametrize("gamma", [1, 2, 4, 8])
def test_block_drafter_is_one_pass_of_gamma_tokens(gamma):
    t = _dep(get_model("qwen3-32b"))
    head = get_model("qwen3-32b").draft_head()
    block, chain = _dep(head, "block"), _dep(head, "head")
    ctx = 2048.0
    d_block, v_block = speculative_iteration(t.pass_time, block.pass_time, block.drafting, gamma, 1, ctx)
    d_chain, v_chain = speculative_iteration(t.pass_time, chain.pass_time, chain.drafting, gamma, 1, ctx)
    assert v_block == v_chain
    want = block.pass_time(gamma, ctx + gamma, gamma * ctx + gamma * (gamma + 1) / 2, gamma, 1)
    assert d_block == pytest.approx(want, rel=1e-12)
    if gamma == 1:
        assert d_block == pytest.approx(d_chain, rel=1e-12)
    else:
        assert d_block < d_chain


def test_block_drafter_has_no_tree():
    with pytest.raises(ValueError):
        Drafting("block", 2)


# ---- scenarios -----------------------------------------------------------------------------------------------
def test_shipped_eagle3_scenario_resolves_with_the_kind_prior():
    rs = load_scenario("eagle3-qwen3-32b-h200")
    assert rs.drafting.kind == "eagle3" and rs.draft_model.vocab == 32000
    np.testing.assert_allclose(rs.workload.token_acceptance, prior_acceptance("eagle3", 1.81), rtol=1e-12)
    d = rs.deployments("h200", 1)
    assert d["draft"].drafting.kind == "eagle3" and d["draft"].model.extra_matmul_params > 0


def _scenario(tmp_path, draft: dict) -> Path:
    base = yaml.safe_load((ROOT / "scenarios" / "eagle3-qwen3-32b-h200.yaml").read_text())
    base["draft"] = {**base["draft"], **draft}
    base["draft"] = {k: v for k, v in base["draft"].items() if v is not None}
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(base))
    return p


@pytest.mark.parametrize("draft,field", [
    ({"fusion": False}, "draft.fusion"),
    ({"kind": "block", "tree_width": 2}, "draft.tree_width"),
    ({"kind": "head"}, "draft.acceptance.al1"),
    ({"acceptance": {"al1": 1.8, "a": [0.8], "source": "x"}}, "draft.acceptance"),
    ({"acceptance": {"al1": 2.5, "source": "x"}}, "draft.acceptance.al1"),
    ({"kind": "eagle3", "model": "qwen3-1.7b"}, "draft.model"),
    ({"kind": "mtp"}, "draft.kind"),
])
def test_bad_drafter_configs_name_file_and_field(tmp_path, draft, field):
    p = _scenario(tmp_path, draft)
    with pytest.raises(InputError) as e:
        load_scenario(p)
    assert str(p) in str(e.value.file) and e.value.field is not None and e.value.field.startswith(field), \
        (e.value.field, e.value.message)


# ---- a deployment's own /metrics extended with the kind's shape ------------------------------------------------
@pytest.mark.parametrize("kind", PRIOR_KINDS)
def test_extend_keeps_the_measured_positions_and_follows_the_kind_after(kind):
    measured = [0.8, 0.55, 0.4]
    a = extend(measured, kind, 8)
    assert a[:3] == measured and len(a) == 8 and all(x >= y for x, y in zip(a, a[1:]))
    p = kind_prior(kind)
    shape = per_position(p["family"], 1.0, p["params"], 8)
    np.testing.assert_allclose(np.array(a[3:]) / np.array(a[2:-1]), shape[3:] / shape[2:-1], rtol=1e-12)
    assert extend(measured, kind, 2) == measured[:2]


def test_fit_acceptance_with_a_drafter_kind_extends_by_its_shape(tmp_path):
    from calibrate.fit.fit_acceptance import fit, per_position as fitted

    data = {1: (np.array([0.8]), 100), 2: (np.array([0.8, 0.6]), 100)}
    model = {**fit(data, [1, 2]), "drafter_kind": "eagle3"}
    np.testing.assert_allclose(fitted(model, 8), extend(fitted(model, 2), "eagle3", 8), rtol=1e-12)
    plain = {**model, "drafter_kind": None}
    assert fitted(plain, 4)[3] / fitted(plain, 4)[2] == pytest.approx(0.75)  # the last conditional rate repeats
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "fit", "acceptance", "--metrics", "x.txt",
                        "--drafter-kind", "medusa"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and "--drafter-kind" in r.stderr and len(error_lines(r.stderr)) == 1, r.stderr


@pytest.mark.parametrize("kind", ["head", "eagle3", "block", "model"])
def test_a_draft_is_priced_in_one_dtype_by_scenarios_and_pass_time(tmp_path, kind):
    """One rule (draft_heads.draft_weight_dtype): under an FP8 target a head is served bf16 (published so; vLLM loads
    a draft with its own quantisation) and a draft model in its own checkpoint's dtype, in a scenario and in
    ``pass-time --draft`` alike; a scenario's ``draft.weight_dtype`` overrides it."""
    from simulator.cost.pass_time import draft_deployment

    draft = {"kind": kind, "acceptance": {"a": [0.8, 0.6], "source": "x"}}
    if kind == "model":
        draft.update(model="qwen3-1.7b", vocab=None)
    rs = load_scenario(str(_scenario(tmp_path, draft)))
    assert rs.base_model.weight_dtype == "fp8" and rs.draft_model.weight_dtype == "bf16"
    target = rs.deployments("h200", 1)["base"]
    name = "qwen3-1.7b" if kind == "model" else kind
    via_cli = draft_deployment(target, name, prior_profile(get_hardware("h200")).params(get_hardware("h200")))
    assert via_cli.model.weight_dtype == "bf16" and via_cli.model.bytes_per_param == rs.draft_model.bytes_per_param
    rs8 = load_scenario(str(_scenario(tmp_path, {**draft, "weight_dtype": "fp8"})))
    assert rs8.draft_model.weight_dtype == "fp8"


def test_an_mtp_module_is_served_as_its_target(tmp_path):
    """Neither dtype named: DeepSeek-R1's checkpoint is FP8, and so is its MTP module (part of it)."""
    from simulator.cost.pass_time import draft_deployment

    sc = yaml.safe_load((ROOT / "scenarios" / "moe-deepseek-r1-h200x8-mtp.yaml").read_text())
    del sc["base"]["weight_dtype"], sc["draft"]["weight_dtype"]
    (tmp_path / "r1.yaml").write_text(yaml.safe_dump(sc))
    rs = load_scenario(str(tmp_path / "r1.yaml"))
    assert rs.base_model.weight_dtype == rs.draft_model.weight_dtype == "fp8"
    target = rs.deployments("h200", 8)["base"]
    hw = get_hardware("h200")
    assert draft_deployment(target, "mtp", prior_profile(hw).params(hw)).model.weight_dtype == "fp8"
