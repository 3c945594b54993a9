"""The engine interface the orchestrator drives: one model (optionally with a speculative draft).

Two real implementations: :mod:`calibrate.measure.vllm_engine` (vLLM offline ``LLM``) and
:mod:`calibrate.measure.torch_engine` (transformers + our own speculative-decoding loop). Both take
token-id prompts and return token ids, so the orchestrator never re-tokenizes a kept step
for an engine that shares the tokenizer that produced it.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

# Defaults for CPU hosts (REFERENCE.md section 4); setdefault so users and GPU hosts can override.
ENGINE_ENV_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "0-1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    "VLLM_USE_AOT_COMPILE": "0",
    "VLLM_CACHE_ROOT": str(Path(".cache") / "vllm"),
    "TOKENIZERS_PARALLELISM": "false",
}


def apply_env_defaults() -> dict[str, str]:
    """Set the engine environment defaults (never overriding the user's); return what is in effect."""
    cpu_bind = f"0-{(os.cpu_count() or 2) - 1}"
    for k, v in ENGINE_ENV_DEFAULTS.items():
        os.environ.setdefault(k, cpu_bind if k == "VLLM_CPU_OMP_THREADS_BIND" else v)
    if os.environ["VLLM_CACHE_ROOT"] and not os.path.isabs(os.environ["VLLM_CACHE_ROOT"]):
        os.environ["VLLM_CACHE_ROOT"] = os.path.abspath(os.environ["VLLM_CACHE_ROOT"])
    return {k: os.environ[k] for k in ENGINE_ENV_DEFAULTS}


@dataclass(frozen=True)
class Sampling:
    """Sampling for generation calls; temperature 0 is greedy."""

    temperature: float = 0.0
    top_p: float = 1.0


@dataclass
class Generation:
    """Result of one generation call."""

    token_ids: list[int]
    text: str
    finish_reason: str  # "stop" (stop string), "eos", "length"
    time_s: float
    prompt_tokens: int
    cached_tokens: int
    spec_drafted_per_pos: list[int] = field(default_factory=list)
    spec_accepted_per_pos: list[int] = field(default_factory=list)


@dataclass
class ScoreResult:
    """Top-k next-token logprobs after a prompt (one prefill, max_tokens=1)."""

    top_logprobs: dict[str, float]  # decoded token text -> logprob
    time_s: float
    prompt_tokens: int
    cached_tokens: int


class Engine(ABC):
    """One loaded model (``role`` base or small), optionally verifying a draft with ``gamma`` tokens."""

    name: str = "abstract"
    gamma: int = 0
    tok = None  # an HF-compatible tokenizer, or None with dummy weights
    # prefix-cache granularity in tokens: 1 = token-exact (the torch engine), vLLM = its KV block size
    prefix_cache_block: int = 1
    model_dir: Path

    # -- tokenizer (shared by the real engines; test doubles may override) ---------------------
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` with no special tokens."""
        if self.tok is None:  # dummy weights: deterministic pseudo-ids, ~4 characters per token
            h = hashlib.sha256(text.encode()).digest()
            return [100 + (h[i % 32] * 7 + i) % 1000 for i in range(max(1, len(text) // 4))]
        return list(self.tok.encode(text, add_special_tokens=False))

    def decode(self, ids: list[int]) -> str:
        return "" if self.tok is None else self.tok.decode(ids)

    def chat_prompt(self, question: str) -> list[int]:
        """Token ids of the request prompt (chat template if the tokenizer has one)."""
        if self.tok is not None and getattr(self.tok, "chat_template", None):
            text = self.tok.apply_chat_template([{"role": "user", "content": question}],
                                                add_generation_prompt=True, tokenize=False)
            return self.encode(text)
        return self.encode(question)

    @abstractmethod
    def generate(self, prompt_ids: list[int], max_tokens: int, stop: list[str], sampling: Sampling,
                 seed: int | None) -> Generation:
        """Generate until a stop string (included in the output), EOS, or ``max_tokens``."""

    @abstractmethod
    def score(self, prompt_ids: list[int], top_k: int = 10) -> ScoreResult:
        """Greedy next-token top-k logprobs after ``prompt_ids``."""

    @property
    def tokenizer_key(self) -> str:
        """Equal keys mean equal token ids for equal text (a step's ids can be shared)."""
        if self.tok is None:
            return "dummy"
        tj = Path(self.model_dir) / "tokenizer.json"
        return hashlib.sha256(tj.read_bytes()).hexdigest()[:16] if tj.exists() else str(self.model_dir)

    @abstractmethod
    def describe(self) -> dict:
        """Model facts for run.json: path, architecture, num_layers, vocab_size, params, dummy_weights."""

    def version(self) -> str:
        return "unknown"

    def close(self) -> None:
        """Free the model (best effort)."""


def read_model_config(model_dir: str | Path) -> dict:
    """The HF ``config.json`` of a model folder; a missing folder is an InputError."""
    import json

    from simulator.errors import InputError

    p = Path(model_dir)
    if not p.is_dir():
        raise InputError(str(p), None, "model folder does not exist (run `specsim measure prepare-models`)")
    cfg = p / "config.json"
    if not cfg.is_file():
        raise InputError(str(p), "config.json", "missing: not a Hugging Face model folder")
    try:
        return json.loads(cfg.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise InputError(str(cfg), None, f"not valid JSON ({e.msg})") from None


def check_draft(target_info: dict, draft_dir: str | Path, gamma: int, dummy: bool) -> dict:
    """The draft model's facts after checking it can draft for the target: equal vocabularies
    (speculative decoding compares token ids) and gamma >= 1."""
    from simulator.errors import InputError

    info = describe_model_dir(draft_dir, dummy)
    if info["vocab_size"] != target_info["vocab_size"]:
        raise InputError(str(draft_dir), "vocab_size", f"draft vocab {info['vocab_size']} != target vocab "
                         f"{target_info['vocab_size']} (speculative decoding needs equal vocabs)")
    if gamma < 1:
        raise InputError(None, "gamma", "must be >= 1 with a draft model")
    return info


def describe_model_dir(model_dir: str | Path, dummy: bool) -> dict:
    cfg = read_model_config(model_dir)
    text_cfg = cfg.get("text_config", cfg)
    return {
        "path": str(model_dir),
        "architecture": (cfg.get("architectures") or ["?"])[0],
        "num_layers": int(text_cfg.get("num_hidden_layers", 0)),
        "vocab_size": int(text_cfg.get("vocab_size", 0)),
        "hidden_size": int(text_cfg.get("hidden_size", 0)),
        "dummy_weights": dummy,
        **({"catalog_name": cfg["specsim_catalog_name"]} if cfg.get("specsim_catalog_name") else {}),
    }
