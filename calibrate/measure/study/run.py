"""The study pipeline: measure -> predict -> explain -> distil -> transfer -> report."""

from __future__ import annotations

import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from simulator.errors import InputError
from simulator.inputs.loading import write_atomic

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
    traces: str = "../shared/data/specreason-aime-traces"
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


def _layers(draft: str) -> int | None:
    return int(draft[3:]) if draft.startswith("cut") else None


def _sim_layers(draft: str) -> int | None:
    """Draft depth for the simulator: the cut's layers; the full 30 for the bf16 copy."""
    return 30 if draft == "bf16copy" else _layers(draft.removesuffix("-distilled"))


def _ensure_models(cfg: StudyConfig, log) -> tuple[Path, dict[str, Path]]:
    from calibrate.measure.model_cache import SMOLLM2, cut_draft, default_draft_name

    cache = Path(cfg.model_cache)
    target = cache / SMOLLM2
    if not (target / "config.json").is_file():
        raise InputError(str(target), None, "model cache missing: run `specsim calibrate prepare-models` first")
    drafts = {}
    for d in cfg.drafts + ([f"cut{cfg.distill_layers}"] if cfg.train_steps else []):
        k = _layers(d)
        if k is None:
            continue
        path = cache / default_draft_name(k)
        if not (path / "config.json").is_file():
            log(f"cutting draft {d} -> {path}")
            cut_draft(target, k, path)
        drafts[d] = path
    return target, drafts


