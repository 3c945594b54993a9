"""The report folder: markdown (``report.md``), figures, ``per_request.csv`` / ``per_run.csv`` /
``speedup.csv`` and ``summary.json``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from simulator.paths import code_version

from .compare import ServingValidation, error_figures, speedup_table
from .fit import FIT_PARAMS


def pct(x: float) -> str:
    """A fraction as a percentage with one decimal; "n/a" when missing."""
    return "n/a" if x is None or not np.isfinite(x) else f"{100 * x:.1f}%"


def spct(x: float) -> str:
    """A signed fraction as a signed percentage with one decimal; "n/a" when missing."""
    return "n/a" if x is None or not np.isfinite(x) else f"{100 * x:+.1f}%"


def _level_key(label: str) -> tuple:
    system, _, level = label.rpartition("/")
    kind, _, v = level.partition("-")
    return (system, kind != "closed", float(v) if v.replace(".", "", 1).isdigit() else 0.0)


_STYLE = {"measured": dict(marker="o", color="k", ls="none", ms=7), "profile": dict(marker="s", ls="--", color="tab:blue"),
          "profile+step-fit": dict(marker="^", ls="-", color="tab:orange"),
          "profile+step-fit+acceptance-fit": dict(marker="v", ls=":", color="tab:red")}
_LOAD_FIGURES = (
    ("latency_vs_concurrency.png", ("latency_p50_s", "ttft_p50_s"), ("median latency (s)", "median TTFT (s)")),
    ("throughput_vs_concurrency.png", ("throughput_rps", "output_tok_per_s"), ("throughput (requests/s)", "output tokens/s")),
)


def _load_axes(ax, pr: pd.DataFrame, col: str, systems: list, colors: dict, models: list) -> None:
    """One run figure against load: closed-loop runs by users, Poisson runs at their measured mean batch."""
    for sysname in systems:
        ps = pr[pr.system == sysname]
        closed, pois = ps[ps["mode"] == "closed"], ps[ps["mode"] == "poisson"]
        tag = f"{sysname} " if len(systems) > 1 else ""
        for m in ["measured", *models]:
            st = dict(_STYLE.get(m, {}))
            if len(systems) > 1:
                st["color"] = colors[sysname] if m != "measured" else st.get("color", "k")
                if m == "measured":
                    st.update(mfc=colors[sysname], color=colors[sysname])
            d = closed[closed.model == m].groupby("users")[col].median()
            if len(d):
                ax.plot(d.index, d.values, label=f"{tag}{m} (closed loop)", **st)
            dp = pois[pois.model == m]
            if len(dp):
                g = dp.groupby("rate_per_s")
                # open loop: placed at the measured time-weighted batch size of the run
                xb = pois[pois.model == "measured"].groupby("rate_per_s")["batch_mean"].median()
                ax.plot(xb.loc[list(g.groups)].values, g[col].median().values, ls="none", mfc="none",
                        marker=st.get("marker", "x"), color=st.get("color", "grey"),
                        ms=9, label=f"{tag}{m} (Poisson, at measured mean batch)")


def _speedup_figure(plt, sp: pd.DataFrame, models: list, colors: dict, out: Path) -> str:
    from simulator.inputs.loading import save_figure_atomic

    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    sps = list(dict.fromkeys(sp.system))
    for sysname in sps:
        for m in ["measured", *models]:
            d = sp[(sp.system == sysname) & (sp.model == m) & (sp["mode"] == "closed")].groupby("users")["speedup"].median()
            if len(d):
                st = dict(_STYLE.get(m, {}))
                if len(sps) > 1:
                    st["color"] = colors.get(sysname, "grey")
                ax.plot(d.index, d.values, label=f"{sysname} {m}" if len(sps) > 1 else m, **st)
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("closed-loop users")
    ax.set_ylabel(f"speedup over {sp.baseline.iloc[0]} (mean latency ratio)")
    ax.set_title(f"{', '.join(sps)} under load")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure_atomic(fig, out / "speedup_vs_concurrency.png")
    plt.close(fig)
    return "speedup_vs_concurrency.png"


def _step_figure(plt, v: ServingValidation, models: list, out: Path) -> str:
    from simulator.inputs.loading import save_figure_atomic

    fig, ax = plt.subplots(figsize=(5.5, 4.2))
    for m in ["measured", *models]:
        d = v.steps[v.steps.model == (models[0] if m == "measured" else m)]
        g = d.groupby("batch")["measured_s" if m == "measured" else "predicted_s"].median() * 1000
        ax.plot(g.index, g.values, label=m, **_STYLE.get(m, {}))
    ax.set_xlabel("batch size (decode-only steps)")
    ax.set_ylabel("median step time (ms)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure_atomic(fig, out / "step_time_vs_batch.png")
    plt.close(fig)
    return "step_time_vs_batch.png"


def plots(v: ServingValidation, out: Path) -> list[str]:
    """The figures (latency and throughput against load, the speedup, step time by batch); returns their names."""
    from simulator.inputs.loading import save_figure_atomic
    from simulator.report.plots import pyplot

    plt = pyplot()
    pr = v.per_run
    names = []
    models = [m for m in pr.model.unique() if m != "measured"]
    systems = list(dict.fromkeys(pr.system))
    colors = {s: f"C{i % 10}" for i, s in enumerate(systems)}  # one colour per system, cycling
    for fname, cols, ylabels in _LOAD_FIGURES:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
        for ax, col, yl in zip(axes, cols, ylabels):
            _load_axes(ax, pr, col, systems, colors, models)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("closed-loop users / Poisson: measured mean batch")
            ax.set_ylabel(yl)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=6)
        save_figure_atomic(fig, out / fname)
        plt.close(fig)
        names.append(fname)
    sp = speedup_table(v)
    if len(sp):
        names.append(_speedup_figure(plt, sp, models, colors, out))
    if len(v.steps):
        names.append(_step_figure(plt, v, models, out))
    return names


def _speculative_section(v: ServingValidation) -> list[str]:
    """Speculative runs: TPOT and acceptance length per run, measured vs each model."""
    pr = v.per_run
    if "accept_len_mean" not in pr or not pr.accept_len_mean.notna().any():
        return []
    h = v.headline.get("speculative", {})
    L = ["", "## Speculative decoding under load", ""]
    if h:
        L += [f"Held-out speculative requests ({h['model']}, n={h['latency_n']}): latency median APE "
              f"{pct(h['latency_median_ape'])} (bias {spct(h['latency_bias'])}), TPOT median APE {pct(h['tpot_median_ape'])} "
              f"(bias {spct(h['tpot_bias'])}), acceptance length median APE {pct(h['accept_len_median_ape'])}.", ""]
    acc = v.headline.get("acceptance")
    if acc:
        L += ["Acceptance used by the `…+acceptance-fit` rows (a_i = P(at least i drafts accepted), measured on "
              "the named runs only):", ""]
        L += [f"- gamma {g}: a = {', '.join(f'{x:.3f}' for x in a['a'])} ({a['iterations']} verifications; "
              f"{', '.join(a['runs'])})" for g, a in acc.items()]
        L += [""]
    L += ["| run | model | role | TPOT meas / pred (ms, median) | TPOT median APE | TPOT bias | acceptance length meas / pred |"
          " latency median APE |", "|---|---|---|---|---|---|---|---|"]
    spec = pr[pr.accept_len_mean.notna() | pr.label.isin(pr[pr.accept_len_mean.notna()].label)]
    for run in sorted(spec.run.unique(), key=lambda r: (_level_key(spec[spec.run == r].label.iloc[0]), r)):
        d = spec[spec.run == run]
        m = d[d.model == "measured"].iloc[0]
        for _, p in d[d.model != "measured"].iterrows():
            L.append(f"| {p.label} | {p.model} | {p.role} | {1e3 * m.tpot_median_s:.1f} / {1e3 * p.tpot_median_s:.1f} | "
                     f"{pct(p.tpot_median_ape)} | {spct(p.tpot_bias)} | {m.accept_len_mean:.3f} / {p.accept_len_mean:.3f} | "
                     f"{pct(p.latency_median_ape)} |")
    L += ["", "Acceptance length = output tokens per verification (accepted drafts + 1; vLLM's mean acceptance length). "
          "Models without `" + "+acceptance-fit` replay each request's own measured verifications (timing alone is "
          "predicted); `+acceptance-fit` draws them from the named runs' a_i (timing and acceptance predicted)."]
    return L


def _itl_section(v: ServingValidation) -> list[str]:
    """vLLM's inter-token latency (one gap per output chunk) of one-engine runs, measured vs each model."""
    pr = v.per_run
    if "itl_mean_ms" not in pr or not pr[pr.model == "measured"].itl_mean_ms.notna().any():
        return []
    h = v.headline.get("itl")
    L = ["", "## Inter-token latency (ITL, one-engine runs)", ""]
    if h:
        L += [f"Held-out runs ({h['model']}, {h['runs']} runs): run mean ITL median APE {pct(h['itl_mean_median_ape'])} "
              f"(bias {spct(h['itl_mean_bias'])}); run p99 ITL median APE {pct(h['itl_p99_median_ape'])} "
              f"(bias {spct(h['itl_p99_bias'])}).", ""]
    L += ["| run | model | role | mean ITL meas / pred (ms) | p99 ITL meas / pred (ms) |", "|---|---|---|---|---|"]
    runs = pr[pr.model == "measured"].dropna(subset=["itl_mean_ms"]).run
    for run in sorted(runs.unique(), key=lambda r: (_level_key(pr[pr.run == r].label.iloc[0]), r)):
        d = pr[pr.run == run]
        m = d[d.model == "measured"].iloc[0]
        folder = Path(run).parents[1].name if "/" in m.label else Path(run).parent.name
        for _, p in d[d.model != "measured"].iterrows():
            L.append(f"| {folder}/{p.label} | {p.model} | {p.role} | {m.itl_mean_ms:.1f} / {p.itl_mean_ms:.1f} | "
                     f"{m.itl_p99_ms:.1f} / {p.itl_p99_ms:.1f} |")
    L += ["", "ITL as `vllm bench serve` measures it: per request, the gaps between successive output chunks after the "
          "first token (measured: ends of the engine steps that gave the request output; predicted: the simulator's "
          "rounds). A verification's accepted tokens are one chunk, so a speculative run's ITL is per iteration."]
    return L


