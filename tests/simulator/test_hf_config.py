"""A model from a local config.json (issue 26): every known architecture parses to its catalog shape, the published
parameter check applies, the commands take a path wherever they take a catalog name, and a bad file is one line,
exit 2."""

import json
from pathlib import Path

import pytest

from simulator.catalog import get_model
from simulator.catalog.hf_config import KNOWN_ARCHITECTURES, load_hf_config
from simulator.errors import InputError
from specsim_cli.main import main

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "tests" / "data" / "hf_configs"
NAMES = sorted(p.parent.name for p in CONFIGS.glob("*/config.json") if p.parent.name != "bad")
SHAPE = ("arch", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "tie_embeddings", "qkv_bias", "experts",
         "experts_per_token", "expert_intermediate", "shared_experts", "first_k_dense_layers", "router_bias",
         "q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "mtp_layers",
         "linear_value_heads", "full_attention_every", "ssm_state_dtype")


def cli(args, capsys):
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_fixtures_cover_every_known_architecture():
    archs = {get_model(str(CONFIGS / n / "config.json")).arch for n in NAMES}
    assert archs == set(KNOWN_ARCHITECTURES.values())


@pytest.mark.parametrize("name", NAMES)
def test_config_gives_the_catalog_shape_and_published_count(name):
    m = load_hf_config(CONFIGS / name / "config.json")
    cat = get_model(name)
    assert m.name == name and m.published_params == cat.published_params
    assert {k: getattr(m, k) for k in SHAPE} == {k: getattr(cat, k) for k in SHAPE}
    assert m.params == cat.params
    assert abs(m.params / m.published_params - 1) < 0.03


@pytest.mark.parametrize("name", NAMES)
def test_the_catalog_serves_the_checkpoint_dtype_of_its_config(name):
    """A catalog name means the published checkpoint: DeepSeek-R1 in FP8, as its config.json's quantization_config
    says (at bf16 it would not fit the 8 x H200 it is served on); a scenario or --dtype chooses another."""
    m, cat = load_hf_config(CONFIGS / name / "config.json"), get_model(name)
    fields = ("weight_dtype", "bytes_per_param", "head_bytes", "expert_weight_dtype", "expert_bytes_per_param")
    assert {k: getattr(m, k) for k in fields} == {k: getattr(cat, k) for k in fields}


def test_dtypes_and_windows_from_the_config():
    r1 = get_model(str(CONFIGS / "deepseek-r1" / "config.json"))
    assert r1.weight_dtype == "fp8" and r1.bytes_per_param == 1.0 and r1.head_bytes == 2.0
    oss = get_model(str(CONFIGS / "gpt-oss-120b"))  # a folder holding config.json
    assert oss.expert_weight_dtype == "mxfp4" and oss.weight_dtype == "bf16"
    assert (oss.sliding_window, oss.full_attention_every, oss.sliding_layers) == (128, 2, 18)
    g = get_model(str(CONFIGS / "gemma-3-270m" / "config.json"))
    assert (g.sliding_window, g.full_attention_every, g.sliding_layers) == (512, 6, 15)
    assert get_model(str(CONFIGS / "qwen2.5-7b")).qkv_bias


def test_nested_text_config_and_unmatched_name(tmp_path):
    raw = json.loads((CONFIGS / "gemma-3-270m" / "config.json").read_text())
    nested = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"], "text_config": raw}
    (tmp_path / "my-gemma").mkdir()
    (tmp_path / "my-gemma" / "config.json").write_text(json.dumps(nested))
    m = get_model(str(tmp_path / "my-gemma"))
    assert m.arch == "gemma3" and m.layers == 18
    # a shape the catalog does not hold keeps the folder's name, no published figure
    raw2 = {**raw, "num_hidden_layers": 7, "layer_types": raw["layer_types"][:7]}
    (tmp_path / "cut.json").write_text(json.dumps(raw2))
    m2 = get_model(str(tmp_path / "cut.json"))
    assert m2.name == "cut" and m2.published_params is None and m2.layers == 7


def test_pass_time_takes_a_config_path(capsys):
    args = ["simulate", "pass-time", "--model", str(CONFIGS / "qwen3-30b-a3b" / "config.json"), "--hardware", "h100-sxm",
            "--batch", "1,64", "--format", "json"]
    code, out, err = cli(args, capsys)
    assert code == 0, err
    rows = json.loads(out)["results"]
    assert len(rows) == 2 and rows[1]["pass_ms"] > rows[0]["pass_ms"] > 0


def _write_bad(tmp_path, name, **change):
    raw = json.loads((CONFIGS / "qwen3-30b-a3b" / "config.json").read_text())
    for k, v in change.items():
        if v is None:
            raw.pop(k)
        else:
            raw[k] = v
    p = tmp_path / name
    p.write_text(json.dumps(raw))
    return p


