"""The draft-head study's measurements (``specsim study draft-head``; ``docs/draft-head-cpu.md``): train the
EAGLE-1-style head of :mod:`calibrate.measure.study.draft_head` on CPU, replay its acceptance against the study's
other drafts, and time greedy speculative decoding with it interleaved with plain decoding.
``validate.study.draft_head_study`` compares them with the predictions and writes the report."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from calibrate.measure.study.draft_head import head_runs, require_model_dir, save_head, train_head

HEAD_DIR_NAME = "draft-head"


@dataclass
class DraftHeadMeasurements:
    """What :func:`measure_draft_head` measured, for the comparison and the report."""

    target_dir: Path
    eval_probs: list
    train_probs: list
    ys: list[list[int]]  # the target's greedy outputs on the held-out problems
    train_rec: dict
    distill_rec: dict | None
    acc: dict  # per draft: alpha, per-gamma acceptance, a at the largest gamma, conditional acceptance
    timed: dict  # :func:`timed_interleaved`
    replay_s: float
    versions: dict  # torch and transformers versions


@dataclass
class _Targets:
    """The target, its tokenizer, the problems and the target's greedy outputs on them."""

    target: object
    tok: object
    eval_probs: list
    prompts: list[list[int]]
    ys: list[list[int]]
    train_probs: list
    tprompts: list[list[int]]
    tys: list[list[int]]
    greedy_s: float


def _greedy_targets(cfg: dict, target_dir: Path, log) -> _Targets:
    from transformers import AutoTokenizer

    from calibrate.measure.datasets import INSTRUCTION, load_problems
    from calibrate.measure.study import measure

    tok = AutoTokenizer.from_pretrained(str(target_dir))
    chat = lambda q: tok.encode(tok.apply_chat_template([{"role": "user", "content": f"{INSTRUCTION}\n\n{q}"}],
                                                        add_generation_prompt=True, tokenize=False), add_special_tokens=False)
    target = measure.load_causal_lm(target_dir, "float32")
    eval_probs = load_problems("gsm8k", cfg["problems"], cfg["seed"])
    prompts = [chat(p.question) for p in eval_probs]
    train_probs = load_problems("gsm_symbolic", cfg["train_problems"], cfg["seed"] + 1000)
    tprompts = [chat(p.question) for p in train_probs]
    log(f"target greedy: {len(prompts)} held-out GSM8K + {len(tprompts)} gsm_symbolic training problems "
        f"x {cfg['max_new_tokens']} tokens")
    t0 = time.perf_counter()
    ys = measure.batched_greedy(target, tok, prompts, cfg["max_new_tokens"])
    tys = measure.batched_greedy(target, tok, tprompts, cfg["max_new_tokens"])
    return _Targets(target, tok, eval_probs, prompts, ys, train_probs, tprompts, tys, time.perf_counter() - t0)


def _train(cfg: dict, t: _Targets, cache_dir: Path, log):
    """Train the head on the training problems' prompt + greedy output, save it; (head, training record)."""
    from calibrate.measure.model_cache import SMOLLM2

    log(f"training the head: {cfg['epochs']} epochs, batch {cfg['batch']}, lr {cfg['lr']}, "
        f"feature weight {cfg['feature_weight']}, {cfg['unroll']} chain steps trained")
    head, train_rec = train_head(t.target, [p + y for p, y in zip(t.tprompts, t.tys)], [len(p) for p in t.tprompts],
                                 epochs=cfg["epochs"], batch=cfg["batch"], lr=cfg["lr"],
                                 feature_weight=cfg["feature_weight"], unroll=cfg["unroll"], seed=cfg["seed"],
                                 max_train_s=cfg["max_train_s"], log=log)
    head_dir = cache_dir / HEAD_DIR_NAME / f"{SMOLLM2}-eagle1-seed{cfg['seed']}"
    save_head(head, head_dir, {k: v for k, v in train_rec.items() if k != "history"})
    train_rec.update({"saved_to": str(head_dir), "train_dataset": f"gsm_symbolic seed {cfg['seed'] + 1000}",
                      "threads": cfg["train_threads"], "greedy_targets_s": t.greedy_s})
    return head, train_rec


