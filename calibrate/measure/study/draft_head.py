"""An EAGLE-1-style draft head for a llama target, trained on CPU in minutes.

Architecture, at head position j (which drafts the token after ``ids[j + 1]``)::

    x_j = fc(concat(embed(ids[j + 1]), f_j))        fc: Linear(2H -> H, no bias), init [I | I]
    g_j = LlamaDecoderLayer(x_j)                     ONE layer, the target's config, initialised from the
                                                     target's last decoder layer, its own KV cache
    logits_j = lm_head(final_norm(g_j))              the target's final norm and tied LM head, frozen

``f_j`` is the target's feature at position j: the output of its final decoder layer BEFORE the final
RMSNorm (captured from the norm's input). ``g_j`` is the head's prediction of ``f_{j+1}``; at inference
the head feeds ``g_j`` and its own drafted token back in for the next draft step (EAGLE's chain).

Training loss (``train_head``): cross-entropy against the target's greedy (argmax) next token at every
position, plus ``feature_weight`` x smooth-L1(g_j / s, f_{j+1} / s) with s the per-dimension RMS of the
training features (positions >= 1; fixed, so a few outlier dimensions with RMS ~300 vs a median ~20 do
not dominate and the term is O(1) like the CE). Only fc and the decoder layer train.
"""

from __future__ import annotations

import copy
import json
import random
import time
from pathlib import Path

import numpy as np

from simulator.errors import InputError
from simulator.inputs.loading import write_atomic


def _torch():
    import torch

    return torch


def build_head(target):
    """A fresh head for ``target`` (a fp32 ``LlamaForCausalLM``); see the module docstring."""
    torch = _torch()
    from transformers import DynamicCache
    from transformers.masking_utils import create_causal_mask
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

    class _Head(torch.nn.Module):
        def __init__(self, target):
            super().__init__()
            cfg = copy.deepcopy(target.config)
            cfg.num_hidden_layers = 1
            self.config = cfg
            h = cfg.hidden_size
            self.fc = torch.nn.Linear(2 * h, h, bias=False)
            with torch.no_grad():
                self.fc.weight.copy_(torch.cat([torch.eye(h), torch.eye(h)], dim=1))
            self.layer = LlamaDecoderLayer(cfg, layer_idx=0)
            self.layer.load_state_dict(target.model.layers[-1].state_dict())
            self.rotary = LlamaRotaryEmbedding(config=cfg)
            # frozen, shared with the target; kept out of the module tree so they neither train nor save
            self._frozen = (target.model.embed_tokens, target.model.norm, target.lm_head)
            self.to(target.dtype)

        def new_cache(self):
            return DynamicCache(config=self.config)

        def forward(self, tokens, feats, positions, cache=None, ce_mask=None):
            """tokens [B, T] (ids[j + 1]), feats [B, T, H] (f_j), positions [B, T] -> (g [B, T, H], logits [B, T, V]);
            with ``ce_mask`` [B, T] the logits only of those positions ([n, V]: the LM head dominates the cost)."""
            embed, norm, lm_head = self._frozen
            x = self.fc(torch.cat([embed(tokens), feats], dim=-1))
            mask = create_causal_mask(config=self.config, inputs_embeds=x, attention_mask=None,
                                      past_key_values=cache, position_ids=positions)
            g = self.layer(x, attention_mask=mask, position_ids=positions, past_key_values=cache,
                           use_cache=cache is not None, position_embeddings=self.rotary(x, position_ids=positions))
            return g, lm_head(norm(g if ce_mask is None else g[ce_mask]))

        def chain_step(self, tokens, feats, positions, cache, ce_mask=None):
            """Training-time chain step over a whole batch of T queries: query j attends to the first pass's
            cached keys 0..j and to the keys at j of every later pass, its own included (the cache holds them)."""
            embed, norm, lm_head = self._frozen
            b, t = tokens.shape
            passes = cache.get_seq_length() // t  # passes already cached (the first one included)
            x = self.fc(torch.cat([embed(tokens), feats], dim=-1))
            i = torch.arange(t)[:, None]
            eye = torch.arange(t)[None, :] == i
            mask = torch.cat([torch.arange(t)[None, :] <= i] + [eye] * passes, dim=1)[None, None].expand(b, 1, t, -1)
            g = self.layer(x, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True,
                           position_embeddings=self.rotary(x, position_ids=positions))
            return g, lm_head(norm(g if ce_mask is None else g[ce_mask]))

        def trainable(self):
            return [*self.fc.parameters(), *self.layer.parameters()]

    return _Head(target)


