"""A model from a local Hugging Face ``config.json`` (nothing is downloaded): the shape as a :class:`ModelSpec`.

``--model`` of ``specsim pass-time`` and a scenario's model fields take either a catalog name or a path to a
``config.json`` (or to the folder holding one). Architectures read (``model_type``, else ``architectures[0]``):
``KNOWN_ARCHITECTURES``; an unknown ``model_type`` is read as its ``architectures[0]`` class where that is known
(the class vLLM runs it with: Kimi-K2's ``kimi_k2`` is ``DeepseekV3ForCausalLM``), else as llama where its fields
are llama's, each with a warning. Anything else, a missing required field, or a feature the cost model does not describe
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
import warnings
from pathlib import Path

from pydantic import ValidationError

from simulator.catalog.dtypes import WEIGHT_DTYPE_BYTES, weight_bytes
from simulator.catalog.models import PARAM_TOLERANCE, ModelSpec, model_catalog
from simulator.catalog.layer_kinds import STATE_DTYPE_BYTES
from simulator.errors import InputError, pydantic_error_to_input_error

# model_type -> catalog arch; the architectures[0] class names that stand for them
KNOWN_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "qwen3_moe": "qwen3_moe",
                       "deepseek_v3": "deepseek_v3", "gpt_oss": "gpt_oss", "mixtral": "mixtral", "gemma3": "gemma3",
                       "gemma3_text": "gemma3", "mistral": "llama", "glm4_moe": "glm4_moe", "qwen3_next": "qwen3_next",
                       "qwen3_5": "qwen3_next", "qwen3_5_text": "qwen3_next", "qwen3_5_moe": "qwen3_next",
                       "qwen3_5_moe_text": "qwen3_next", "llama4": "llama4", "llama4_text": "llama4",
                       "deepseek_v32": "deepseek_v32", "minimax_m2": "minimax_m2", "qwen3_vl": "qwen3",
                       "qwen3_vl_text": "qwen3", "qwen3_vl_moe": "qwen3_moe", "qwen3_vl_moe_text": "qwen3_moe"}
ARCHITECTURE_CLASSES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2", "Qwen3ForCausalLM": "qwen3",
                        "Qwen3MoeForCausalLM": "qwen3_moe", "DeepseekV3ForCausalLM": "deepseek_v3",
                        "GptOssForCausalLM": "gpt_oss", "MixtralForCausalLM": "mixtral",
                        "Gemma3ForCausalLM": "gemma3", "Gemma3ForConditionalGeneration": "gemma3",
                        "MistralForCausalLM": "llama", "Glm4MoeForCausalLM": "glm4_moe",
                        "Qwen3NextForCausalLM": "qwen3_next", "Qwen3_5ForConditionalGeneration": "qwen3_next",
                        "Qwen3_5MoeForConditionalGeneration": "qwen3_next", "Llama4ForConditionalGeneration": "llama4",
                        "Llama4ForCausalLM": "llama4", "DeepseekV32ForCausalLM": "deepseek_v32",
                        "MiniMaxM2ForCausalLM": "minimax_m2", "Qwen3VLForConditionalGeneration": "qwen3",
                        "Qwen3VLMoeForConditionalGeneration": "qwen3_moe"}
# Multimodal configs nest the decoder under text_config (the vision tower is not modelled)
NESTED_TEXT = ("gemma3", "qwen3_next", "llama4", "qwen3", "qwen3_moe")  # Qwen3-VL: Qwen3's decoder under text_config
# An unknown model_type is read as llama when it has these fields and none of the ones below (MoE, latent or linear
# attention, sliding windows: shapes llama does not describe)
SSM_DTYPES = tuple(STATE_DTYPE_BYTES)  # the mamba_ssm_dtype values a config may give (LayerKinds.ssm_state_dtype)
LLAMA_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
NOT_LLAMA_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts", "kv_lora_rank", "layer_types",
                    "linear_num_value_heads", "sliding_window", "text_config")
# Defaults of the transformers config classes where a published config.json may leave a field out
TIE_DEFAULT = {"gemma3": True}


class UnknownArchitectureWarning(UserWarning):
    """A config.json of an unknown model_type read as llama (its fields are llama's)."""


class ClassDefaultsWarning(UserWarning):
    """A config.json field left out and read as its transformers config class's default."""


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
        if isinstance(kind, tuple) and v not in kind:  # one of these values
            raise InputError(self.file, self.prefix + name, f"expected one of {', '.join(kind)} (got {v!r})")
        return v


def _llama_like(raw: dict) -> bool:
    return all(isinstance(raw.get(k), int) for k in LLAMA_FIELDS) and not any(raw.get(k) for k in NOT_LLAMA_FIELDS)


def _arch_of(raw: dict, file: str) -> str:
    known = ", ".join(sorted(k for k in KNOWN_ARCHITECTURES if not k.endswith("_text")))
    mt = raw.get("model_type")
    if mt is not None:
        if not isinstance(mt, str):
            raise InputError(file, "model_type", f"expected a string (got {mt!r})")
        if mt not in KNOWN_ARCHITECTURES:
            archs = raw.get("architectures")
            cls = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
            if cls in ARCHITECTURE_CLASSES:  # the class vLLM runs it with (its model registry keys on architectures)
                warnings.warn(f"{file}: model_type {mt!r} is not a known architecture; read as its architectures[0] "
                              f"{cls} ({ARCHITECTURE_CLASSES[cls]}), the class vLLM runs it with",
                              UnknownArchitectureWarning, stacklevel=2)
                return ARCHITECTURE_CLASSES[cls]
            if _llama_like(raw):
                trusted = [k for k in (*LLAMA_FIELDS, "num_key_value_heads", "head_dim", "tie_word_embeddings",
                                       "attention_bias") if k in raw]
                warnings.warn(f"{file}: model_type {mt!r} is not a known architecture; read as llama, trusting "
                              f"{', '.join(trusted)}", UnknownArchitectureWarning, stacklevel=2)
                return "llama"
            raise InputError(file, "model_type", f"unknown architecture {mt!r}; known: {known}")
        return KNOWN_ARCHITECTURES[mt]
    archs = raw.get("architectures")
    if isinstance(archs, list) and archs:
        if not isinstance(archs[0], str):
            raise InputError(file, "architectures", f"expected a list of class names (got {archs[0]!r} first)")
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
        return weight_bytes("fp8")
    if method == "mxfp4":
        return {"expert_weight_dtype": "mxfp4", "expert_bytes_per_param": WEIGHT_DTYPE_BYTES["mxfp4"]}
    if method in ("gptq", "awq") and q.get("bits", 4) == 4:
        return weight_bytes("int4")
    if method:
        raise InputError(file, "quantization_config.quant_method", f"{method!r} is not modelled; known: fp8, mxfp4, gptq, awq (4-bit)")
    dt = str(raw.get("torch_dtype", raw.get("dtype", "bfloat16")))
    return {"weight_dtype": "fp16"} if dt in ("float16", "fp16") else {}


def _periodic(f: _Fields, layers: int, kinds: tuple[str, str], interval_field: str | None) -> int | None:
    """P where layer i is ``kinds[1]`` (full attention) iff (i + 1) % P == 0, from ``layer_types`` or the interval
    field; None when every layer is ``kinds[1]``."""
    types = f.raw.get("layer_types")
    if types is None:
        p = f.opt(interval_field, None) if interval_field else None
        return p if p and p > 1 else None
    if not isinstance(types, list) or len(types) != layers or any(t not in kinds for t in types):
        raise InputError(f.file, f.prefix + "layer_types", f"expected {layers} entries of {' / '.join(kinds)}")
    full = [i for i, t in enumerate(types) if t == kinds[1]]
    if len(full) == layers:
        return None
    period = full[0] + 1 if full else 0
    if full and [i for i in range(layers) if (i + 1) % period == 0] == full:
        return period
    raise InputError(f.file, f.prefix + "layer_types", f"not a periodic pattern (every P-th layer {kinds[1]}): the "
                     "cost model describes periodic patterns only")


def _moe_fields(f: _Fields, file: str, arch: str) -> dict:
    """Routed / shared experts of the qwen3_moe, qwen3_next (MoE variants) and glm4_moe / deepseek configs."""
    if arch in ("glm4_moe", "deepseek_v3", "deepseek_v32"):
        if f.opt("moe_layer_freq", 1) != 1:
            raise InputError(file, "moe_layer_freq", "only every-layer MoE after first_k_dense_replace is modelled")
        return dict(intermediate=f.req("intermediate_size"), experts=f.req("n_routed_experts"),
                    experts_per_token=f.req("num_experts_per_tok"), expert_intermediate=f.req("moe_intermediate_size"),
                    shared_experts=f.opt("n_shared_experts", 0), first_k_dense_layers=f.opt("first_k_dense_replace", 0),
                    router_bias=True, mtp_layers=f.opt("num_nextn_predict_layers", 0))
    if f.opt("decoder_sparse_step", 1) != 1 or f.raw.get("mlp_only_layers"):
        raise InputError(file, f.prefix + "decoder_sparse_step", "only every-layer MoE (decoder_sparse_step 1, no "
                         "mlp_only_layers) is modelled")
    out = dict(experts=f.req("num_experts", "num_local_experts"), experts_per_token=f.req("num_experts_per_tok"),
               expert_intermediate=f.req("moe_intermediate_size"))
    out["intermediate"] = f.opt("intermediate_size", None) or out["expert_intermediate"]
    shared = f.opt("shared_expert_intermediate_size", 0)
    if shared:  # Qwen3-Next / Qwen3.5: one gated shared expert (its scalar gate, H weights, is not counted)
        out.update(shared_experts=1, shared_expert_intermediate=shared)
    return out


def _local_experts(f: _Fields, arch: str) -> dict:
    """Every-layer MoE whose intermediate_size is one expert's (Mixtral, MiniMax-M2, gpt-oss); MiniMax-M2's and
    gpt-oss's routers carry a bias, MiniMax-M2 has MTP modules of mtp_transformer_layers layers each."""
    inter = f.req("intermediate_size")
    out = dict(experts=f.req("num_local_experts", "num_experts"),
               experts_per_token=f.req("num_experts_per_tok", "experts_per_token"),
               expert_intermediate=inter, intermediate=inter)
    if arch == "gpt_oss":
        out["router_bias"] = True
    elif arch == "minimax_m2":
        out.update(router_bias=f.opt("use_routing_bias", False, bool),
                   mtp_layers=f.opt("num_mtp_modules", 0) * f.opt("mtp_transformer_layers", 1)
                   if f.opt("use_mtp", True, bool) else 0)
    return out


def _arch_fields(f: _Fields, file: str, arch: str, layers: int) -> dict:
    """The fields of one architecture beyond the common decoder shape."""
    prefix = f.prefix
    if arch in ("qwen2", "qwen3", "qwen3_moe") and f.opt("use_sliding_window", False, bool):
        raise InputError(file, prefix + "use_sliding_window", "Qwen's top-layer sliding windows (max_window_layers) "
                         "are not modelled")
    out: dict = _sliding(f, layers) if arch in ("gemma3", "gpt_oss", "mixtral", "llama", "minimax_m2") else {}
    if arch == "qwen3_moe" or (arch == "qwen3_next" and f.raw.get("num_experts")):
        out.update(_moe_fields(f, file, arch))
    elif arch in ("mixtral", "minimax_m2", "gpt_oss"):
        out.update(_local_experts(f, arch))
    elif arch in ("deepseek_v3", "deepseek_v32"):
        nope, rope = f.req("qk_nope_head_dim"), f.req("qk_rope_head_dim")
        out.update(_moe_fields(f, file, arch))
        out.update(q_lora_rank=f.opt("q_lora_rank", None), kv_lora_rank=f.req("kv_lora_rank"),
                   qk_rope_head_dim=rope, qk_nope_head_dim=nope, v_head_dim=f.req("v_head_dim"), head_dim=nope + rope)
        if arch == "deepseek_v32":
            out.update(index_topk=f.req("index_topk"), index_heads=f.req("index_n_heads"),
                       index_head_dim=f.req("index_head_dim"))
    elif arch == "glm4_moe":
        out.update(_moe_fields(f, file, arch))
        out["qkv_bias"] = f.opt("attention_bias", False, bool)
    elif arch == "llama4":
        # MoE every interleave_moe_layer_step-th layer with one shared expert; chunked local attention on all but the
        # NoPE (global) layers, every no_rope_layer_interval-th (transformers' default 4; no_rope_layers 0 = global)
        inter = f.req("intermediate_size")
        out.update(experts=f.req("num_local_experts"), experts_per_token=f.req("num_experts_per_tok"),
                   expert_intermediate=inter, shared_experts=1, intermediate=f.req("intermediate_size_mlp"),
                   moe_every=f.opt("interleave_moe_layer_step", 1))
        chunk = f.opt("attention_chunk_size", None)
        if chunk:
            nope = f.raw.get("no_rope_layers") or None
            types = None if nope is None else ["full_attention" if not x else "chunked_attention" for x in nope]
            period = _periodic(_Fields({"layer_types": types}, file, prefix + "no_rope_layers->"), layers,
                               ("chunked_attention", "full_attention"), None) if types else \
                f.opt("no_rope_layer_interval", 4)
            out.update(sliding_window=chunk, local_attention="chunked", full_attention_every=period)
    else:
        out["intermediate"] = f.req("intermediate_size")
    if arch == "qwen3_next":  # one MTP layer in the checkpoint when the config does not count them (SGLang/vLLM: 1)
        out.update(linear_key_heads=f.req("linear_num_key_heads"), linear_value_heads=f.req("linear_num_value_heads"),
                   linear_key_head_dim=f.req("linear_key_head_dim"),
                   linear_value_head_dim=f.req("linear_value_head_dim"),
                   linear_conv_kernel=f.opt("linear_conv_kernel_dim", 4), mtp_layers=f.opt("mtp_num_hidden_layers", 1),
                   ssm_state_dtype=f.opt("mamba_ssm_dtype", "auto", kind=SSM_DTYPES),
                   full_attention_every=_periodic(f, layers, ("linear_attention", "full_attention"),
                                                  "full_attention_interval"))
        if out["full_attention_every"] is None:
            raise InputError(file, prefix + "layer_types", "a hybrid model needs linear-attention layers "
                             "(layer_types or full_attention_interval)")
    return out


# Fields a published config.json may leave out because transformers' config class supplies them (Gemma 3's
# multimodal checkpoints write only what differs from Gemma3TextConfig's defaults in text_config): read with a warning
CLASS_DEFAULTS = {"gemma3": {"vocab_size": 262208, "num_attention_heads": 8, "num_key_value_heads": 4,
                             "head_dim": 256, "sliding_window": 4096, "sliding_window_pattern": 6}}


def _decoder(raw: dict, arch: str, file: str = "") -> tuple[dict, str]:
    """(the decoder's fields, their prefix): multimodal configs nest the decoder under text_config; fields the
    architecture's transformers config class defaults (:data:`CLASS_DEFAULTS`) filled in, each named in a warning."""
    prefix = ""
    if arch in NESTED_TEXT and isinstance(raw.get("text_config"), dict):
        top = {k: raw[k] for k in ("torch_dtype", "dtype", "quantization_config", "tie_word_embeddings") if k in raw}
        raw, prefix = {**top, **raw["text_config"]}, "text_config."
    defaults = {k: v for k, v in CLASS_DEFAULTS.get(arch, {}).items() if k not in raw}
    if "layer_types" in raw:  # the newer layout states each layer; the older pattern does not apply
        defaults.pop("sliding_window_pattern", None)
    if defaults and file:
        warnings.warn(f"{file}: {', '.join(f'{prefix}{k}' for k in defaults)} not given: read as transformers' "
                      f"{arch} defaults ({', '.join(f'{k} {v}' for k, v in defaults.items())})",
                      ClassDefaultsWarning, stacklevel=3)
    return {**raw, **defaults}, prefix


# ModelSpec field -> the config.json fields it is read from (the first one present names it in an error)
CONFIG_NAMES = {"layers": ("num_hidden_layers",), "hidden": ("hidden_size",), "heads": ("num_attention_heads",),
                "kv_heads": ("num_key_value_heads", "num_attention_heads"), "vocab": ("vocab_size",),
                "intermediate": ("intermediate_size", "intermediate_size_mlp", "moe_intermediate_size"),
                "head_dim": ("head_dim", "hidden_size"), "experts": ("num_experts", "num_local_experts", "n_routed_experts"),
                "experts_per_token": ("num_experts_per_tok", "experts_per_token"),
                "expert_intermediate": ("moe_intermediate_size", "intermediate_size"),
                "shared_experts": ("n_shared_experts", "shared_expert_intermediate_size"),
                "shared_expert_intermediate": ("shared_expert_intermediate_size",),
                "first_k_dense_layers": ("first_k_dense_replace",), "index_heads": ("index_n_heads",),
                "sliding_window": ("sliding_window", "attention_chunk_size"), "moe_every": ("interleave_moe_layer_step",),
                "full_attention_every": ("layer_types", "full_attention_interval", "sliding_window_pattern",
                                         "no_rope_layers", "no_rope_layer_interval"),
                "mtp_layers": ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules"),
                "linear_key_heads": ("linear_num_key_heads",), "linear_value_heads": ("linear_num_value_heads",),
                "linear_conv_kernel": ("linear_conv_kernel_dim",), "ssm_state_dtype": ("mamba_ssm_dtype",)}


def config_field(raw: dict, spec_field: str) -> str:
    """The config.json field (with its text_config. prefix) a ModelSpec field was read from."""
    try:
        dec, prefix = _decoder(raw, _arch_of(raw, ""))
    except InputError:
        dec, prefix = raw, ""
    names = CONFIG_NAMES.get(spec_field, (spec_field,))
    return prefix + next((n for n in names if n in dec), names[0])


def spec_fields(raw: dict, file: str) -> dict:
    """ModelSpec fields of one parsed config.json (no name, no catalog match)."""
    arch = _arch_of(raw, file)
    raw, prefix = _decoder(raw, arch, file)
    f = _Fields(raw, file, prefix)
    layers = f.req("num_hidden_layers")
    hidden = f.req("hidden_size")
    heads = f.req("num_attention_heads")
    out = {"arch": arch, "layers": layers, "hidden": hidden, "heads": heads,
           "kv_heads": f.opt("num_key_value_heads", heads), "vocab": f.req("vocab_size"),
           "tie_embeddings": f.opt("tie_word_embeddings", TIE_DEFAULT.get(arch, False), bool),
           "head_dim": f.opt("head_dim", None) or (hidden // heads if heads else None)}
    if arch == "qwen2":
        out["qkv_bias"] = True
    elif arch in ("llama", "gpt_oss", "llama4"):
        out["qkv_bias"] = f.opt("attention_bias", False, bool)
    out.update(_arch_fields(f, file, arch, layers))
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
        err = pydantic_error_to_input_error(file, e)
        raise InputError(file, config_field(raw, err.field) if err.field else None, err.message) from None
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