def run_study(cfg: StudyConfig, out: Path, command: str, log=print) -> dict:
    import torch
    from transformers import AutoTokenizer

    from calibrate.measure.datasets import INSTRUCTION, load_problems
    from calibrate.measure.study import breakdown, measure, simulate
    from calibrate.measure.study.acceptance import (acceptance_length, conditional_acceptance, fit_alpha,
                                            per_position_acceptance, speedup_iid, speedup_per_position)
    from calibrate.measure.study.distill import distill_draft
    from calibrate.measure.study.greedy_spec import ModelDrafter, NgramDrafter

    cfg.validate()
    t_start = time.perf_counter()
    torch.set_num_threads(cfg.threads)
    torch.manual_seed(cfg.seed)
    target_dir, draft_dirs = _ensure_models(cfg, log)
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    chat = lambda q: tok.encode(tok.apply_chat_template([{"role": "user", "content": f"{INSTRUCTION}\n\n{q}"}],
                                                        add_generation_prompt=True, tokenize=False), add_special_tokens=False)
    eval_probs = load_problems("gsm8k", cfg.problems, cfg.seed)
    prompts = [chat(p.question) for p in eval_probs]
    target = measure.load_causal_lm(target_dir, cfg.dtype)
    eos = {tok.eos_token_id}
    # -- 1. target greedy outputs on the held-out (GSM8K) problems
    log(f"greedy target outputs: {len(prompts)} problems x {cfg.max_new_tokens} tokens")
    ys = measure.batched_greedy(target, tok, prompts, cfg.max_new_tokens)
    # -- 2. distil the smallest cut on target outputs for training (gsm_symbolic) problems
    distill_info, drafts = None, {d: measure.load_causal_lm(p, cfg.dtype) for d, p in draft_dirs.items()}
    if "bf16copy" in cfg.drafts:
        drafts["bf16copy"] = measure.load_causal_lm(target_dir, "bfloat16")
    if cfg.train_steps:
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
    model_drafts = {d: m for d, m in drafts.items() if d in cfg.drafts or d.endswith("-distilled")}
    ngram = {"ngram": NgramDrafter()} if "ngram" in cfg.drafts else {}
    names = list(model_drafts) + list(ngram)
    # -- 3. teacher-forced matches -> replayed accept logs for every gamma
    log("teacher-forced draft matches")
    views = [measure.teacher_forced_view(target, model_drafts, ngram, tok, p.problem_id, pr, y, max(cfg.gammas))
             for p, pr, y in zip(eval_probs, prompts, ys)]
    tokens = measure.token_table(views)
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
    # -- 4. timed runs (interleaved with vanilla) on a subset
    log(f"timed runs: {cfg.timed_problems} problems x gammas {cfg.timed_gammas} x {names}")
    drafters = {d: ModelDrafter(m) for d, m in model_drafts.items()} | ngram
    timed = measure.timed_runs(target, drafters, prompts[:cfg.timed_problems], cfg.max_new_tokens, cfg.timed_gammas, eos, log)
    t_dec = timed["decode_pass_s"]
    sim_source = simulate.cpu_cost_profile()[1]
    rows = []
    for d in names:
        rs = [r for r in timed["runs"] if r["draft"] == d]
        c = statistics.median([x for r in rs for x in r["draft_pass_s"]] or [0.0]) / t_dec
        if d in ngram:  # a lookup per iteration, not per token
            c = c / max(1, statistics.median(cfg.timed_gammas))
        a_max = np.array(acc[d]["per_gamma"][max(cfg.gammas)]["a"])
        sim = simulate.simulate_cpu_speedups(a_max, _sim_layers(d), cfg.timed_gammas) \
            if d in model_drafts else {}
        for g in cfg.timed_gammas:
            rg = [r for r in rs if r["gamma"] == g]
            spec_t = sum(r["time_s"] for r in rg)
            van_t = sum(timed["vanilla_time_s"][r["problem"]] for r in rg)
            ver = [s for r in rg for k, s in r["verify_s"] if k == g]
            v = statistics.median(ver) / t_dec if ver else 1.0
            a_g = np.array(acc[d]["per_gamma"][g]["a"])
            real_log = [x for r in rg for x in r["log"]]
            rows.append({"draft": d, "gamma": g, "measured": van_t / spec_t, "c": c, "v": v,
                         "E_replay": acc[d]["per_gamma"][g]["E"], "E_timed": acceptance_length(real_log),
                         "same_tokens": all(r["same_tokens"] for r in rg),
                         "iid": speedup_iid(acc[d]["alpha"], g, c), "per_position": speedup_per_position(a_g, c),
                         "per_position_v": speedup_per_position(a_g, c, v), "simulator": sim.get(g, float("nan"))})
    for r in rows:
        for k in ("iid", "per_position", "per_position_v", "simulator"):
            r[f"err_{k}"] = r[k] / r["measured"] - 1
    # -- 5. why drafts are rejected
    log("rejection breakdowns")
    tok_bd = {d: breakdown.token_breakdowns(tokens, d) for d in names}
    steps_bd = breakdown.specreason_step_breakdowns(Path(cfg.traces))
    # -- 6. transfer the distilled gain to the reference deployments
    transfer = None
    if cfg.train_steps:
        before = np.array(acc[f"cut{cfg.distill_layers}"]["per_gamma"][max(cfg.gammas)]["a"])
        after = np.array(acc[f"cut{cfg.distill_layers}-distilled"]["per_gamma"][max(cfg.gammas)]["a"])
        log("simulator what-if transfer")
        transfer = simulate.transfer_gain(before, after, list(range(1, 9)))
    import transformers

    prov = {"command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "hardware": f"{platform.processor() or platform.machine()}, {__import__('os').cpu_count()} CPU cores",
            "cpu_model": _cpu_model(), "torch": torch.__version__, "transformers": transformers.__version__,
            "threads": cfg.threads, "dtype": cfg.dtype, "target": str(target_dir),
            "drafts": {d: str(p) for d, p in draft_dirs.items()}, "seed": cfg.seed, "config": asdict(cfg),
            "eval_problems": [p.problem_id for p in eval_probs], "runtime_s": None,
            "simulator_cost_profile": sim_source, "decode_pass_s": t_dec,
            "tf_agreement": float(np.mean(np.concatenate([v.tf_agree for v in views]))),
            "generated_tokens": int(sum(len(y) for y in ys))}
    result = {"provenance": prov, "acceptance": acc, "speedup": rows, "distill": distill_info, "transfer": transfer,
              "token_breakdowns": {d: {k: v.to_dict(orient="records") for k, v in bd.items()} for d, bd in tok_bd.items()},
              "step_breakdowns": {k: v.to_dict(orient="records") for k, v in steps_bd.items()}}
    prov["runtime_s"] = time.perf_counter() - t_start
    from calibrate.measure.study.report import write_report

    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "result.json", __import__("json").dumps(result, default=float))  # raw; re-render with write_report

    write_report(result, out)
    return result


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()
