"""The speculative-decoding study's report: markdown + PNG figures + figures.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.inputs.loading import save_figure_atomic, write_atomic
from simulator.report.plots import pyplot


def _fig_acceptance(res, out: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(1, 3, figsize=(15, 4))
    for d, a in res["acceptance"].items():
        gs = sorted(int(g) for g in a["per_gamma"])
        ax[0].plot(gs, [a["per_gamma"][g]["E"] for g in gs], "o-", label=d)
        amax = a["per_gamma"][max(gs)]["a"]
        ax[1].plot(range(1, len(amax) + 1), amax, "o-", label=d)
        ax[2].plot(range(1, len(amax) + 1), a["conditional"], "o-", label=d)
    ax[0].set(xlabel="gamma", ylabel="acceptance length E[M] (tokens / iteration)", title="Acceptance length vs gamma")
    ax[1].set(xlabel="draft position i", ylabel="a_i = P(first i accepted)", title="Per-position acceptance", yscale="log")
    ax[2].set(xlabel="draft position i", ylabel="P(accept i | 1..i-1 accepted)", title="Conditional acceptance")
    for x in ax:
        x.grid(alpha=0.3)
    ax[0].legend()
    fig.tight_layout()
    save_figure_atomic(fig, out / "acceptance.png", dpi=80, bbox_inches=None)
    plt.close(fig)


def _fig_speedup(df: pd.DataFrame, out: Path) -> None:
    plt = pyplot()
    drafts = list(dict.fromkeys(df.draft))
    fig, ax = plt.subplots(1, len(drafts), figsize=(4 * len(drafts), 3.6), sharey=True, squeeze=False)
    for x, d in zip(ax[0], drafts):
        s = df[df.draft == d]
        x.plot(s.gamma, s.measured, "ko-", lw=2, label="measured")
        for k, st in (("iid", "s--"), ("per_position", "^--"), ("per_position_v", "v-"), ("simulator", "d:")):
            if s[k].notna().any():
                x.plot(s.gamma, s[k], st, label=k)
        x.axhline(1, color="gray", lw=0.8)
        x.set(title=d, xlabel="gamma")
        x.grid(alpha=0.3)
    ax[0][0].set_ylabel("speedup over vanilla target")
    ax[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure_atomic(fig, out / "speedup.png", dpi=80, bbox_inches=None)
    plt.close(fig)


def _fig_rejections(bd: dict, steps: dict, out: Path, draft: str) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(2, 3, figsize=(15, 7))
    for x, (k, col) in zip(ax[0], (("token_class", "token_class"), ("step_offset", "step_offset_bin"),
                                    ("entropy", "entropy_bin"))):
        t = pd.DataFrame(bd[k])
        x.bar(t[col].astype(str), t.accept_rate)
        for i, n in enumerate(t.tokens):
            x.text(i, 0.01, str(n), ha="center", fontsize=7, rotation=90)
        x.set(title=f"{draft}: acceptance by {k}", ylim=(0, 1))
        x.tick_params(axis="x", rotation=30)
    for x, k, col in ((ax[1][0], "context", "context_bin"), (ax[1][1], "chain_position", "chain_bin"),
                      (ax[1][2], "start_word", "start_word")):
        if k == "context":
            t = pd.DataFrame(bd[k])
            x.bar(t[col].astype(str), t.accept_rate)
            x.set(title=f"{draft}: acceptance by context length", ylim=(0, 1))
        else:
            t = pd.DataFrame(steps[k])
            if k == "start_word":
                t = t[t.steps >= 10]
            x.bar(t[col].astype(str), t.low_share)
            x.set(title=f"SpecReason: share of small-model steps scored < 7 by {k}", ylim=(0, 1))
        x.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    save_figure_atomic(fig, out / "rejections.png", dpi=80, bbox_inches=None)
    plt.close(fig)


def _fig_distill(res, df: pd.DataFrame, out: Path) -> None:
    if not res["distill"]:
        return
    plt = pyplot()
    b = res["distill"]["base_draft"]
    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    for d in (b, f"{b}-distilled"):
        a = res["acceptance"][d]
        g = max(int(x) for x in a["per_gamma"])
        ax[0].plot(range(1, g + 1), a["per_gamma"][g]["a"], "o-", label=d)
        s = df[df.draft == d]
        ax[1].plot(s.gamma, s.measured, "o-", label=f"{d} measured")
        ax[1].plot(s.gamma, s.per_position_v, "--", label=f"{d} per-position+v")
    ax[0].set(xlabel="draft position i", ylabel="a_i", title="Held-out acceptance before/after distillation", yscale="log")
    ax[1].set(xlabel="gamma", ylabel="speedup", title="Held-out speedup before/after")
    for x in ax:
        x.grid(alpha=0.3)
        x.legend(fontsize=7)
    fig.tight_layout()
    save_figure_atomic(fig, out / "distill.png", dpi=80, bbox_inches=None)
    plt.close(fig)


def _md_table(df: pd.DataFrame, floatfmt: str = ".3f") -> str:
    return df.to_markdown(index=False, floatfmt=floatfmt)


def write_report(res: dict, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    df = pd.DataFrame(res["speedup"])
    p = res["provenance"]
    drafts = list(res["acceptance"])
    # the distilled cut (if any) is the most informative: an untrained cut rejects nearly everything
    main = next((d for d in drafts if d.endswith("distilled")), next((d for d in drafts if d.startswith("cut")), drafts[0]))
    write_atomic(out / "figures.json", json.dumps(_summary(res, df), indent=1, default=float))  # first: survives a plot failure
    _fig_acceptance(res, out)
    _fig_speedup(df, out)
    _fig_rejections(res["token_breakdowns"][main], res["step_breakdowns"], out, main)
    _fig_distill(res, df, out)
    write_atomic(out / "README.md", _markdown(res, df, main))
    return out


def _summary(res, df) -> dict:
    return {"provenance": res["provenance"], "acceptance": {d: {"alpha": a["alpha"], **{f"E_g{g}": v["E"] for g, v in a["per_gamma"].items()},
                                                               "a_gmax": a["per_gamma"][max(a["per_gamma"], key=int)]["a"]}
                                                           for d, a in res["acceptance"].items()},
            "speedup": df.to_dict(orient="records"), "distill": res["distill"], "transfer": res["transfer"],
            "token_breakdowns": res["token_breakdowns"], "step_breakdowns": res["step_breakdowns"]}


def _markdown(res, df, main) -> str:
    p = res["provenance"]
    L = [f"# Speculative decoding on a reasoning task", "",
         f"Reproduce: `{p['command']}`  ", f"Runtime {p['runtime_s'] / 60:.1f} min on {p['cpu_model']} "
         f"({p['hardware']}, torch threads {p['threads']}); torch {p['torch']}, transformers {p['transformers']}; "
         f"{p['dtype']}; date {p['date']}; seed {p['seed']}.  ",
         f"Target `{p['target']}`; drafts {', '.join(f'`{k}`' for k in p['drafts'])} (cut-draft folders), n-gram = prompt lookup (n 4..2).  ",
         f"Held-out problems: {len(p['eval_problems'])} GSM8K items ({p['eval_problems'][0]} ...), "
         f"{p['generated_tokens']} greedy target tokens. Target per-token decode pass: {p['decode_pass_s'] * 1e3:.0f} ms (median).  ",
         f"Teacher-forced target argmax agrees with the incremental greedy output on {100 * p['tf_agreement']:.1f}% of tokens (numerics check; 100% means the replay is exact).", "",
         "## Acceptance per draft (replayed for every gamma from teacher-forced matches; exact for greedy)", "",
         "![acceptance](acceptance.png)", ""]
    rows = []
    for d, a in res["acceptance"].items():
        g = max(a["per_gamma"], key=int)
        rows.append({"draft": d, "alpha (token match rate)": a["alpha"],
                     **{f"E[M] g={k}": a["per_gamma"][k]["E"] for k in sorted(a["per_gamma"], key=int) if int(k) in (1, 2, 4, 8)},
                     "a_1..a_4 (g max)": ", ".join(f"{x:.3f}" for x in a["per_gamma"][g]["a"][:4])})
    L += [_md_table(pd.DataFrame(rows)), "", "## Measured vs predicted speedup", "",
          "Measured = sum of vanilla times / sum of speculative times on the timed problems (vanilla run before and after, "
          "median). Predictions: **iid** = Leviathan closed form with alpha and measured c; **per_position** = (1 + sum a_i)/(gamma c + 1); "
          "**per_position_v** = same with the measured verify cost v = T_verify(gamma+1 tokens)/T_decode instead of 1; "
          f"**simulator** = `simulator.engines.analytic` on `cpu-smollm2` with the measured a_i and a cut-k draft, cost profile: {p['simulator_cost_profile']}. "
          "err = predicted/measured - 1.", "", "![speedup](speedup.png)", ""]
    cols = ["draft", "gamma", "measured", "c", "v", "E_replay", "E_timed", "same_tokens", "iid", "err_iid", "per_position",
            "err_per_position", "per_position_v", "err_per_position_v", "simulator", "err_simulator"]
    L += [_md_table(df[cols]), ""]
    errs = {k: float(np.nanmedian(np.abs(df[f"err_{k}"]))) for k in ("iid", "per_position", "per_position_v", "simulator")}
    L += ["Median |error|: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in errs.items()), ""]
    L += ["## Why drafts are rejected", "", "Per-token acceptance given a correct prefix, by class of the target's token, every draft:", ""]
    xs = {d: pd.DataFrame(bd["token_class"]).set_index("token_class").accept_rate for d, bd in res["token_breakdowns"].items()}
    n = pd.DataFrame(res["token_breakdowns"][main]["token_class"]).set_index("token_class").tokens
    L += [_md_table(pd.DataFrame(xs).assign(tokens=n).reset_index()), "",
          f"Details for {main}:", "", "![rejections](rejections.png)", ""]
    for k, bd in res["token_breakdowns"][main].items():
        L += [f"By {k}:", "", _md_table(pd.DataFrame(bd)), ""]
    L += ["Step level (SpecReason, shared third-party traces, threshold 7):", ""]
    for k, bd in res["step_breakdowns"].items():
        L += [f"By {k.strip('_')}:", "", _md_table(pd.DataFrame(bd)), ""]
    if res["distill"]:
        dd = res["distill"]
        L += ["## Distilled draft (held-out GSM8K; trained on gsm_symbolic target outputs)", "", "![distill](distill.png)", "",
              "```", json.dumps(dd, indent=1, default=float), "```", ""]
    if res["transfer"]:
        t = pd.DataFrame(res["transfer"])
        t["a"] = t["a"].map(lambda a: ", ".join(f"{x:.2f}" for x in a[:4]))
        L += ["## What-if: the distilled gain on the reference deployments (simulator, analytic)", "",
              "ASSUMPTION: the relative reduction of the per-position rejection rate measured on the 135M pair carries over to "
              "QwQ-32B / R1-Distill-1.5B; nothing here measures that. Threshold 7, best gamma in 1..8, prior GPU cost profiles.", "",
              _md_table(t), ""]
    return "\n".join(L)
