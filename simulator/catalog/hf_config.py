"""A model from a local Hugging Face ``config.json`` (nothing is downloaded): the shape as a :class:`ModelSpec`.

``--model`` of ``specsim pass-time`` and a scenario's model fields take either a catalog name or a path to a
``config.json`` (or to the folder holding one). Architectures read (``model_type``, else ``architectures[0]``):
``KNOWN_ARCHITECTURES``. Anything else, a missing required field, or a feature the cost model does not describe
(e.g. Qwen2's top-layer sliding windows) is refused in one line that names the field::

    error: path/config.json: model_type: unknown architecture 'falcon'; known: deepseek_v3, gemma3, ...
    error: path/config.json: num_hidden_layers: missing required field

The parsed shape is matched against the catalog (same architecture and shape, or ``_name_or_path`` equal to a
catalog ``hf_id``): a match lends its name, tokenizer family and published parameter count, and the computed count
must lie within ``PARAM_TOLERANCE`` of it (the catalog loader's own check). Weight dtypes come from
``quantization_config``: ``fp8`` -> FP8 layer weights (embedding / LM head bf16), ``mxfp4`` -> MXFP4 routed experts
(gpt-oss), 4-bit GPTQ / AWQ -> INT4; otherwise bf16 (fp16 where ``torch_dtype`` / ``dtype`` says float16).
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from simulator.catalog.models import (PARAM_TOLERANCE, WEIGHT_DTYPE_BYTES, ModelSpec, model_catalog)
from simulator.errors import InputError, pydantic_error_to_input_error

# model_type -> catalog arch; the architectures[0] class names that stand for them
KNOWN_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe",
                       "deepseek_v3": "deepseek_v3", "gpt_oss": "gpt_oss", "mixtral": "mixtral", "gemma3": "gemma3",
                       "gemma3_text": "gemma3"}
ARCHITECTURE_CLASSES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
                        "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV3ForCausalLM": "deepseek_v3",
                        "GptOssForCausalLM": "gpt_oss", "MixtralForCausalLM": "mixtral",
                        "Gemma3ForCausalLM": "gemma3", "Gemma3ForConditionalGeneration": "gemma3"}
# Defaults of the transformers config classes where a published config.json may leave a field out
TIE_DEFAULT = {"gemma3": True}


def looks_like_config_path(ref: str) -> bool:
    """A model reference that names a file or folder rather than a catalog entry."""
    return ref.endswith(".json") or "/" in ref or "\\" in ref or ref.startswith(".")


def config_file(ref: str, base_dir: Path | None = None) -> Path | None:
    """The config.json a reference names (a file, or a folder holding ``config.json``); relative paths are taken
    from ``base_dir`` (a scenario's folder) first, then the working directory. None when nothing is there."""
    p = Path(ref)
    cands = [p] if p.is_absolute() or base_dir is None else [base_dir / p, p]
    for c in cands:
        if c.is_dir() and (c / "config.json").is_file():
            return c / "config.json"
        if c.is_file():
            return c
    return None


class _Fields:
    """Required / optional reads of one config mapping, every failure one line naming the field."""

    def __init__(self, raw: dict, file: str, prefix: str = ""):
        self.raw, self.file, self.prefix = raw, file, prefix

    def req(self, *names: str, kind=int):
        for n in names:
            if n in self.raw and self.raw[n] is not None:
                return self._typed(n, self.raw[n], kind)
        raise InputError(self.file, self.prefix + names[0], "missing required field")

    def opt(self, name: str, default, kind=int):
        v = self.raw.get(name)
        return default if v is None else self._typed(name, v, kind)

    def _typed(self, name, v, kind):
        if kind is bool:
            if not isinstance(v, bool):
                raise InputError(self.file, self.prefix + name, f"expected true or false (got {v!r})")
            return v
        if kind is int:
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise InputError(self.file, self.prefix + name, f"expected a non-negative integer (got {v!r})")
            return v
        return v


def _arch_of(raw: dict, file: str) -> str:
    known = ", ".join(sorted(set(KNOWN_ARCHITECTURES) - {"gemma3_text"}))
    mt = raw.get("model_type")
    if mt is not None:
        if mt not in KNOWN_ARCHITECTURES:
            raise InputError(file, "model_type", f"unknown architecture {mt!r}; known: {known}")
        return KNOWN_ARCHITECTURES[mt]
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs:
        if archs[0] not in ARCHITECTURE_CLASSES:
            raise InputError(file, "architectures", f"unknown architecture {archs[0]!r}; known: "
                             f"{', '.join(sorted(ARCHITECTURE_CLASSES))}")
        return ARCHITECTURE_CLASSES[archs[0]]
    raise InputError(file, "model_type", "missing required field (and no architectures list)")


def _sliding(f: _Fields, layers: int) -> dict:
    """sliding_window / full_attention_every from ``layer_types`` (or Gemma 3's older ``sliding_window_pattern``)."""
    window = f.opt("sliding_window", None)
    types = f.raw.get("layer_types")
    if window is None:
        return {}
    if types is None:
        pat = f.raw.get("sliding_window_pattern", f.raw.get("_sliding_window_pattern"))
        if pat is None:
            return {"sliding_window": window}  # every layer slides
        return {"sliding_window": window, "full_attention_every": f._typed("sliding_window_pattern", pat, int) or None}
    if not isinstance(types, list) or len(types) != layers or any(t not in ("sliding_attention", "full_attention") for t in types):
        raise InputError(f.file, f.prefix + "layer_types", f"expected {layers} entries of sliding_attention / full_attention")
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    if not full:
        return {"sliding_window": window}
    if len(full) == layers:
        return {}
    period = full[0] + 1
    if [i for i in range(layers) if (i + 1) % period == 0] == full:
        return {"sliding_window": window, "full_attention_every": period}
    raise InputError(f.file, f.prefix + "layer_types", "not a periodic pattern (every P-th layer full attention): "
                     "the cost model describes periodic sliding / full patterns only")


def _dtypes(raw: dict, file: str) -> dict:
    q = raw.get("quantization_config") or {}
    method = str(q.get("quant_method", "")).lower() if isinstance(q, dict) else ""
    if method == "fp8":
        return {"weight_dtype": "fp8", "bytes_per_param": 1.0, "head_bytes_per_param": 2.0}
    if method == "mxfp4":
        return {"expert_weight_dtype": "mxfp4", "expert_bytes_per_param": WEIGHT_DTYPE_BYTES["mxfp4"]}
    if method in ("gptq", "awq") and q.get("bits", 4) == 4:
        return {"weight_dtype": "int4", "bytes_per_param": WEIGHT_DTYPE_BYTES["int4"], "head_bytes_per_param": 2.0}
    if method:
        raise InputError(file, "quantization_config.quant_method", f"{method!r} is not modelled; known: fp8, mxfp4, gptq, awq (4-bit)")
    dt = str(raw.get("torch_dtype", raw.get("dtype", "bfloat16")))
    return {"weight_dtype": "fp16"} if dt in ("float16", "fp16") else {}


def spec_fields(raw: dict, file: str) -> dict:
    """ModelSpec fields of one parsed config.json (no name, no catalog match)."""
    arch = _arch_of(raw, file)
    prefix = ""
    if arch == "gemma3" and isinstance(raw.get("text_config"), dict):  # the multimodal config nests the decoder
        raw, prefix = {**raw["text_config"], "torch_dtype": raw.get("torch_dtype")}, "text_config."
    f = _Fields(raw, file, prefix)
    layers = f.req("num_hidden_layers")
    hidden = f.req("hidden_size")
    heads = f.req("num_attention_heads")
    out = {"arch": arch, "layers": layers, "hidden": hidden, "heads": heads,
           "kv_heads": f.opt("num_key_value_heads", heads), "vocab": f.req("vocab_size"),
           "tie_embeddings": f.opt("tie_word_embeddings", TIE_DEFAULT.get(arch, False), bool),
           "head_dim": f.opt("head_dim", None) or hidden // heads}
    if arch == "qwen2":
        out["qkv_bias"] = True
    elif arch in ("llama", "gpt_oss"):
        out["qkv_bias"] = f.opt("attention_bias", False, bool)
    if arch in ("qwen2", "qwen3", "qwen3_moe") and f.opt("use_sliding_window", False, bool):
        raise InputError(file, prefix + "use_sliding_window", "Qwen's top-layer sliding windows (max_window_layers) "
                         "are not modelled")
    if arch in ("gemma3", "gpt_oss", "mixtral"):
        out.update(_sliding(f, layers))
    if arch == "qwen3_moe":
        if f.opt("decoder_sparse_step", 1) != 1 or f.raw.get("mlp_only_layers"):
            raise InputError(file, "decoder_sparse_step", "only every-layer MoE (decoder_sparse_step 1, no "
                             "mlp_only_layers) is modelled")
        out.update(experts=f.req("num_experts", "num_local_experts"), experts_per_token=f.req("num_experts_per_tok"),
                   expert_intermediate=f.req("moe_intermediate_size"), intermediate=f.req("intermediate_size"))
    elif arch == "mixtral":
        inter = f.req("intermediate_size")
        out.update(experts=f.req("num_local_experts"), experts_per_token=f.req("num_experts_per_tok"),
                   expert_intermediate=inter, intermediate=inter)
    elif arch == "gpt_oss":
        inter = f.req("intermediate_size")
        out.update(experts=f.req("num_local_experts", "num_experts"),
                   experts_per_token=f.req("num_experts_per_tok", "experts_per_token"),
                   expert_intermediate=inter, intermediate=inter, router_bias=True)
    elif arch == "deepseek_v3":
        if f.opt("moe_layer_freq", 1) != 1:
            raise InputError(file, "moe_layer_freq", "only every-layer MoE after first_k_dense_replace is modelled")
        nope, rope = f.req("qk_nope_head_dim"), f.req("qk_rope_head_dim")
        out.update(intermediate=f.req("intermediate_size"), experts=f.req("n_routed_experts"),
                   experts_per_token=f.req("num_experts_per_tok"), expert_intermediate=f.req("moe_intermediate_size"),
                   shared_experts=f.opt("n_shared_experts", 0), first_k_dense_layers=f.opt("first_k_dense_replace", 0),
                   router_bias=True, q_lora_rank=f.opt("q_lora_rank", None), kv_lora_rank=f.req("kv_lora_rank"),
                   qk_rope_head_dim=rope, qk_nope_head_dim=nope, v_head_dim=f.req("v_head_dim"),
                   head_dim=nope + rope, mtp_layers=f.opt("num_nextn_predict_layers", 0))
    else:
        out["intermediate"] = f.req("intermediate_size")
    out.update(_dtypes(raw, file))
    return out


SHAPE_KEYS = ("arch", "layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab", "experts",
              "experts_per_token", "expert_intermediate", "shared_experts", "first_k_dense_layers", "kv_lora_rank")


def catalog_match(spec: ModelSpec, name_or_path: str | None) -> ModelSpec | None:
    """The catalog entry this config describes: the same ``hf_id``, else the first with the same shape."""
    cat = model_catalog()
    if name_or_path:
        for m in cat.values():
            if m.hf_id == name_or_path and all(getattr(m, k) == getattr(spec, k) for k in SHAPE_KEYS):
                return m
    for m in cat.values():
        if all(getattr(m, k) == getattr(spec, k) for k in SHAPE_KEYS) and m.published_params:
            return m
    return None


def load_hf_config(path: str | Path, name: str | None = None) -> ModelSpec:
    """Parse one local config.json into a ModelSpec (module docstring): shape, dtypes, catalog match and the
    published parameter check."""
    path = Path(path)
    file = str(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(file, None, f"cannot read ({e.__class__.__name__})") from None
    except json.JSONDecodeError as e:
        raise InputError(file, None, f"not JSON (line {e.lineno}: {e.msg})") from None
    if not isinstance(raw, dict):
        raise InputError(file, None, "expected a JSON object")
    fields = spec_fields(raw, file)
    default_name = path.parent.name if path.name == "config.json" and path.parent.name else path.stem
    try:
        spec = ModelSpec.model_validate({"name": name or default_name, **fields})
    except ValidationError as e:
        raise pydantic_error_to_input_error(file, e) from None
    hf = raw.get("_name_or_path") or None
    match = catalog_match(spec, hf)
    upd = {"hf_id": hf or (match.hf_id if match else None)}
    if match is not None:
        upd.update({"tokenizer": match.tokenizer, "published_params": match.published_params,
                    "name": name or match.name})
        if match.published_params and abs(spec.params / match.published_params - 1) > PARAM_TOLERANCE:
            raise InputError(file, "num_hidden_layers", f"shape gives {spec.params / 1e9:.3f}B parameters, "
                             f"{match.name} publishes {match.published_params / 1e9:.3f}B")
    return spec.model_copy(update=upd)
