"""The draft-head study (``specsim study draft-head``, issue 17a; ``docs/draft-head-cpu.md``): train the EAGLE-1-style
head of :mod:`calibrate.measure.study.draft_head` on CPU, replay its acceptance against the study's other drafts, time greedy
speculative decoding with it interleaved with plain decoding, and write the report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from calibrate.measure.study.draft_head import head_runs, require_model_dir, save_head, train_head, validate_gamma
from calibrate.measure.study.run import _cpu_model
from simulator.inputs.loading import save_figure_atomic, write_atomic

# -- the study: train, replay against the study's drafts, time, report ----------------------------------

HEAD_DIR_NAME = "draft-head"


def run_draft_head_study(cfg: dict, out: Path, command: str, log=print) -> dict:
    """``specsim study draft-head``: see ``docs/draft-head-cpu.md``. ``cfg`` keys: see ``cli.draft_head``."""
    import platform
    import statistics
    from datetime import datetime, timezone

    import torch
    import transformers
    from transformers import AutoTokenizer

    from calibrate.measure.datasets import INSTRUCTION, load_problems
    from calibrate.measure.model_cache import SMOLLM2, cut_draft, default_draft_name
    from calibrate.measure.study import measure
    from calibrate.measure.study.acceptance import (acceptance_length, conditional_acceptance, per_position_acceptance,
                                            replay_greedy, speedup_per_position)
    from calibrate.measure.study.distill import distill_draft
    from calibrate.measure.study.greedy_spec import NgramDrafter

    gammas = list(cfg["gammas"])
    for g in gammas + list(cfg["timed_gammas"]):
        validate_gamma(g, "--gamma")
    gmax = max(gammas)
    cache_dir = Path(cfg["model_cache"])
    target_dir = require_model_dir(cache_dir / SMOLLM2)
    t_start = time.perf_counter()
    torch.manual_seed(cfg["seed"])
    torch.set_num_threads(cfg["train_threads"])
    tok = AutoTokenizer.from_pretrained(str(target_dir))
    chat = lambda q: tok.encode(tok.apply_chat_template([{"role": "user", "content": f"{INSTRUCTION}\n\n{q}"}],
                                                        add_generation_prompt=True, tokenize=False), add_special_tokens=False)
    target = measure.load_causal_lm(target_dir, "float32")
    eos = {tok.eos_token_id}
    eval_probs = load_problems("gsm8k", cfg["problems"], cfg["seed"])
    prompts = [chat(p.question) for p in eval_probs]
    train_probs = load_problems("gsm_symbolic", cfg["train_problems"], cfg["seed"] + 1000)
    tprompts = [chat(p.question) for p in train_probs]
    log(f"target greedy: {len(prompts)} held-out GSM8K + {len(tprompts)} gsm_symbolic training problems "
        f"x {cfg['max_new_tokens']} tokens")
    t0 = time.perf_counter()
    ys = measure.batched_greedy(target, tok, prompts, cfg["max_new_tokens"])
    tys = measure.batched_greedy(target, tok, tprompts, cfg["max_new_tokens"])
    greedy_s = time.perf_counter() - t0
    # -- 1. train the head
    log(f"training the head: {cfg['epochs']} epochs, batch {cfg['batch']}, lr {cfg['lr']}, "
        f"feature weight {cfg['feature_weight']}, {cfg['unroll']} chain steps trained")
    head, train_rec = train_head(target, [p + y for p, y in zip(tprompts, tys)], [len(p) for p in tprompts], epochs=cfg["epochs"], batch=cfg["batch"],
                                 lr=cfg["lr"], feature_weight=cfg["feature_weight"], unroll=cfg["unroll"], seed=cfg["seed"],
                                 max_train_s=cfg["max_train_s"], log=log)
    head_dir = cache_dir / HEAD_DIR_NAME / f"{SMOLLM2}-eagle1-seed{cfg['seed']}"
    save_head(head, head_dir, {k: v for k, v in train_rec.items() if k != "history"})
    train_rec.update({"saved_to": str(head_dir), "train_dataset": f"gsm_symbolic seed {cfg['seed'] + 1000}",
                      "threads": cfg["train_threads"], "greedy_targets_s": greedy_s})
    # -- 2. the study's drafts on the same problems
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
            distill_rec = distill_draft(cut_dir, ddir, list(zip(tprompts, tys)), cfg["distill_steps"], seed=cfg["seed"], log=log)
            distill_rec["saved_to"] = str(ddir)
            drafts["cut4-distilled"] = measure.load_causal_lm(ddir, "float32")
    ngram = {"ngram": NgramDrafter()}
    log("exact replay: head chains and teacher-forced draft matches on the held-out problems")
    t0 = time.perf_counter()
    views = [measure.teacher_forced_view(target, drafts, ngram, tok, p.problem_id, pr, y, gmax)
             for p, pr, y in zip(eval_probs, prompts, ys)]
    runs = [head_runs(head, target, pr, y, gmax) for pr, y in zip(prompts, ys)]
    replay_s = time.perf_counter() - t0
    acc = {}
    names = ["head", *drafts, "ngram"]
    for d in names:
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
    # -- 3. wall clock: interleaved plain / speculative repeats, one thread
    torch.set_num_threads(cfg["threads"])
    log(f"timed runs: {cfg['timed_problems']} problem(s) x gammas {cfg['timed_gammas']} x {cfg['repeats']} interleaved "
        f"repeats (plain, head, ngram, ...), {cfg['threads']} thread(s)")
    timed = timed_interleaved(target, head, prompts[:cfg["timed_problems"]], cfg["max_new_tokens"], cfg["timed_gammas"],
                              cfg["repeats"], eos, log)
    rows = []
    dec = timed["decode_pass_s"]
    for d in ("head", "ngram"):
        for g in cfg["timed_gammas"]:
            rs = [r for r in timed["runs"] if r["draft"] == d and r["gamma"] == g]
            plain = [r for r in timed["runs"] if r["draft"] == "plain" and r["gamma"] == g]
            speed = statistics.median([r["time_s"] for r in plain]) / statistics.median([r["time_s"] for r in rs])
            speed_cpu = statistics.median([r["cpu_s"] for r in plain]) / statistics.median([r["cpu_s"] for r in rs])
            passes = [x for r in rs for x in r["draft_pass_s"]]
            c = statistics.median(passes) / dec if passes else 0.0
            if d == "ngram":  # one lookup per iteration, not per drafted token
                c = c / g
            ver = [s for r in rs for k, s in r["verify_s"] if k == g]
            v = statistics.median(ver) / dec
            a_g = np.array(acc[d]["per_gamma"][g]["a"])
            rows.append({"draft": d, "gamma": g, "measured": speed, "measured_cpu": speed_cpu, "c": c, "v": v,
                         "E_replay": acc[d]["per_gamma"][g]["E"],
                         "E_timed": acceptance_length([x for r in rs[:1] for x in r["log"]]),
                         "predicted": speedup_per_position(a_g, c, v), "predicted_v1": speedup_per_position(a_g, c),
                         "plain_s": [r["time_s"] for r in plain], "spec_s": [r["time_s"] for r in rs],
                         "same_tokens": all(r["same_tokens"] for r in rs)})
            rows[-1]["err"] = rows[-1]["predicted"] / speed - 1
    prov = {"command": command, "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "platform": platform.platform(), "cpu_model": _cpu_model(), "cpu_count": __import__("os").cpu_count(),
            "torch": torch.__version__, "transformers": transformers.__version__, "seed": cfg["seed"], "config": cfg,
            "target": str(target_dir), "feature": "output of the final decoder layer, before the final RMSNorm",
            "eval_problems": [p.problem_id for p in eval_probs], "train_problems": len(train_probs),
            "generated_tokens": int(sum(len(y) for y in ys)), "replay_s": replay_s,
            "decode_pass_s": dec, "loadavg_before_after_timing": timed["loadavg"], "runtime_s": None}
    head_a = acc["head"]["per_gamma"][gmax]["a"]
    result = {"provenance": prov, "train": train_rec, "distill": distill_rec, "acceptance": acc, "speedup": rows,
              "token_acceptance": [float(x) for x in head_a[:8]],
              "token_acceptance_note": "a_i = P(first i head drafts accepted) (calibrate.measure.study.acceptance), replayed at "
                                       f"gamma = {gmax} on the held-out problems; the simulator's workload.token_acceptance"}
    prov["runtime_s"] = time.perf_counter() - t_start
    out.mkdir(parents=True, exist_ok=True)
    write_report(result, out)
    return result


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
    gmax = max(gammas)
    names = list(acc)
    _plot(acc, gammas, out / "acceptance.png")
    L = [f"# EAGLE-style draft head for SmolLM2-135M on CPU vs the study's drafts", "",
         f"Command: `{prov['command']}`  ", f"Date: {prov['date']}; {prov['cpu_model']} ({prov['cpu_count']} CPUs, "
         f"{prov['platform']}); torch {prov['torch']}, transformers {prov['transformers']}; seed {prov['seed']}; "
         f"runtime {prov['runtime_s']:.0f} s.", "",
         "Head: concat(embed(x_{t+1}), f_t) -> Linear(2H->H) -> 1 LlamaDecoderLayer (target config, initialised from "
         "the target's last layer) -> target's final norm -> target's tied LM head (frozen). f_t = "
         f"{prov['feature']}.", "",
         f"## Acceptance (exact replay, {len(prov['eval_problems'])} held-out GSM8K problems, "
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
    L += ["", "![acceptance](acceptance.png)", "", "## Training", ""]
    L.append(f"Head: {tr['trainable_params']:,} trainable parameters (fc {2 * 576 * 576:,} + one decoder layer); "
             f"{tr['sequences']} sequences ({tr['train_dataset']}, prompt + target greedy), {tr['positions']:,} positions; "
             f"{tr['steps']} steps ({tr['epochs']} epochs x batch {tr['batch']}, AdamW lr {tr['lr']}, warm-up 10 + linear decay), "
             f"{tr['threads']} threads; features precomputed once (no grad) in {tr['precompute_s']:.0f} s; training {tr['train_s']:.0f} s wall, "
             f"{tr['train_cpu_s']:.0f} CPU-s" + (" (stopped at the CPU-time budget)" if tr["stopped_at_budget"] else "") + ".")
    L.append(f"Loss = sum over chain steps 1..{tr['unroll']} (step s > 1 fed the head's own step s-1 feature, "
             "EAGLE-3-style training-time test) of CE(target argmax, generated positions) + "
             f"{tr['feature_weight']} x smooth-L1(predicted feature / per-dim RMS, target's next feature / per-dim RMS) "
             f"(per-dim RMS median {tr['feature_rms_median']:.1f}, max {tr['feature_rms_max']:.1f}): "
             f"CE {tr['ce_first']:.3f} -> {tr['ce_last']:.3f}, feature term {tr['reg_first']:.4f} -> {tr['reg_last']:.4f}, "
             f"train top-1 {tr['train_top1_last']:.3f} (last 5 steps). Saved (not committed) to `{tr['saved_to']}`.")
    if res.get("distill"):
        ds = res["distill"]
        L.append(f"Distilled cut4 (calibrate/measure/study/distill.py, same sequences): {ds['steps']} steps, batch {ds['batch']}, "
                 f"{ds['trained_params']:,} trained params, {ds['train_s']:.0f} s, loss {ds['loss_first']:.3f} -> {ds['loss_last']:.3f}.")
    L += ["", "## Wall clock (greedy, 1 thread, interleaved plain / head / n-gram repeats)", "",
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
    for r in res["speedup"]:
        L.append(f"| {r['draft']} | {r['gamma']} | {_f(r['measured'])}x | {_f(r['measured_cpu'])}x | {_f(r['predicted'])}x | {r['err'] * 100:+.0f}% | "
                 f"{_f(r['c'], 3)} | {_f(r['v'])} | {_f(r['E_replay'])} | {_f(r['E_timed'])} | "
                 f"{', '.join(_f(x) for x in r['plain_s'])} | {', '.join(_f(x) for x in r['spec_s'])} |")
    L += ["", "E[M] timed: from the first timed run of the timed problem(s) only (the replay covers all held-out problems).",
          "", "## Files", "", "- `results.json`: everything above, the thinned training curve, `token_acceptance` "
          "(a_1..a_8 of the head, for a simulator workload / `draft.acceptance`).", "- `acceptance.png`.", ""]
    write_atomic(out / "README.md", "\n".join(L))


def _plot(acc: dict, gammas: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
