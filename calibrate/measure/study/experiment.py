"""The speculative-decoding study's measurement stage: its configuration, the models, and every measurement on them.

:func:`measure_study` runs, on real small models (torch, CPU): the target's greedy outputs on held-out problems,
an optional distilled draft, teacher-forced draft matches replayed into per-position acceptance for every gamma,
and timed speculative runs interleaved with plain decoding. ``validate.study.run`` compares these measurements
with the predictions and writes the report."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from simulator.errors import InputError
from simulator.paths import shared

DRAFT_CHOICES = ("cut4", "cut6", "cut8", "cut15", "ngram", "bf16copy")


@dataclass
class StudyConfig:
    problems: int = 10
    max_new_tokens: int = 96
    dtype: str = "float32"  # target and cut drafts; bf16copy is the target in bfloat16
    gammas: list[int] = field(default_factory=lambda: list(range(1, 9)))
    drafts: list[str] = field(default_factory=lambda: ["cut4", "cut8", "cut15", "ngram", "bf16copy"])
    timed_problems: int = 1
    timed_gammas: list[int] = field(default_factory=lambda: [1, 2, 4])
    train_problems: int = 24
    train_steps: int = 60
    distill_layers: int = 4
    seed: int = 0
    model_cache: str = ".cache/models"
    traces: str = field(default_factory=lambda: str(shared("specreason-aime-traces")))
    threads: int = 1

    def validate(self) -> "StudyConfig":
        for name in ("problems", "max_new_tokens", "timed_problems"):
            if getattr(self, name) < 1:
                raise InputError(None, f"--{name.replace('_', '-')}", "must be >= 1")
        if self.max_new_tokens < 8:
            raise InputError(None, "--max-new-tokens", "must be >= 8")
        if self.timed_problems > self.problems:
            raise InputError(None, "--timed-problems", f"must be <= --problems ({self.problems})")
        bad = [d for d in self.drafts if d not in DRAFT_CHOICES]
        if bad or not self.drafts:
            raise InputError(None, "--draft", f"unknown draft(s) {bad}; choose from {', '.join(DRAFT_CHOICES)}")
        if self.train_steps < 0 or (self.train_steps and self.train_problems < 1):
            raise InputError(None, "--train-steps", "must be >= 0 (with --train-problems >= 1)")
        if not set(self.timed_gammas) <= set(self.gammas):
            raise InputError(None, "--timed-gammas", "must be a subset of --gamma")
        return self


def cut_layers(draft: str) -> int | None:
    """The layers of a cut draft (``cut4`` -> 4); None for any other draft."""
    return int(draft[3:]) if draft.startswith("cut") else None


def _ensure_models(cfg: StudyConfig, log) -> tuple[Path, dict[str, Path]]:
    from calibrate.measure.model_cache import SMOLLM2, cut_draft, default_draft_name

    cache = Path(cfg.model_cache)
    target = cache / SMOLLM2
    if not (target / "config.json").is_file():
        raise InputError(str(target), None, "model cache missing: run `specsim measure prepare-models` first")
    drafts = {}
    for d in cfg.drafts + ([f"cut{cfg.distill_layers}"] if cfg.train_steps else []):
        k = cut_layers(d)
        if k is None:
            continue
        path = cache / default_draft_name(k)
        if not (path / "config.json").is_file():
            log(f"cutting draft {d} -> {path}")
            cut_draft(target, k, path)
        drafts[d] = path
    return target, drafts


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


@dataclass
class StudyMeasurements:
    """What :func:`measure_study` measured, for the comparison and the report."""

    target_dir: Path
    draft_dirs: dict[str, Path]
    eval_probs: list
    ys: list[list[int]]  # the target's greedy outputs on the held-out problems
    distill_info: dict | None
    model_drafts: dict  # draft name -> model (cuts, the bf16 copy, the distilled cut)
    ngram: dict  # draft name -> n-gram drafter
    views: list  # teacher-forced view of each held-out problem
    tokens: object  # pandas DataFrame: one row per generated token (``measure.token_table``)
    acc: dict  # per draft: alpha, per-gamma acceptance, conditional acceptance
    timed: dict  # ``measure.timed_runs``
    versions: dict  # torch and transformers versions

    @property
    def names(self) -> list[str]:
        return list(self.model_drafts) + list(self.ngram)


def _tokenizer(target_dir: Path):
    """The target's tokenizer and the chat prompt (token ids) of a question."""
    from transformers import AutoTokenizer

    from calibrate.measure.datasets import INSTRUCTION

    tok = AutoTokenizer.from_pretrained(str(target_dir))
    chat = lambda q: tok.encode(tok.apply_chat_template([{"role": "user", "content": f"{INSTRUCTION}\n\n{q}"}],
                                                        add_generation_prompt=True, tokenize=False), add_special_tokens=False)
    return tok, chat


