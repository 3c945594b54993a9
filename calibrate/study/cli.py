"""``specsim study specdecode``: thin entry point (parse, run_study, print)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import typer

app = typer.Typer(help="Studies on real small models + the simulator.", no_args_is_help=True)


@app.command("specdecode")
def specdecode(
    out: Path = typer.Option(..., "--out", help="report directory"),
    problems: int = typer.Option(10, "--problems", help="held-out GSM8K problems"),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens"),
    gammas: str = typer.Option("1-8", "--gammas", help="'LO-HI' or comma list"),
    drafts: str = typer.Option("cut4,cut8,cut15,ngram,bf16copy", "--drafts", help="comma list of cut<k> | ngram | bf16copy"),
    timed_problems: int = typer.Option(1, "--timed-problems", help="problems with timed runs"),
    timed_gammas: str = typer.Option("1,2,4", "--timed-gammas"),
    train_steps: int = typer.Option(60, "--train-steps", help="distillation steps (0 = skip)"),
    train_problems: int = typer.Option(24, "--train-problems"),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Acceptance vs gamma, measured vs predicted speedup, rejections, a distilled draft, what-if."""
    from calibrate.study.run import StudyConfig, parse_gammas, run_study

    cfg = StudyConfig(problems=problems, max_new_tokens=max_new_tokens, gammas=parse_gammas(gammas),
                      drafts=[d.strip() for d in drafts.split(",") if d.strip()], timed_problems=timed_problems,
                      timed_gammas=parse_gammas(timed_gammas), train_steps=train_steps, train_problems=train_problems,
                      seed=seed).validate()
    cmd = "specsim " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv and "specsim" in sys.argv[0] else \
        "specsim study specdecode " + f"--problems {problems} --max-new-tokens {max_new_tokens} --gammas {gammas} " \
        f"--drafts {drafts} --timed-problems {timed_problems} --timed-gammas {timed_gammas} --train-steps {train_steps} " \
        f"--train-problems {train_problems} --seed {seed} --out {out}"
    run_study(cfg, out, cmd, log=lambda m: print(m, file=sys.stderr, flush=True))
    print(f"wrote {out / 'README.md'}")