def save_head(head, out_dir: Path, meta: dict) -> Path:
    from safetensors.torch import save_file

    out_dir.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in head.state_dict().items()}, str(out_dir / "head.safetensors"))
    write_atomic(out_dir / "head.json", json.dumps(meta, indent=1, default=float))
    return out_dir / "head.safetensors"


def load_head(target, path: Path):
    from safetensors.torch import load_file

    head = build_head(target)
    head.load_state_dict(load_file(str(path)))
    return head.eval()


# -- target features ------------------------------------------------------------------------------------

def target_features(target, ids: list[int]):
    """(pre-norm last-layer features [L, H], argmax next token [L]) of one full teacher-forced pass."""
    torch = _torch()
    got = []
    hook = target.model.norm.register_forward_hook(lambda m, inp, out: got.append(inp[0]))
    try:
        with torch.inference_mode():
            logits = target(input_ids=torch.tensor([ids])).logits[0]
    finally:
        hook.remove()
    return got[-1][0].float().clone(), logits.argmax(-1).clone()


# -- training -------------------------------------------------------------------------------------------

def _precompute(target, sequences: list[list[int]], prompt_lens: list[int] | None, torch):
    """(per sequence (ids, features, argmax, prompt length), seconds it took, per-dimension feature RMS)."""
    t0 = time.perf_counter()
    data = []
    for i, ids in enumerate(sequences):
        f, am = target_features(target, ids)
        data.append((torch.tensor(ids), f, am, prompt_lens[i] if prompt_lens else 1))
    precompute_s = time.perf_counter() - t0
    scale = torch.cat([f[1:] for _, f, _, _ in data]).pow(2).mean(0).sqrt().clamp_min(1e-3)  # per-dimension RMS
    return data, precompute_s, scale


def _batch_loss(head, chunk, scale, feature_weight: float, unroll: int, bf16: bool, torch):
    """(loss, first-step CE, first-step feature term, first-step logits, labels, CE mask) of one batch."""
    tokens, feats, tgt_f, labels, mask, ce_mask, pos = _batch(chunk, torch)
    cache = head.new_cache() if unroll > 1 else None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        g, logits = head(tokens, feats, pos, cache=cache, ce_mask=ce_mask)
        ce = torch.nn.functional.cross_entropy(logits, labels[ce_mask])
        reg = torch.nn.functional.smooth_l1_loss(g[mask] / scale, tgt_f[mask] / scale)
        loss = ce + feature_weight * reg
        for st in range(2, unroll + 1):  # chain step st: each position fed the previous step's own feature
            k = st - 1
            m_s, ce_s = _shift(mask, k, torch), _shift(ce_mask, k, torch)
            g, lg_s = head.chain_step(_shift(tokens, k, torch), g, pos + k, cache, ce_mask=ce_s)
            loss = loss + torch.nn.functional.cross_entropy(lg_s, _shift(labels, k, torch)[ce_s]) \
                + feature_weight * torch.nn.functional.smooth_l1_loss(g[m_s] / scale,
                                                                      _shift(tgt_f, k, torch)[m_s] / scale)
    return loss, ce, reg, logits, labels, ce_mask