def _distil(cfg: StudyConfig, target, tok, chat, draft_dirs: dict[str, Path], drafts: dict, log) -> dict | None:
    """Distil the smallest cut on the target's outputs for training (gsm_symbolic) problems; adds it to ``drafts``."""
    from calibrate.measure.datasets import load_problems
    from calibrate.measure.study import measure
    from calibrate.measure.study.distill import distill_draft

    if not cfg.train_steps:
        return None
    train = load_problems("gsm_symbolic", cfg.train_problems, cfg.seed + 1000)
    tp = [chat(p.question) for p in train]
    log(f"distillation data: target greedy on {len(tp)} gsm_symbolic problems")
    ty = measure.batched_greedy(target, tok, tp, cfg.max_new_tokens)
    dname = f"cut{cfg.distill_layers}"
    ddir = Path(cfg.model_cache) / f"{draft_dirs[dname].name}-distilled"
    distill_info = distill_draft(draft_dirs[dname], ddir, list(zip(tp, ty)), cfg.train_steps, seed=cfg.seed, log=log)
    distill_info.update({"base_draft": dname, "saved_to": str(ddir), "train_dataset": f"gsm_symbolic seed {cfg.seed + 1000}",
                         "eval_dataset": "gsm8k (held out)"})
    drafts[f"{dname}-distilled"] = measure.load_causal_lm(ddir, cfg.dtype)
    return distill_info


def _acceptance(cfg: StudyConfig, views: list, tokens, names: list[str], model_drafts: dict) -> dict:
    """Per draft: the token match rate's alpha, the replayed per-position acceptance for every gamma, and the
    conditional acceptance at the largest gamma."""
    from calibrate.measure.study import measure
    from calibrate.measure.study.acceptance import (acceptance_length, conditional_acceptance, fit_alpha,
                                                    per_position_acceptance)

    acc = {}
    for d in names:
        per_g = {}
        for g in cfg.gammas:
            lg = measure.replay_logs(views, d, g, max(cfg.gammas))
            a = per_position_acceptance(lg, g)
            per_g[g] = {"a": a.tolist(), "E": acceptance_length(lg), "iterations": len(lg),
                        "accepted_hist": np.bincount([x[1] for x in lg if x[0] > 0], minlength=g + 1).tolist()}
        col = tokens[f"match:{d}"] if d in model_drafts else tokens.loc[tokens[f"proposed:{d}"], f"match:{d}"]
        acc[d] = {"alpha": fit_alpha(float(col.mean())), "per_gamma": per_g,
                  "conditional": conditional_acceptance(np.array(per_g[max(cfg.gammas)]["a"])).tolist()}
    return acc


def measure_study(cfg: StudyConfig, log=print) -> StudyMeasurements:
    """Greedy outputs, the distilled draft, teacher-forced matches and their replayed acceptance, timed runs."""
    import torch
    import transformers

    from calibrate.measure.datasets import load_problems
    from calibrate.measure.study import measure
    from calibrate.measure.study.greedy_spec import ModelDrafter, NgramDrafter

    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    target_dir, draft_dirs = _ensure_models(cfg, log)
    tok, chat = _tokenizer(target_dir)
    eval_probs = load_problems("gsm8k", cfg.problems, cfg.seed)
    prompts = [chat(p.question) for p in eval_probs]
    target = measure.load_causal_lm(target_dir, cfg.dtype)
    eos = {tok.eos_token_id}
    # -- 1. target greedy outputs on the held-out (GSM8K) problems
    log(f"greedy target outputs: {len(prompts)} problems x {cfg.max_new_tokens} tokens")
    ys = measure.batched_greedy(target, tok, prompts, cfg.max_new_tokens)
    # -- 2. distil the smallest cut on target outputs for training (gsm_symbolic) problems
    drafts = {d: measure.load_causal_lm(p, cfg.dtype) for d, p in draft_dirs.items()}
    if "bf16copy" in cfg.drafts:
        drafts["bf16copy"] = measure.load_causal_lm(target_dir, "bfloat16")
    distill_info = _distil(cfg, target, tok, chat, draft_dirs, drafts, log)
    model_drafts = {d: m for d, m in drafts.items() if d in cfg.drafts or d.endswith("-distilled")}
    ngram = {"ngram": NgramDrafter()} if "ngram" in cfg.drafts else {}
    names = list(model_drafts) + list(ngram)
    # -- 3. teacher-forced matches -> replayed accept logs for every gamma
    log("teacher-forced draft matches")
    views = [measure.teacher_forced_view(target, model_drafts, ngram, tok, p.problem_id, pr, y, max(cfg.gammas))
             for p, pr, y in zip(eval_probs, prompts, ys)]
    tokens = measure.token_table(views)
    acc = _acceptance(cfg, views, tokens, names, model_drafts)
    # -- 4. timed runs (interleaved with vanilla) on a subset
    log(f"timed runs: {cfg.timed_problems} problems x gammas {cfg.timed_gammas} x {names}")
    drafters = {d: ModelDrafter(m) for d, m in model_drafts.items()} | ngram
    timed = measure.timed_runs(target, drafters, prompts[:cfg.timed_problems], cfg.max_new_tokens, cfg.timed_gammas, eos, log)
    return StudyMeasurements(target_dir, draft_dirs, eval_probs, ys, distill_info, model_drafts, ngram, views, tokens,
                             acc, timed, {"torch": torch.__version__, "transformers": transformers.__version__})
