"""An EAGLE-3 draft head as built, from its target's shape (docs/drafters.md); EAGLE-1 heads and MTP modules are
``ModelSpec.draft_head`` / ``ModelSpec.mtp_head``."""

from __future__ import annotations

from simulator.catalog.models import ModelSpec
from simulator.errors import InputError

EAGLE3_DRAFT_VOCAB = 32000  # the reduced draft vocabulary of the published EAGLE-3 heads (draft_vocab_size)
HEAD_KINDS = ("head", "eagle3", "block")  # drafts built as heads of the target's shape


def draft_weight_dtype(kind: str, draft: ModelSpec, target: ModelSpec, chosen: str | None = None) -> str:
    """The weight dtype a draft is served in: ``chosen`` if given; else a separate draft model's own checkpoint's
    (vLLM loads a draft with its own quantisation config), an MTP module's the target's as served (it is part of
    the target's checkpoint and quantisation), an EAGLE / EAGLE-3 / block head's bf16 (published unquantised). The
    one rule of scenarios and ``specsim simulate pass-time --draft``."""
    if chosen:
        return chosen
    return "bf16" if kind in HEAD_KINDS else target.weight_dtype if kind == "mtp" else draft.weight_dtype


def eagle3_head(target: ModelSpec, layers: int = 1, vocab: int = EAGLE3_DRAFT_VOCAB) -> ModelSpec:
    """An EAGLE-3 head of ``target`` as vLLM's ``llama_eagle3`` builds it: the features of three target layers fused
    by a 3H x H projection (``fc``), ``layers`` dense decoder layers of the target's shape (as ``draft_head``) whose
    first q/k/v projections read [token embedding, fused feature] (2H wide: their input weights doubled), and its own
    LM head of ``vocab`` rows (the reduced draft vocabulary; the draft-to-target id map is a lookup, no matmul); the
    input embedding is the target's. The fc is priced in every draft pass, an upper bound: vLLM runs it on the
    target's features in the first draft pass only (the later passes feed the head's own H-wide output back)."""
    head = target.draft_head(layers, vocab, fusion=False)
    if head.is_mla:
        qkv_in = ((head.q_lora_rank or head.heads * (head.qk_nope_head_dim + head.qk_rope_head_dim))
                  + head.kv_lora_rank + head.qk_rope_head_dim)
    else:
        qkv_in = (head.heads + 2 * head.kv_heads) * head.head_dim
    return head.model_copy(update={"name": f"{target.name}-eagle3",
                                   "extra_matmul_params": 3 * target.hidden * target.hidden + target.hidden * qkv_in})


def draft_built_from_base(base: ModelSpec, served: ModelSpec, d, kv: str, file: str | None) -> ModelSpec:
    """A scenario's ``draft`` (``d``: kind head, eagle3, block, mtp; ngram: the base model as served, nothing runs)
    built from the base checkpoint's shape (``base``; ``served``: the base as the scenario serves it), in its dtype
    (:func:`draft_weight_dtype`) with a ``kv`` cache; a draft the base cannot carry is refused naming ``file``'s
    ``draft.*`` field."""
    if d.kind in ("head", "block"):
        if d.kind == "block" and d.tree_width != 1:
            raise InputError(file, "draft.tree_width", "a block drafter drafts a chain (tree_width 1)")
        m = base.draft_head(d.layers, d.vocab, d.fusion)
    elif d.kind == "eagle3":
        if not d.fusion:
            raise InputError(file, "draft.fusion", "an EAGLE-3 head always fuses the target's features (3H x H)")
        m = eagle3_head(base, d.layers, d.vocab or EAGLE3_DRAFT_VOCAB)
    elif d.kind == "mtp":
        if not base.mtp_layers:
            raise InputError(file, "draft.kind", f"{base.name} has no MTP module (mtp_layers 0; num_nextn_predict_layers "
                             "in its config.json): use kind: head")
        if d.vocab is not None:
            raise InputError(file, "draft.vocab", "an MTP module shares the base model's LM head")
        m = base.mtp_head()
    else:
        return served  # prompt lookup: no model runs (Drafting.free)
    return m.with_dtypes(draft_weight_dtype(d.kind, m, served, d.weight_dtype), kv)
