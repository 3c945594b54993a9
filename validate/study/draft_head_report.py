"""The draft-head study's report: ``results.json``, ``acceptance.png`` and ``README.md``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from simulator.inputs.loading import save_figure_atomic, write_atomic
from simulator.report.plots import pyplot


def _f(x, nd=2) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{x:.{nd}f}"


def write_report(res: dict, out: Path) -> None:
    """results.json (no per-step history beyond a thinned curve), acceptance.png, README.md."""
    acc, prov, tr = res["acceptance"], res["provenance"], res["train"]
    hist = tr.pop("history", [])
    tr["history_thinned"] = hist[:: max(1, len(hist) // 40)] + hist[-1:]
    for r in res["speedup"]:
        for lg_key in ("log",):
            r.pop(lg_key, None)
    write_atomic(out / "results.json", json.dumps(res, indent=1, default=float))
    gammas = sorted(int(g) for g in next(iter(acc.values()))["per_gamma"])
    _plot(acc, gammas, out / "acceptance.png")
    L = [f"# EAGLE-style draft head for SmolLM2-135M on CPU vs the study's drafts", "",
         f"Command: `{prov['command']}`  ", f"Date: {prov['date']}; {prov['cpu_model']} ({prov['cpu_count']} CPUs, "
         f"{prov['platform']}); torch {prov['torch']}, transformers {prov['transformers']}; seed {prov['seed']}; "
         f"runtime {prov['runtime_s']:.0f} s.", "",
         "Head: concat(embed(x_{t+1}), f_t) -> Linear(2H->H) -> 1 LlamaDecoderLayer (target config, initialised from "
         "the target's last layer) -> target's final norm -> target's tied LM head (frozen). f_t = "
         f"{prov['feature']}.", ""]
    L += _acceptance_lines(acc, prov, gammas)
    L += ["", "![acceptance](acceptance.png)", "", "## Training", ""]
    L += _training_lines(tr, res.get("distill"))
    L += _wall_clock_lines(prov, res["speedup"])
    L += ["", "E[M] timed: from the first timed run of the timed problem(s) only (the replay covers all held-out problems).",
          "", "## Files", "", "- `results.json`: everything above, the thinned training curve, `token_acceptance` "
          "(a_1..a_8 of the head, for a simulator workload / `draft.acceptance`).", "- `acceptance.png`.", ""]
    write_atomic(out / "README.md", "\n".join(L))


def _acceptance_lines(acc: dict, prov: dict, gammas: list[int]) -> list[str]:
    """Tables of per-position, conditional acceptance and acceptance length per draft."""
    gmax = max(gammas)
    names = list(acc)
    L = [f"## Acceptance (exact replay, {len(prov['eval_problems'])} held-out GSM8K problems, "
         f"{prov['generated_tokens']} target tokens)", "",
         "a_i = P(first i drafts accepted) at γ = " + str(gmax) + "; α = first-draft (teacher-forced) top-1 match rate.", "",
         "| draft | α | " + " | ".join(f"a_{i}" for i in range(1, gmax + 1)) + " |",
         "|---|---|" + "---|" * gmax]
    for d in names:
        L.append(f"| {d} | {_f(acc[d]['alpha'])} | " + " | ".join(_f(x) for x in acc[d]["a_max"]) + " |")
    L += ["", "Conditional P(draft i accepted | 1..i-1 accepted) at γ = " + str(gmax) + ":", "",
          "| draft | " + " | ".join(f"i={i}" for i in range(1, gmax + 1)) + " |", "|---|" + "---|" * gmax]
    for d in names:
        L.append(f"| {d} | " + " | ".join(_f(x) for x in acc[d]["conditional"]) + " |")
    L += ["", "Acceptance length E[M] (tokens per target verify pass, replayed at each γ):", "",
          "| draft | " + " | ".join(f"γ={g}" for g in gammas) + " |", "|---|" + "---|" * len(gammas)]
    for d in names:
        L.append(f"| {d} | " + " | ".join(_f(acc[d]["per_gamma"][g]["E"]) for g in gammas) + " |")
    return L


def _training_lines(tr: dict, ds: dict | None) -> list[str]:
    L = [f"Head: {tr['trainable_params']:,} trainable parameters (fc {2 * 576 * 576:,} + one decoder layer); "
         f"{tr['sequences']} sequences ({tr['train_dataset']}, prompt + target greedy), {tr['positions']:,} positions; "
         f"{tr['steps']} steps ({tr['epochs']} epochs x batch {tr['batch']}, AdamW lr {tr['lr']}, warm-up 10 + linear decay), "
         f"{tr['threads']} threads; features precomputed once (no grad) in {tr['precompute_s']:.0f} s; training {tr['train_s']:.0f} s wall, "
         f"{tr['train_cpu_s']:.0f} CPU-s" + (" (stopped at the CPU-time budget)" if tr["stopped_at_budget"] else "") + ".",
         f"Loss = sum over chain steps 1..{tr['unroll']} (step s > 1 fed the head's own step s-1 feature, "
         "EAGLE-3-style training-time test) of CE(target argmax, generated positions) + "
         f"{tr['feature_weight']} x smooth-L1(predicted feature / per-dim RMS, target's next feature / per-dim RMS) "
         f"(per-dim RMS median {tr['feature_rms_median']:.1f}, max {tr['feature_rms_max']:.1f}): "
         f"CE {tr['ce_first']:.3f} -> {tr['ce_last']:.3f}, feature term {tr['reg_first']:.4f} -> {tr['reg_last']:.4f}, "
         f"train top-1 {tr['train_top1_last']:.3f} (last 5 steps). Saved (not committed) to `{tr['saved_to']}`."]
    if ds:
        L.append(f"Distilled cut4 (calibrate/measure/study/distill.py, same sequences): {ds['steps']} steps, batch {ds['batch']}, "
                 f"{ds['trained_params']:,} trained params, {ds['train_s']:.0f} s, loss {ds['loss_first']:.3f} -> {ds['loss_last']:.3f}.")
    return L


def _wall_clock_lines(prov: dict, rows: list[dict]) -> list[str]:
    L = ["", "## Wall clock (greedy, 1 thread, interleaved plain / head / n-gram repeats)", "",
         "The machine is a shared VM with other jobs running: per-pass costs move with the load "
         "(1-min load average before / after timing: "
         f"{prov['loadavg_before_after_timing'][0][0]:.2f} / {prov['loadavg_before_after_timing'][1][0]:.2f} on 2 CPUs). "
         f"Target decode pass (median): {prov['decode_pass_s'] * 1e3:.1f} ms. c = draft pass / decode pass "
         "(n-gram: one lookup per iteration / γ), v = verify pass over γ+1 tokens / decode pass; "
         "predicted S = E[M] / (γ c + v) with the replayed E[M] and the measured c, v. "
         "Measured = median(plain wall time) / median(speculative wall time); CPU = the same ratio of process CPU "
         "times (1 thread: robust to this box pausing or starving low-priority jobs, not to cache contention). Every speculative run's output equalled plain greedy token for token "
         "(asserted).", "",
         "| draft | γ | measured | CPU | predicted | error | c | v | E[M] replay | E[M] timed | plain s (runs) | spec s (runs) |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        L.append(f"| {r['draft']} | {r['gamma']} | {_f(r['measured'])}x | {_f(r['measured_cpu'])}x | {_f(r['predicted'])}x | {r['err'] * 100:+.0f}% | "
                 f"{_f(r['c'], 3)} | {_f(r['v'])} | {_f(r['E_replay'])} | {_f(r['E_timed'])} | "
                 f"{', '.join(_f(x) for x in r['plain_s'])} | {', '.join(_f(x) for x in r['spec_s'])} |")
    return L


def _plot(acc: dict, gammas: list[int], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.6), dpi=90)
    for d, a in acc.items():
        ax.plot(gammas, [a["per_gamma"][g]["E"] for g in gammas], marker="o", label=d)
    ax.set_xlabel("γ (drafted tokens per iteration)")
    ax.set_ylabel("E[M] (tokens per verify)")
    ax.set_title("Acceptance length, held-out GSM8K (exact replay)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure_atomic(fig, path, dpi=None, bbox_inches=None)
    plt.close(fig)