@pytest.mark.parametrize("change, field", [
    ({"model_type": "falcon", "architectures": ["FalconForCausalLM"]},
     "model_type: unknown architecture 'falcon'; known: deepseek_v3, deepseek_v32, gemma3"),
    ({"moe_intermediate_size": None}, "moe_intermediate_size: missing required field"),
    ({"num_hidden_layers": None}, "num_hidden_layers: missing required field"),
    ({"num_hidden_layers": "48"}, "num_hidden_layers: expected a non-negative integer"),
    ({"model_type": None, "architectures": ["FalconForCausalLM"]}, "architectures: unknown architecture"),
    ({"quantization_config": {"quant_method": "bitsandbytes"}}, "quantization_config.quant_method"),
    ({"num_experts": 16, "num_experts_per_tok": 20}, "experts_per_token must lie in 1..experts=16"),
])
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, change, field):
    p = _write_bad(tmp_path, "config.json", **change)
    code, out, err = cli(["simulate", "pass-time", "--model", str(p), "--hardware", "h100-sxm"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"error: {p}:") and field in err, err


def test_shipped_bad_fixtures(capsys):
    code, _, err = cli(["simulate", "pass-time", "--model", str(CONFIGS / "bad" / "missing-field.json"), "--hardware", "h100-sxm"],
                       capsys)
    assert code == 2 and err.count("\n") == 1 and "moe_intermediate_size: missing required field" in err, err


def test_not_json_and_missing_path(tmp_path, capsys):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    code, _, err = cli(["simulate", "pass-time", "--model", str(p), "--hardware", "h100-sxm"], capsys)
    assert code == 2 and "not JSON" in err and err.count("\n") == 1
    code, _, err = cli(["simulate", "pass-time", "--model", str(tmp_path / "nothing" / "config.json"), "--hardware", "h100-sxm"], capsys)
    assert code == 2 and "--model: no config.json" in err


def test_published_count_mismatch_is_refused(tmp_path):
    raw = json.loads((CONFIGS / "qwen3-30b-a3b" / "config.json").read_text())
    raw["_name_or_path"] = "Qwen/Qwen3-30B-A3B"
    raw["intermediate_size"] = 6144  # same shape: matches the catalog entry
    p = tmp_path / "config.json"
    p.write_text(json.dumps(raw))
    assert load_hf_config(p).name == "qwen3-30b-a3b"
    # the hub id of the catalog entry with a shape that disagrees with the published total: no match by hf_id,
    # and no shape match either, so no published figure to check -- a different model
    raw["moe_intermediate_size"] = 1536
    p.write_text(json.dumps(raw))
    m = load_hf_config(p)
    assert m.published_params is None and m.hf_id == "Qwen/Qwen3-30B-A3B"


SCENARIO = """name: cfg
hardware: {{gpu: h100-sxm, count: 8}}
base: {{model: {base}, tp: {tp}, ep: {ep}}}
small: {{model: qwen3-0.6b, tp: {tp}}}
workload: aime_qwq32b_r1-1.5b
memory_fraction: {{base: 0.85, small: 0.1}}
systems: [vanilla-base, specreason]
grid: {{threshold: [7]}}
"""


def test_scenario_model_field_takes_a_config_path_relative_to_the_scenario(tmp_path, capsys):
    d = tmp_path / "models" / "q30"
    d.mkdir(parents=True)
    (d / "config.json").write_text((CONFIGS / "qwen3-30b-a3b" / "config.json").read_text())
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO.format(base="models/q30/config.json", tp=1, ep=1))
    code, out, err = cli(["simulate", "whatif", str(sc), "--format", "json"], capsys)
    assert code == 0, err
    assert {r["system"] for r in json.loads(out)["results"]} == {"vanilla-base", "specreason"}


def test_experts_not_divisible_by_ep_is_one_line_exit_2(tmp_path, capsys):
    # 60 routed experts (a Qwen1.5-MoE-like count) cannot be split over ep = 8 GPUs
    p = _write_bad(tmp_path, "config.json", num_experts=60)
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO.format(base="config.json", tp=8, ep=8))
    code, out, err = cli(["simulate", "whatif", str(sc)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "base.ep: " in err and "60 routed experts are not divisible by ep=8" in err, err
    # ep must be 1 or the TP degree; a dense model has no experts to spread
    sc.write_text(SCENARIO.format(base="config.json", tp=8, ep=4))
    code, _, err = cli(["simulate", "whatif", str(sc)], capsys)
    assert code == 2 and "ep=4 must be 1 (experts sharded by TP) or equal to tp=8" in err
    sc.write_text(SCENARIO.format(base="qwen3-8b", tp=8, ep=8))
    code, _, err = cli(["simulate", "whatif", str(sc)], capsys)
    assert code == 2 and "needs a mixture-of-experts model" in err


def test_unknown_catalog_name_mentions_config_paths():
    with pytest.raises(InputError, match="or a path to a config.json"):
        get_model("gpt-17")


def test_ssm_state_dtype_from_the_config_and_a_bad_one_is_one_line(tmp_path):
    """Qwen3.5's recurrent state dtype is read from text_config.mamba_ssm_dtype (vLLM adopts it); a value vLLM
    does not know is one error naming the field."""
    assert load_hf_config(CONFIGS / "qwen3.5-27b" / "config.json").ssm_state_dtype == "float32"
    raw = json.loads((CONFIGS / "qwen3.5-9b" / "config.json").read_text())
    raw["text_config"]["mamba_ssm_dtype"] = "float64"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(InputError, match=r"text_config\.mamba_ssm_dtype: expected one of auto, float32"):
        load_hf_config(tmp_path / "config.json")


def test_fields_the_config_class_defaults_are_read_as_its_defaults_with_a_warning():
    """Gemma 3's multimodal checkpoints leave vocab_size and sliding_window_pattern to Gemma3TextConfig: one global
    layer in six (not every layer sliding, a 6x smaller KV), the 262k vocabulary."""
    from simulator.catalog.hf_config import ClassDefaultsWarning

    path = CONFIGS / "variants" / "gemma-3-27b-it.json"
    with pytest.warns(ClassDefaultsWarning, match="text_config.vocab_size, text_config.sliding_window_pattern"):
        m = load_hf_config(str(path))
    assert (m.vocab, m.full_attention_every, m.sliding_window) == (262208, 6, 1024)
    assert m.params == pytest.approx(27.0e9, rel=0.03)  # the decoder of the 27B (the vision tower's 0.4B aside)