def _train_record(sequences, data, hist: list[dict], params, scale, settings: dict, step: int, total: int,
                  stopped: bool, precompute_s: float, t1: float, c1: float) -> dict:
    positions = int(sum(len(ids) - 1 for ids in sequences))
    ce_positions = int(sum(len(ids) - 1 - max(0, p - 2) for ids, _, _, p in data))
    return {"sequences": len(sequences), "positions": positions, "ce_positions": ce_positions, **settings,
            "feature_rms_median": float(scale.median()), "feature_rms_max": float(scale.max()), "steps": step, "planned_steps": total,
            "stopped_at_budget": stopped, "precompute_s": precompute_s, "train_s": time.perf_counter() - t1, "train_cpu_s": time.process_time() - c1,
            "trainable_params": int(sum(p.numel() for p in params)),
            "loss_first": hist[0]["loss"] if hist else None, "ce_first": hist[0]["ce"] if hist else None,
            "reg_first": hist[0]["reg"] if hist else None,
            "ce_last": float(np.mean([h["ce"] for h in hist[-5:]])) if hist else None,
            "reg_last": float(np.mean([h["reg"] for h in hist[-5:]])) if hist else None,
            "train_top1_last": float(np.mean([h["train_top1"] for h in hist[-5:]])) if hist else None,
            "history": hist}