def _bench_section(v: ServingValidation) -> list[str]:
    """`vllm bench serve` runs: the figures of vLLM's own summary, measured (the client's) vs predicted."""
    from .compare import BENCH_FIGURES

    bench = [r for r in v.runs if r.client_side]
    if not bench:
        return []
    pr = v.per_run
    h = v.headline.get("bench")
    L = ["", "## `vllm bench serve` runs: vLLM's summary figures, measured / predicted", ""]
    if h:
        L += [f"Held-out runs ({h['model']}, {h['runs']} runs), median over runs of the absolute error (bias): "
              + "; ".join(f"{name} {pct(h[f'{k}_median_ape'])} ({spct(h[f'{k}_bias'])})" for k, name in BENCH_FIGURES)
              + ".", ""]
    L += ["| run | model | role | TTFT p50 (ms) | TPOT p50 (ms) | ITL p50 (ms) | ITL p99 (ms) | output tok/s |",
          "|---|---|---|---|---|---|---|---|"]
    scale = {"ttft_p50_s": 1e3, "tpot_median_s": 1e3}
    for r in sorted(bench, key=lambda r: (_level_key(r.label), str(r.path))):
        d = pr[pr.run == str(r.path)]
        m = d[d.model == "measured"].iloc[0]
        for _, p in d[d.model != "measured"].iterrows():
            L.append(f"| {r.path} | {p.model} | {p.role} | " + " | ".join(
                f"{scale.get(k, 1) * m[k]:.1f} / {scale.get(k, 1) * p[k]:.1f}" for k, _ in BENCH_FIGURES) + " |")
    L += ["", "Measured: the client's timings (`vllm bench serve --save-detailed`: TTFTs, ITLs, latencies; TPOT per "
          "request (latency - TTFT) / (output tokens - 1)), so HTTP, tokenization and streaming are in them; predicted: "
          "the serving simulator replaying the same users and token counts. The p50 figures are medians over requests "
          "(TTFT, TPOT) or over gaps (ITL), like vLLM's `median_*_ms`."]
    drift = speed_drift(v)
    if drift:
        L += [""] + [f"- {w}" for w in drift]
    return L