def _study_drafts(cfg: dict, t: _Targets, cache_dir: Path, target_dir: Path, log) -> tuple[dict, dict | None]:
    """The study's cut4 and its distilled copy on the same sequences (``compare_cut``); (drafts, distill record)."""
    from calibrate.measure.model_cache import cut_draft, default_draft_name
    from calibrate.measure.study import measure
    from calibrate.measure.study.distill import distill_draft

    drafts, distill_rec = {}, None
    if cfg["compare_cut"]:
        cut_dir = cache_dir / default_draft_name(4)
        if not (cut_dir / "config.json").is_file():
            log(f"cutting the 4-layer draft -> {cut_dir}")
            cut_draft(target_dir, 4, cut_dir)
        drafts["cut4"] = measure.load_causal_lm(cut_dir, "float32")
        if cfg["distill_steps"]:
            ddir = cache_dir / HEAD_DIR_NAME / f"{cut_dir.name}-distilled-seed{cfg['seed']}"
            log(f"distilling cut4 on the same training sequences ({cfg['distill_steps']} steps, as the study)")
            distill_rec = distill_draft(cut_dir, ddir, list(zip(t.tprompts, t.tys)), cfg["distill_steps"], seed=cfg["seed"],
                                        log=log)
            distill_rec["saved_to"] = str(ddir)
            drafts["cut4-distilled"] = measure.load_causal_lm(ddir, "float32")
    return drafts, distill_rec


def _replayed_acceptance(gammas: list[int], views: list, runs: list, ys: list, drafts: dict, ngram: dict) -> dict:
    """Per draft (the head, the study's drafts, the n-gram): alpha and the exactly replayed acceptance per gamma."""
    from calibrate.measure.study import measure
    from calibrate.measure.study.acceptance import (acceptance_length, conditional_acceptance, per_position_acceptance,
                                                    replay_greedy)

    gmax = max(gammas)
    acc = {}
    for d in ["head", *drafts, *ngram]:
        per_g = {}
        for g in gammas:
            if d == "head":
                lg = [x for r, y in zip(runs, ys) for x in replay_greedy(r, np.full(len(y), gmax), g, len(y))]
            else:
                lg = measure.replay_logs(views, d, g, gmax)
            a = per_position_acceptance(lg, g)
            per_g[g] = {"a": a.tolist(), "E": acceptance_length(lg), "iterations": len(lg)}
        if d == "head":  # first draft from true features = teacher-forced top-1 match, generated positions t >= 1
            alpha = float(np.mean(np.concatenate([r[1:] >= 1 for r in runs])))
        elif d in drafts:
            alpha = float(np.mean(np.concatenate([v.match[d] for v in views])))
        else:
            alpha = float(np.mean([pr[:1] == [v.y[t]] for v in views for t, pr in enumerate(v.ngram[d]) if pr]))
        acc[d] = {"alpha": alpha, "per_gamma": per_g, "a_max": per_g[gmax]["a"],
                  "conditional": conditional_acceptance(np.array(per_g[gmax]["a"])).tolist()}
    return acc