def train_head(target, sequences: list[list[int]], prompt_lens: list[int] | None = None, *, epochs: int = 4, batch: int = 8, lr: float = 1e-3,
               feature_weight: float = 1.0, unroll: int = 3, bf16: bool = False, seed: int = 0, max_train_s: float = 600.0, log=print):
    """Train a fresh head on the target's own features and argmax tokens over ``sequences`` (prompt + greedy y).

    ``unroll`` = S > 1: also train chain steps 2..S the way inference runs them (EAGLE-3's "training-time
    test"): at step s, the query for true context ending at head position j sits at head position j + s - 1,
    gets (ids[j + s], the head's own step-(s-1) feature) and attends to the first pass's keys at positions
    <= j plus its own earlier steps' keys at j; its CE and feature terms are added with the same weights. The CE term covers the positions whose next token is generated (index >= prompt_len - 1; all positions
    without ``prompt_lens``), the feature term all positions. Returns (head, record). Stops early (recorded)
    when ``max_train_s`` of wall time is used.
    """
    torch = _torch()
    torch.manual_seed(seed)
    rng = random.Random(seed)
    data, precompute_s, scale = _precompute(target, sequences, prompt_lens, torch)
    for p in target.parameters():  # frozen: no weight gradients for the shared embedding / LM head
        p.requires_grad_(False)
    head = build_head(target)
    head.train()
    # bf16 autocast is optional (it did not make a CPU training step faster), so fp32 by default
    params = head.trainable()
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    n_batches = (len(data) + batch - 1) // batch
    total = epochs * n_batches
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 10) * max(0.05, 1 - s / max(1, total)))
    hist, step, t1, c1, stopped = [], 0, time.perf_counter(), time.process_time(), False
    for ep in range(epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for b in range(n_batches):
            chunk = [data[i] for i in order[b * batch:(b + 1) * batch]]
            loss, ce, reg, logits, labels, ce_mask = _batch_loss(head, chunk, scale, feature_weight, unroll, bf16, torch)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()
            sched.step()
            with torch.no_grad():
                acc = float((logits.argmax(-1) == labels[ce_mask]).float().mean())
            hist.append({"step": step + 1, "epoch": ep + 1, "loss": float(loss.detach()), "ce": float(ce.detach()), "reg": float(reg.detach()),
                         "train_top1": acc})
            step += 1
            if step % 10 == 0 or step == total:
                log(f"  head step {step}/{total}: ce {float(ce.detach()):.3f} reg {float(reg.detach()):.4f} top1 {acc:.3f} "
                    f"({time.perf_counter() - t1:.0f} s)")
            if time.process_time() - c1 > max_train_s:
                stopped = True
                break
        if stopped:
            log(f"  head training stopped at the {max_train_s:.0f} CPU-s budget (step {step}/{total})")
            break
    head.eval()
    settings = {"epochs": epochs, "batch": batch, "lr": lr, "feature_weight": feature_weight, "unroll": unroll,
                "bf16_autocast": bf16}
    return head, _train_record(sequences, data, hist, params, scale, settings, step, total, stopped, precompute_s, t1, c1)


def _shift(x, k: int, torch):
    """x[:, k:] right-padded with zeros back to x's length (chain step k + 1 sees position j + k at index j)."""
    pad = torch.zeros_like(x[:, :k])
    return torch.cat([x[:, k:], pad], dim=1)


def _batch(chunk, torch):
    """Right-padded batch: head position j sees (ids[j+1], f_j) and predicts (f_{j+1}, argmax_{j+1})."""
    n = max(len(ids) for ids, _, _, _ in chunk) - 1
    h = chunk[0][1].shape[-1]
    tokens = torch.zeros(len(chunk), n, dtype=torch.long)
    feats = torch.zeros(len(chunk), n, h)
    tgt_f = torch.zeros(len(chunk), n, h)
    labels = torch.zeros(len(chunk), n, dtype=torch.long)
    mask = torch.zeros(len(chunk), n, dtype=torch.bool)
    ce_mask = torch.zeros(len(chunk), n, dtype=torch.bool)
    for i, (ids, f, am, p) in enumerate(chunk):
        m = len(ids) - 1
        tokens[i, :m], feats[i, :m], tgt_f[i, :m], labels[i, :m] = ids[1:], f[:-1], f[1:], am[1:]
        mask[i, :m] = True
        ce_mask[i, max(0, p - 2):m] = True  # head position j predicts the token at j + 2: generated when j + 2 >= p
    pos = torch.arange(1, n + 1).unsqueeze(0).expand(len(chunk), n)
    return tokens, feats, tgt_f, labels, mask, ce_mask, pos


# -- exact replay ---------------------------------------------------------------------------------------

def head_runs(head, target, prompt: list[int], y: list[int], gamma_max: int) -> np.ndarray:
    """run[t] = how many consecutive head drafts starting at generated position t equal y[t:] (<= gamma_max).

    At t the context is prompt + y[:t] (n = len(prompt) + t tokens): the head holds true positions
    0..n-2 (tokens ids[1..n-1], target features f_0..f_{n-2}); draft 1 is its output at n-2, each further
    draft feeds back (its own token, its own predicted feature), exactly as ``HeadDrafter.propose``.
    t = 0 is the prefill's token (never drafted): run[0] = 0.
    """
    torch = _torch()
    ids = prompt + y
    f, _ = target_features(target, ids)
    L, P = len(ids), len(prompt)
    with torch.inference_mode():
        cache = head.new_cache()
        g_all, lg_all = head(torch.tensor([ids[1:]]), f[None, :-1], torch.arange(1, L)[None], cache)
        keys, values = cache.layers[0].keys, cache.layers[0].values
        run = np.zeros(len(y), dtype=int)
        for t in range(1, len(y)):
            n = P + t
            cap = min(gamma_max, len(y) - t)
            tok, g = int(lg_all[0, n - 2].argmax()), g_all[0, n - 2]
            r = 0
            c = None
            while tok == y[t + r]:
                r += 1
                if r >= cap:
                    break
                if c is None:
                    c = head.new_cache()
                    c.update(keys[..., :n - 1, :].clone(), values[..., :n - 1, :].clone(), 0)
                pos = n - 2 + r  # head position of draft r + 1
                gg, lg = head(torch.tensor([[tok]]), g[None, None], torch.tensor([[pos + 1]]), c)
                tok, g = int(lg[0, -1].argmax()), gg[0, -1]
            run[t] = r
    return run


def validate_gamma(gamma: int, name: str = "--gamma") -> int:
    if not isinstance(gamma, int) or gamma < 1:
        raise InputError(None, name, f"gamma must be an integer >= 1 (got {gamma!r})")
    return gamma


def require_model_dir(path: Path) -> Path:
    if not (Path(path) / "config.json").is_file():
        raise InputError(str(path), None, "model folder missing (no config.json): run `specsim measure prepare-models` first")
    return Path(path)
