"""One set of shape, TP and memory rules (``simulator/catalog/model_shape.py``, ``simulator/cost/memory_check.py``) for
every model and every command that places one: bounded integer dimensions, KV heads dividing heads, TP sharding
heads and KV heads, the weights and the KV cache fitting; ``pass-time``, ``whatif`` and ``capacity`` refuse the same
placement in the same words; a scenario takes no boolean for an integer."""

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st
from pydantic import ValidationError

import specsim_cli.main as cli
from simulator.catalog import get_model
from simulator.catalog.model_shape import DIMENSION_BOUNDS
from simulator.catalog.models import ModelSpec, model_catalog
from simulator.inputs.scenario import SCENARIOS_DIR
from tests.conftest import examples

CONFIGS = Path(__file__).resolve().parents[2] / "tests" / "data" / "hf_configs"
REFERENCE = (SCENARIOS_DIR / "reference-a6000-qwq32b.yaml").read_text()


def _run(args, capsys):
    rc = cli.main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _one_line(rc, out, err):
    return rc == 2 and out == "" and err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err


def _config(tmp_path, name, nested=False, **change):
    raw = json.loads((CONFIGS / name / "config.json").read_text())
    target = raw["text_config"] if nested else raw
    for k, v in change.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = v
    p = tmp_path / "config.json"
    p.write_text(json.dumps(raw))
    return p


@pytest.mark.parametrize("name, change, want", [
    ("llama-3.1-8b", {"hidden_size": 10**9}, "hidden_size: must lie in 1..131,072"),
    ("llama-3.1-8b", {"num_hidden_layers": 10**7}, "num_hidden_layers: must lie in 1..512"),
    ("mixtral-8x7b", {"num_local_experts": 10**9}, "num_local_experts: must lie in 0..2,048"),
    ("llama-3.1-8b", {"num_key_value_heads": 7}, "num_key_value_heads: 7 KV heads do not divide 32 attention heads"),
    ("llama-3.1-8b", {"num_attention_heads": 0}, "num_attention_heads: must lie in 1..512 (got 0)"),
    ("llama-3.1-8b", {"num_attention_heads": True}, "num_attention_heads: expected a non-negative integer (got True)"),
    ("llama-3.1-8b", {"model_type": ["llama"]}, "model_type: expected a string (got ['llama'])"),
    ("llama-3.1-8b", {"model_type": None, "architectures": [["LlamaForCausalLM"]]},
     "architectures: expected a list of class names"),
    ("llama-3.1-8b", {"vocab_size": 1 << 21}, "vocab_size: must lie in 1..1,048,576"),
])
def test_bad_shapes_in_a_config_are_one_line_naming_the_field(tmp_path, capsys, name, change, want):
    p = _config(tmp_path, name, **change)
    rc, out, err = _run(["simulate", "pass-time", "--model", str(p), "--hardware", "h100-sxm"], capsys)
    assert _one_line(rc, out, err) and err.startswith(f"error: {p}: {want}"), err


def test_a_nested_decoder_field_is_named_with_its_prefix(tmp_path, capsys):
    p = _config(tmp_path, "llama-4-scout-17b-16e", nested=True, num_key_value_heads=7)
    rc, out, err = _run(["simulate", "pass-time", "--model", str(p), "--hardware", "h200", "--tp", "8"], capsys)
    assert _one_line(rc, out, err) and "text_config.num_key_value_heads: 7 KV heads do not divide 40" in err, err


@settings(max_examples=examples(60), deadline=None, derandomize=True)
@given(field=st.sampled_from(sorted(DIMENSION_BOUNDS)), data=st.data())
def test_every_dimension_refuses_out_of_bounds_and_booleans(field, data):
    lo, hi = DIMENSION_BOUNDS[field]
    bad = data.draw(st.one_of(st.integers(hi + 1, 10**15), st.integers(-10**6, lo - 1), st.booleans(),
                              st.sampled_from([2.0, "8"])))
    raw = get_model("qwq-32b").model_dump()
    with pytest.raises(ValidationError) as e:
        ModelSpec.model_validate({**raw, field: bad})
    assert e.value.errors()[0]["loc"] == (field,), e.value.errors()[0]