# A decode step of more sequences is never faster on the same machine: a held-out level whose measured TPOT p50 is this
# much below the fit level's ran on a faster machine than the fit saw (a shared VM's neighbours changed between levels).
SPEED_DRIFT_TOLERANCE = 0.03


def speed_drift(v: ServingValidation) -> list[str]:
    """Warnings for `vllm bench serve` levels (no speculation) whose measured TPOT p50 is below the fit levels' at fewer
    users: the machine's speed changed between levels, and that run's errors include the change."""
    pr = v.per_run
    meas = pr[pr.model == "measured"].set_index("run")
    plain = {str(r.path): r for r in v.runs if r.client_side and not r.gamma}
    fit_runs = {x for x in pr[pr.role == "fit (in-sample)"].run if x in plain}
    out = []
    for f in sorted(fit_runs):
        t_fit, u_fit = float(meas.loc[f, "tpot_median_s"]), meas.loc[f, "users"]
        for run in sorted(set(plain) - fit_runs):
            t, u = float(meas.loc[run, "tpot_median_s"]), meas.loc[run, "users"]
            if u > u_fit and t < (1.0 - SPEED_DRIFT_TOLERANCE) * t_fit:
                lo = plain[run].meta.get("options", {})
                load = f" (loadavg {lo['loadavg_before'][0]:.2f} -> {lo['loadavg_after'][0]:.2f})" if "loadavg_after" in lo else ""
                out.append(f"WARNING: speed drift: {run} ({int(u)} users) measured TPOT p50 {t * 1e3:.1f} ms, below the fit "
                           f"level {f}'s {t_fit * 1e3:.1f} ms at {int(u_fit)} users{load}: a step of more sequences is "
                           f"never faster on one machine, so the machine ran faster than the fit saw; this run's errors "
                           f"include that change (rerun the ladder on a quiet machine)")
    return out


