"""Measurement on real models: greedy target outputs, teacher-forced draft matches (replayed
for every gamma), and timed speculative runs on a subset (per-pass costs, speedup)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from calibrate.measure.study.acceptance import replay_greedy, run_lengths
from calibrate.measure.study.greedy_spec import ModelDrafter, NgramDrafter, speculative_decode, teacher_forced, vanilla_decode
from calibrate.measure.study.token_classes import step_offsets, token_class
from calibrate.measure.torch_engine import KVState


def load_causal_lm(path: Path, dtype: str = "bfloat16"):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, dtype)).eval()


def batched_greedy(model, tok, prompts: list[list[int]], max_new: int, batch: int = 8) -> list[list[int]]:
    """Greedy continuations (left-padded batches; stops at EOS)."""
    import torch

    out = []
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    for s in range(0, len(prompts), batch):
        chunk = prompts[s:s + batch]
        width = max(len(p) for p in chunk)
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in chunk])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
        with torch.inference_mode():
            gen = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, do_sample=False,
                                 pad_token_id=pad)
        for row in gen[:, width:].tolist():
            eos = next((i for i, t in enumerate(row) if t == tok.eos_token_id), None)
            out.append(row if eos is None else row[:eos + 1])
    return out


@dataclass
class ProblemTokens:
    """Teacher-forced view of one problem's greedy output y."""

    problem_id: str
    prompt_len: int
    y: list[int]
    texts: list[str]
    entropy: np.ndarray           # target entropy (nats) at the position that produced y[t]
    tf_agree: np.ndarray          # target teacher-forced argmax == y[t] (numerics check)
    match: dict[str, np.ndarray] = field(default_factory=dict)   # per model draft: draft argmax == y[t]
    ngram: dict[str, list[list[int]]] = field(default_factory=dict)  # per n-gram draft: proposal at t


def teacher_forced_view(target, drafts: dict, ngram_drafts: dict, tok, pid: str, prompt: list[int],
                        y: list[int], gamma_max: int) -> ProblemTokens:
    import torch

    ids = prompt + y
    sl = slice(len(prompt) - 1, len(ids) - 1)  # positions whose next token is y[t]
    lt = teacher_forced(target, ids)[sl]
    lp = torch.log_softmax(lt, -1)
    ent = -(lp.exp() * lp).sum(-1).numpy()
    yt = np.array(y)
    pt = ProblemTokens(pid, len(prompt), y, [tok.decode([t]) for t in y], ent, lt.argmax(-1).numpy() == yt)
    for name, model in drafts.items():
        pt.match[name] = teacher_forced(model, ids)[sl].argmax(-1).numpy() == yt
    for name, nd in ngram_drafts.items():
        pt.ngram[name] = [nd.propose(ids[:len(prompt) + t], gamma_max) for t in range(len(y))]
    return pt


def run_avail(pt: ProblemTokens, draft: str, gamma_max: int) -> tuple[np.ndarray, np.ndarray]:
    """(run, avail) arrays for ``acceptance.replay_greedy``."""
    n = len(pt.y)
    if draft in pt.match:
        return run_lengths(pt.match[draft], gamma_max), np.full(n, gamma_max)
    props = pt.ngram[draft]
    run = np.zeros(n, dtype=int)
    for t, prop in enumerate(props):
        r = 0
        while r < len(prop) and t + r < n and prop[r] == pt.y[t + r]:
            r += 1
        run[t] = r
    return run, np.array([len(p) for p in props])


def replay_logs(tokens: list[ProblemTokens], draft: str, gamma: int, gamma_max: int) -> list[tuple[int, int]]:
    log = []
    for pt in tokens:
        run, avail = run_avail(pt, draft, gamma_max)
        log += replay_greedy(run, avail, gamma, len(pt.y))
    return log


def token_table(tokens: list[ProblemTokens]):
    """One row per generated token: class, offsets, entropy, and per-draft teacher-forced match."""
    import pandas as pd

    rows = []
    for pt in tokens:
        offs = step_offsets(pt.texts)
        for t, tx in enumerate(pt.texts):
            row = {"problem_id": pt.problem_id, "t": t, "text": tx, "token_class": token_class(tx),
                   "step_offset": offs[t], "context_tokens": pt.prompt_len + t, "entropy_nats": float(pt.entropy[t])}
            for name, m in pt.match.items():
                row[f"match:{name}"] = bool(m[t])
            for name, props in pt.ngram.items():
                row[f"match:{name}"] = bool(props[t][:1] == [pt.y[t]])
                row[f"proposed:{name}"] = bool(props[t])
            rows.append(row)
    return pd.DataFrame(rows)


def timed_runs(target_model, drafters: dict, prompts: list[list[int]], max_new: int, gammas: list[int],
               eos: set[int], log=print) -> dict:
    """Vanilla twice (before/after, median) and every (draft, gamma) once per problem, interleaved."""
    target = KVState(target_model)
    van_t, decode_s, runs = [], [], []
    for i, prompt in enumerate(prompts):
        v1 = vanilla_decode(target, prompt, max_new, eos)
        for name, dr in drafters.items():
            for g in gammas:
                r = speculative_decode(target, dr, prompt, max_new, g, eos)
                runs.append({"problem": i, "draft": name, "gamma": g, "time_s": r.time_s, "tokens": len(r.tokens),
                             "same_tokens": r.tokens == v1.tokens, "log": r.log, "draft_pass_s": r.draft_pass_s,
                             "verify_s": r.verify_s})
            log(f"  timed problem {i}: {name} done")
        v2 = vanilla_decode(target, prompt, max_new, eos)
        van_t.append(statistics.median([v1.time_s, v2.time_s]))
        decode_s += v1.decode_s + v2.decode_s
    return {"vanilla_time_s": van_t, "decode_pass_s": statistics.median(decode_s), "runs": runs}


def now_s() -> float:
    return time.perf_counter()