@pytest.mark.parametrize("field", sorted(DIMENSION_BOUNDS))
def test_bounds_are_at_least_four_times_every_catalog_models(field):
    """The bounds' stated margin (model_shape's docstring) over the catalog and the shipped config.json files."""
    values = [getattr(m, field) for m in model_catalog().values() if getattr(m, field) is not None]
    assert 4 * max(values) <= DIMENSION_BOUNDS[field][1], (field, max(values))


TP_CASES = [(3, "tp=3 does not divide qwq-32b's 40 attention heads"),
            (5, "tp=5 cannot shard qwq-32b's 8 KV heads")]


@pytest.mark.parametrize("tp, want", TP_CASES)
def test_pass_time_whatif_and_capacity_refuse_the_same_tp(tmp_path, capsys, tp, want):
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwq-32b", "--hardware", "h100-sxm", "--tp", str(tp)], capsys)
    assert _one_line(rc, out, err) and err.startswith(f"error: --tp: {want}"), err
    sc = tmp_path / "s.yaml"
    sc.write_text(REFERENCE.replace("count: 2}", "count: 8}"))
    rc, out, err = _run(["simulate", "whatif", str(sc), "--system", "vanilla-base", "--tp", str(tp)], capsys)
    assert _one_line(rc, out, err) and err.startswith(f"error: --tp: base model: {want}"), err  # the option given
    sc.write_text(REFERENCE.replace("count: 2}", "count: 8}").replace("base: {model: qwq-32b, tp: 2}",
                                                                        f"base: {{model: qwq-32b, tp: {tp}}}"))
    rc, out, err = _run(["simulate", "capacity", str(sc), "--system", "vanilla-base"], capsys)
    assert _one_line(rc, out, err) and f"base.tp: base model: {want}" in err, err


def test_pass_time_and_whatif_refuse_weights_past_the_gpu_alike(capsys):
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwq-32b", "--hardware", "rtx-a6000", "--tp", "1"], capsys)
    assert _one_line(rc, out, err) and err.startswith("error: --tp: ") and "weights need 61.03 GiB per GPU" in err, err
    rc, out, err = _run(["simulate", "whatif", "reference-a6000-qwq32b", "--system", "vanilla-base", "--tp", "1"], capsys)
    assert _one_line(rc, out, err) and err.startswith("error: --tp: ") and "weights need 61.03 GiB per GPU" in err, err
    rc, out, err = _run(["simulate", "pass-time", "--model", "qwq-32b", "--hardware", "rtx-a6000", "--tp", "2"], capsys)
    assert rc == 0, err


@pytest.mark.parametrize("args, option, words", [
    (["--model", "qwq-32b", "--batch", "1,1024", "--context", "16000"], "--batch", "1,024 sequences of 16,001 tokens"),
    (["--model", "qwen3-8b", "--context", "1000000"], "--context", "To serve at least one request with max_model_len"),
])
def test_pass_time_refuses_a_step_the_kv_cache_cannot_hold(capsys, args, option, words):
    rc, out, err = _run(["simulate", "pass-time", "--hardware", "h100-sxm", *args], capsys)
    assert _one_line(rc, out, err) and err.startswith(f"error: {option}: ") and words in err, err


@pytest.mark.parametrize("old, new, field", [
    ("base: {model: qwq-32b, tp: 2}", "base: {model: qwq-32b, tp: true}", "base.tp"),
    ("count: 2}", "count: true}", "hardware.count"),
    ("gamma: [1, 2, 3, 4, 5, 6, 7, 8]", "gamma: [true]", "grid.gamma.0"),
    ("requests: 400", "requests: true", "requests"),
    ("first_n: [0]", "first_n: [false]", "grid.first_n.0"),
])
def test_a_scenario_takes_no_boolean_for_an_integer(tmp_path, capsys, old, new, field):
    sc = tmp_path / "s.yaml"
    assert old in REFERENCE
    sc.write_text(REFERENCE.replace(old, new))
    rc, out, err = _run(["simulate", "whatif", str(sc), "--system", "vanilla-base"], capsys)
    assert _one_line(rc, out, err) and f"{sc}: {field}: Input should be a valid integer" in err, err