def measure_draft_head(cfg: dict, log=print) -> DraftHeadMeasurements:
    """Greedy targets, the trained head, the study's drafts, exact replay of every draft, interleaved timed runs.
    ``cfg`` keys: see ``cli.draft_head``."""
    import torch
    import transformers

    from calibrate.measure.model_cache import SMOLLM2
    from calibrate.measure.study import measure
    from calibrate.measure.study.greedy_spec import NgramDrafter

    gmax = max(cfg["gammas"])
    cache_dir = Path(cfg["model_cache"])
    target_dir = require_model_dir(cache_dir / SMOLLM2)
    torch.manual_seed(cfg["seed"])
    torch.set_num_threads(cfg["train_threads"])
    t = _greedy_targets(cfg, target_dir, log)
    head, train_rec = _train(cfg, t, cache_dir, log)  # -- 1. train the head
    drafts, distill_rec = _study_drafts(cfg, t, cache_dir, target_dir, log)  # -- 2. the study's drafts, same problems
    ngram = {"ngram": NgramDrafter()}
    log("exact replay: head chains and teacher-forced draft matches on the held-out problems")
    t0 = time.perf_counter()
    views = [measure.teacher_forced_view(t.target, drafts, ngram, t.tok, p.problem_id, pr, y, gmax)
             for p, pr, y in zip(t.eval_probs, t.prompts, t.ys)]
    runs = [head_runs(head, t.target, pr, y, gmax) for pr, y in zip(t.prompts, t.ys)]
    replay_s = time.perf_counter() - t0
    acc = _replayed_acceptance(list(cfg["gammas"]), views, runs, t.ys, drafts, ngram)
    # -- 3. wall clock: interleaved plain / speculative repeats, one thread
    torch.set_num_threads(cfg["threads"])
    log(f"timed runs: {cfg['timed_problems']} problem(s) x gammas {cfg['timed_gammas']} x {cfg['repeats']} interleaved "
        f"repeats (plain, head, ngram, ...), {cfg['threads']} thread(s)")
    timed = timed_interleaved(t.target, head, t.prompts[:cfg["timed_problems"]], cfg["max_new_tokens"], cfg["timed_gammas"],
                              cfg["repeats"], {t.tok.eos_token_id}, log)
    return DraftHeadMeasurements(target_dir, t.eval_probs, t.train_probs, t.ys, train_rec, distill_rec, acc, timed,
                                 replay_s, {"torch": torch.__version__, "transformers": transformers.__version__})


def timed_interleaved(target_model, head, prompts, max_new, gammas, repeats, eos, log=print) -> dict:
    """Per problem and gamma: (plain, head, ngram) x ``repeats``, interleaved. Asserts spec == plain tokens."""
    import os

    from calibrate.measure.study.greedy_spec import (HeadDrafter, HiddenKVState, NgramDrafter, speculative_decode,
                                             vanilla_decode)
    from calibrate.measure.torch_engine import KVState

    plain_kv, hid_kv = KVState(target_model), HiddenKVState(target_model)
    drafters = {"head": HeadDrafter(head), "ngram": NgramDrafter()}
    runs, decode_s = [], []
    load0 = os.getloadavg()
    vanilla_decode(plain_kv, prompts[0], 8, eos)  # warm-up
    for i, prompt in enumerate(prompts):
        for g in gammas:
            for rep in range(repeats):
                c0 = time.process_time()
                v = vanilla_decode(plain_kv, prompt, max_new, eos)
                decode_s += v.decode_s
                runs.append({"problem": i, "draft": "plain", "gamma": g, "rep": rep, "time_s": v.time_s,
                             "cpu_s": time.process_time() - c0})
                for name, dr in drafters.items():
                    c0 = time.process_time()
                    r = speculative_decode(hid_kv, dr, prompt, max_new, g, eos)
                    cpu = time.process_time() - c0
                    if r.tokens != v.tokens:
                        raise AssertionError(f"speculative output ({name}, gamma {g}) differs from greedy on problem {i}")
                    runs.append({"problem": i, "draft": name, "gamma": g, "rep": rep, "time_s": r.time_s, "cpu_s": cpu,
                                 "same_tokens": True, "log": r.log, "draft_pass_s": r.draft_pass_s, "verify_s": r.verify_s})
            log(f"  timed problem {i} gamma {g}: done")
    import statistics

    return {"runs": runs, "decode_pass_s": statistics.median(decode_s), "loadavg": [load0, os.getloadavg()]}