def _fit_section(f: dict) -> list[str]:
    """The step fit's parameters (where the validation fitted them)."""
    L = ["## Step fit (batch scaling)", "",
         f"Fitted on the {f['steps']} engine steps of levels {', '.join(f['levels'])} only; those runs are "
         "marked *fit (in-sample)* below and excluded from the headline.", "",
         "| parameter | value | relative stderr |", "|---|---|---|"]
    L += [f"| `{k}` | {f['values'][k]:.4g} | "
          + (f"{f['notes'][k]} |" if k in f.get("notes", {}) else f"{f['rel_stderr'][k]:.3g} |"
             if np.isfinite(f["rel_stderr"][k]) else
             f"kept at the profile's value: {f['kept_at_prior'].get(k, 'not pinned')} |")
          for k in f["values"]]
    return L + ["", f"Median |log residual| of the fit steps: {f['median_abs_log_residual']:.3f}.", ""]


def _per_run_section(v: ServingValidation) -> list[str]:
    L = ["## Per run", "",
         "| run | model | role | n | median latency meas/pred (s) | latency median APE | p90 APE | bias | "
         "TTFT median APE | TTFT bias | req/s meas/pred | out tok/s meas/pred | mean batch meas/pred |",
         "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    pr = v.per_run
    for run in sorted(pr.run.unique(), key=lambda r: (_level_key(pr[pr.run == r].label.iloc[0]), r)):
        d = pr[pr.run == run]
        m = d[d.model == "measured"].iloc[0]
        for _, p in d[d.model != "measured"].iterrows():
            folder = Path(run).parents[1].name if "/" in p.label else Path(run).parent.name
            L.append(f"| {folder}/{p.label} | {p.model} | {p.role} | {p.n} | "
                     f"{m.latency_p50_s:.2f} / {p.latency_p50_s:.2f} | {pct(p.latency_median_ape)} | "
                     f"{pct(p.latency_p90_ape)} | {spct(p.latency_bias)} | {pct(p.ttft_median_ape)} | "
                     f"{spct(p.ttft_bias)} | {m.throughput_rps:.3f} / {p.throughput_rps:.3f} | "
                     f"{m.output_tok_per_s:.1f} / {p.output_tok_per_s:.1f} | {_num(m.batch_mean)} / {_num(p.batch_mean)} |")
    return L


def _num(x: float) -> str:
    """A figure of the per-run table, ``-`` where the run has none (a client-side import has no engine steps)."""
    return f"{x:.2f}" if np.isfinite(x) else "-"


def _per_level_section(v: ServingValidation) -> list[str]:
    """Per level, held out, all repeats pooled."""
    L = ["", "## Per concurrency level (held-out requests, repeats pooled)", "",
         "| level | model | n | latency median APE | p90 APE | bias | TTFT median APE | TTFT bias |", "|---|---|---|---|---|---|---|---|"]
    q = v.per_request
    for (label, model), d in sorted(q[q.role == "held out"].groupby(["label", "model"]), key=lambda kv: (_level_key(kv[0][0]), kv[0][1])):
        e, t = error_figures(d, "pred_latency_s", "latency_s"), error_figures(d, "pred_ttft_s", "ttft_s")
        L.append(f"| {label} | {model} | {e['n']} | {pct(e['median_ape'])} | {pct(e['p90_ape'])} | {spct(e['bias'])} | "
                 f"{pct(t['median_ape'])} | {spct(t['bias'])} |")
    return L


def _speedup_section(v: ServingValidation, out: Path) -> list[str]:
    """The speedup over the baseline system under load, written to ``speedup.csv`` too (none without a baseline)."""
    from simulator.inputs.loading import write_atomic

    sp = speedup_table(v)
    if not len(sp):
        return []
    mods = [m for m in v.per_run.model.unique() if m != "measured"]
    L = ["", f"## Speedup over {sp.baseline.iloc[0]} under load (mean latency ratio, median over repeats)", "",
         "| system | level | measured | " + " | ".join(mods) + " |", "|---|---|---|" + "---|" * len(mods)]
    piv = sp.groupby(["system", "level", "model"])["speedup"].median().unstack("model")
    for key in sorted(piv.index, key=lambda k: (k[0], _level_key(k[1]))):
        L.append(f"| {key[0]} | {key[1]} | " + " | ".join(
            f"{piv.loc[key, m]:.3f}" if m in piv and np.isfinite(piv.loc[key, m]) else "n/a" for m in ["measured", *mods])
            + " |")
    write_atomic(out / "speedup.csv", sp.to_csv(index=False))
    return L


def _provenance_section(v: ServingValidation) -> list[str]:
    """Each run's provenance, then the models and how the runs were made."""
    L = ["", "## Provenance", "", f"Predicted by {code_version()}.", "",
         "| run | created | engine | hardware | loadavg before → after | wall s | run command |",
         "|---|---|---|---|---|---|---|"]
    for r in v.runs:
        o = r.meta["options"]
        L.append(f"| {r.path} | {r.meta['created_at']} | {r.meta['engine']} {r.meta['engine_version']} | "
                 f"{r.meta['hardware'].get('cpu_model')} x{r.meta['hardware'].get('cpu_count')} | "
                 f"{o.get('loadavg_before', [None])[:1]} → {o.get('loadavg_after', [None])[:1]} | {o.get('wall_s')} | "
                 f"`{r.meta['command']}` |")
    r0 = v.runs[0]
    models = ", ".join(f"{role} {Path(m.get('path', '?')).name} ({m.get('num_layers')} layers)" for role, m in r0.meta["models"].items())
    if any(r.calls is not None for r in v.runs):
        L += ["", f"Models: {models}; dtype {r0.meta['dtype']}, seed {r0.meta['seed']}, greedy. Whole-system runs "
              "(`specsim measure serve-systems`): every request runs the runner's orchestrator (steps up to a blank "
              "line, scoring, acceptance, budget checked between steps) with the small and base engines colocated; "
              "each request's measured calls are replayed through the serving simulator.", ""]
    else:
        L += ["", f"Models: {models}; dtype {r0.meta['dtype']}, seed {r0.meta['seed']}, greedy, EOS ignored, output "
              "length per request fixed by the seed.", ""]
    return L


def write_report(v: ServingValidation, out: str | Path, command: str, profile_path: str | Path, bar: float | None) -> Path:
    """report.md, per_request.csv, per_run.csv, summary.json, the figures and (with a baseline) speedup.csv."""
    from simulator.inputs.loading import json_text, write_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    figs = plots(v, out)
    write_atomic(out / "per_request.csv", v.per_request.to_csv(index=False))
    write_atomic(out / "per_run.csv", v.per_run.to_csv(index=False))
    h = v.headline
    L = ["# Serving-model validation against real vLLM (concurrent requests)", "",
         f"Command: `{command}`", "", f"Cost profile: `{profile_path}`", ""]
    L += [f"**Headline** ({h['model']}, held-out requests only, n={h['latency_n']}): latency median APE "
          f"{pct(h['latency_median_ape'])}, p90 {pct(h['latency_p90_ape'])}, bias {spct(h['latency_bias'])}; "
          f"TTFT median APE {pct(h['ttft_median_ape'])}, p90 {pct(h['ttft_p90_ape'])}, bias {spct(h['ttft_bias'])}."
          + (f" Bar: {pct(bar)}." if bar is not None else ""), ""]
    if v.fit:
        L += _fit_section(v.fit)
    L += _per_run_section(v) + _per_level_section(v)
    L += _speculative_section(v)
    L += _itl_section(v)
    L += _bench_section(v)
    L += _speedup_section(v, out)
    L += ["", "## Figures", ""] + [f"![{n}]({n})" for n in figs]
    L += _provenance_section(v)
    write_atomic(out / "report.md", "\n".join(L) + "\n")
    write_atomic(out / "summary.json", json_text({"command": command, "code": code_version(), "headline": h, "fit": v.fit,
                                                  "per_run": json.loads(v.per_run.to_json(orient="records"))}, indent=1))
    return out / "report.md"

