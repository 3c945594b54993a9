"""Distil a layer-truncated draft toward the target on the target's own greedy outputs.

Loss: cross-entropy of the draft on the target's greedy tokens, on generated positions only
(under greedy verification a draft token is accepted iff it equals the target's argmax, so
this is the acceptance objective itself). Trained: every decoder layer of the cut and the
final norm; the tied embedding / LM head stays frozen (it is shared with the target).
"""

from __future__ import annotations

import random
import time
from pathlib import Path


def distill_draft(draft_dir: Path, out_dir: Path, sequences: list[tuple[list[int], list[int]]], steps: int,
                  batch: int = 4, lr: float = 5e-4, seed: int = 0, log=print) -> dict:
    """Train a copy of ``draft_dir`` on (prompt, target_greedy_tokens) pairs; save to ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = AutoModelForCausalLM.from_pretrained(str(draft_dir), dtype=torch.float32)
    model.train()
    for p in model.parameters():
        p.requires_grad_(False)
    trained = [*model.model.layers.parameters(), *model.model.norm.parameters()]
    for p in trained:
        p.requires_grad_(True)
    opt = torch.optim.AdamW(trained, lr=lr, weight_decay=0.0)
    losses, t0 = [], time.perf_counter()
    for step in range(steps):
        chunk = rng.sample(sequences, min(batch, len(sequences)))
        loss = sum(_sequence_loss(model, p, y) for p, y in chunk) / len(chunk)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        if step % 10 == 0 or step == steps - 1:
            log(f"  distill step {step + 1}/{steps}: loss {losses[-1]:.3f}")
    model.eval()
    model.save_pretrained(out_dir, safe_serialization=True)
    return {"steps": steps, "batch": batch, "lr": lr, "sequences": len(sequences), "loss_first": losses[0] if losses else None,
            "loss_last": sum(losses[-5:]) / max(1, len(losses[-5:])), "train_s": time.perf_counter() - t0,
            "trained_params": int(sum(p.numel() for p in trained))}


def _sequence_loss(model, prompt: list[int], y: list[int]):
    """CE of the draft's prediction of y[t] from prompt + y[:t], generated positions only."""
    import torch

    ids = torch.tensor([prompt + y[:-1]])
    hidden = model.model(input_ids=ids).last_hidden_state[0, len(prompt) - 1:]
    logits = model.lm_head(hidden).float()
    return torch.nn.functional.cross_entropy(logits, torch.tensor(y))
