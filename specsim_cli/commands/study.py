"""``specsim measure study specdecode``: thin entry point (parse, run_study, print)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

from simulator.option_values import gamma_list_option, int_list_text
from simulator.output_contract import writes


@writes(out="folder")
def specdecode(
    out: Path = typer.Option(..., "--out", help="report directory"),
    problems: int = typer.Option(10, "--problems", help="held-out GSM8K problems"),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", help="greedy tokens generated per problem"),
    gammas: list[int] = gamma_list_option("1-8", "--gamma", "--gammas", help="replayed gammas", example="1-8"),
    drafts: str = typer.Option("cut4,cut8,cut15,ngram,bf16copy", "--draft", "--drafts",
                               help="drafts: comma list of cut<k> | ngram | bf16copy"),
    timed_problems: int = typer.Option(1, "--timed-problems", help="problems with timed runs"),
    timed_gammas: list[int] = gamma_list_option("1,2,4", "--timed-gammas", help="gammas of the timed runs (among "
                                                "--gamma)", example="1,2,4"),
    train_steps: int = typer.Option(60, "--train-steps", help="distillation steps (0 = skip)"),
    train_problems: int = typer.Option(24, "--train-problems", help="problems the acceptance is fitted on (the rest are held out)"),
    seed: int = typer.Option(0, "--seed", help="problem sampling and training seed"),
) -> None:
    """Acceptance vs gamma, measured vs predicted speedup, rejections, a distilled draft, what-if.

    Example: specsim measure study specdecode --problems 10 --gamma 1-8 --draft cut4,ngram --out out/specdecode-study"""
    from validate.study.run import StudyConfig, run_study

    cfg = StudyConfig(problems=problems, max_new_tokens=max_new_tokens, gammas=list(gammas),
                      drafts=[d.strip() for d in drafts.split(",") if d.strip()], timed_problems=timed_problems,
                      timed_gammas=list(timed_gammas), train_steps=train_steps, train_problems=train_problems,
                      seed=seed).validate()
    cmd = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv and "specsim" in sys.argv[0] else \
        "specsim measure study specdecode " + f"--problems {problems} --max-new-tokens {max_new_tokens} " \
        f"--gamma {int_list_text(gammas)} --draft {drafts} --timed-problems {timed_problems} " \
        f"--timed-gammas {int_list_text(timed_gammas)} --train-steps {train_steps} " \
        f"--train-problems {train_problems} --seed {seed} --out {out}"
    run_study(cfg, out, cmd, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"wrote {out / 'README.md'}")


@writes(out="folder")
def draft_head(
    out: Path = typer.Option(..., "--out", help="report directory"),
    problems: int = typer.Option(10, "--problems", help="held-out GSM8K problems"),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", help="greedy tokens generated per problem"),
    gammas: list[int] = gamma_list_option("1-8", "--gamma", "--gammas", help="replayed gammas", example="1-8"),
    timed_problems: int = typer.Option(1, "--timed-problems", help="problems with timed runs"),
    timed_gammas: list[int] = gamma_list_option("1,2,3,4", "--timed-gammas", help="gammas of the timed runs",
                                                example="1-4"),
    repeats: int = typer.Option(3, "--repeats", help="interleaved (plain, head, ngram) repeats per timed gamma"),
    train_problems: int = typer.Option(24, "--train-problems", help="gsm_symbolic training problems"),
    epochs: int = typer.Option(20, "--epochs", help="training epochs of the head"),
    batch: int = typer.Option(8, "--batch", help="training batch (sequences)"),
    lr: float = typer.Option(2e-3, "--lr", help="learning rate (AdamW)"),
    feature_weight: float = typer.Option(1.0, "--feature-weight", help="weight of the smooth-L1 feature term"),
    unroll: int = typer.Option(3, "--unroll", help="chain steps trained with the head's own fed-back feature (1 = EAGLE-1 only)"),
    max_train_s: float = typer.Option(600.0, "--max-train-s", help="stop head training after this many CPU seconds (all threads)"),
    distill_steps: int = typer.Option(60, "--distill-steps", help="distil cut4 as the study does (0 = skip)"),
    compare_cut: bool = typer.Option(True, "--compare-cut/--no-compare-cut", help="include cut4 (and its distilled copy)"),
    model_cache: Path = typer.Option(Path(".cache/models"), "--model-cache", help="folder of the prepared models (specsim measure prepare-models)"),
    train_threads: int = typer.Option(2, "--train-threads", help="torch threads for greedy targets, training, replay "
                                      "(timing always uses 1); 1 is faster when other jobs load the box"),
    seed: int = typer.Option(0, "--seed", help="problem sampling and training seed"),
) -> None:
    """EAGLE-style 1-layer draft head: train on CPU, exact-replay acceptance vs the study's drafts, wall clock.

    Example: specsim measure study draft-head --problems 10 --gamma 1-8 --out out/draft-head"""
    from simulator.errors import InputError

    from calibrate.measure.study.draft_head import require_model_dir
    from validate.study.draft_head_study import run_draft_head_study
    g, tg = list(gammas), list(timed_gammas)
    for name, val, lo in (("--problems", problems, 1), ("--timed-problems", timed_problems, 1), ("--repeats", repeats, 1),
                          ("--train-problems", train_problems, 1), ("--epochs", epochs, 1), ("--batch", batch, 1),
                          ("--max-new-tokens", max_new_tokens, 8), ("--distill-steps", distill_steps, 0), ("--unroll", unroll, 1)):
        if val < lo:
            raise InputError(None, name, f"must be >= {lo} (got {val})")
    if timed_problems > problems:
        raise InputError(None, "--timed-problems", f"must be <= --problems ({problems})")
    if lr <= 0 or feature_weight < 0 or max_train_s <= 0:
        raise InputError(None, "--lr/--feature-weight/--max-train-s", "need lr > 0, feature weight >= 0, max-train-s > 0")
    from calibrate.measure.model_cache import SMOLLM2

    require_model_dir(model_cache / SMOLLM2)
    cfg = {"problems": problems, "max_new_tokens": max_new_tokens, "gammas": g, "timed_problems": timed_problems,
           "timed_gammas": tg, "repeats": repeats, "train_problems": train_problems, "epochs": epochs, "batch": batch,
           "lr": lr, "feature_weight": feature_weight, "unroll": unroll, "max_train_s": max_train_s, "distill_steps": distill_steps,
           "compare_cut": compare_cut, "model_cache": str(model_cache), "seed": seed, "threads": 1, "train_threads": train_threads}
    cmd = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv and "specsim" in sys.argv[0] else \
        "specsim measure study draft-head " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in (
            ("problems", problems), ("max_new_tokens", max_new_tokens), ("gamma", int_list_text(gammas)),
            ("timed_problems", timed_problems), ("timed_gammas", int_list_text(timed_gammas)), ("repeats", repeats),
            ("train_problems", train_problems), ("epochs", epochs), ("batch", batch), ("lr", lr),
            ("feature_weight", feature_weight), ("unroll", unroll), ("max_train_s", max_train_s), ("distill_steps", distill_steps),
            ("train_threads", train_threads), ("seed", seed), ("out", out)))
    run_draft_head_study(cfg, out, cmd, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"wrote {out / 'README.md'}")
