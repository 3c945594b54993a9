#!/usr/bin/env bash
# GPU measurement campaign (issue 15): everything a lent H100/H200 runs, in calls of at most 10 minutes,
# so device minutes go to measurement only. The device has torch + transformers but no network and no
# pydantic/simpy/gguf: `prepare` (here) puts their wheels in .cache/gpu-carry, which the device call carries.
#
#   scripts/gpu_campaign.sh prepare                      # here, once: wheels for the device (Python 3.12)
#
# The device calls, each well under the 10-minute limit (carry [".cache/gpu-carry"]; every call starts with
# `bash scripts/gpu_campaign.sh setup &&`, since a machine idle for 30 s is given back bare):
#   1. ARCHS="r1-distill-qwen-1.5b qwen2.5-7b" bash scripts/gpu_campaign.sh static "$OUT"   (~2 x 4 min)
#   2. ARCHS=qwq-32b bash scripts/gpu_campaign.sh static "$OUT"                           (~5 min)
#   3. bash scripts/gpu_campaign.sh e2e "$OUT"                                            (five systems, two pairs)
#   4. bash scripts/gpu_campaign.sh ops "$OUT"
#   5. bash scripts/gpu_campaign.sh steps reports/gpu-campaign-h200/plan.json "$OUT"           (~40 s; torch only, no setup)
#      engine steps under CUDA graphs (issue 31): decode batch 1-256 x context 1k-16k, verification k+1 = 2..9, a draft
#      head; the plan and the model's predictions are made here first (specsim measure step-plan / step-predict)
#   6. bash scripts/gpu_campaign.sh kernels reports/gpu-campaign-2-h200/plan.json "$OUT"      (~3-5 min; torch only)
#      round two (issue 40): bf16 / FP8 GEMMs at m = 1..16k, grouped-GEMM MoE layers, device memory; plan and
#      predictions first (specsim measure kernel-plan --hardware h200 --out reports/gpu-campaign-2-h200, committed),
#      then here: specsim validate kernel-summary reports/gpu-campaign-2-h200 --out .../before-fit.csv
# then here: put every returned tarball in one folder RES and run `scripts/gpu_campaign.sh analyze RES`.
#   scripts/gpu_campaign.sh static OUT [--tiny]          # static-KV-cache + CUDA-graph bench of three architectures
#   scripts/gpu_campaign.sh ops OUT [--tiny]             # per-layer op timings in Vidur's layout (two Vidur shapes)
#   scripts/gpu_campaign.sh e2e OUT [--tiny]             # torch-engine requests of the five systems, 1.5B / 7B (random weights)
#   scripts/gpu_campaign.sh analyze RES                  # here: fit + held-out validation of what the device returned
#
# Each architecture's run directory (microbench.jsonl, bandwidth.json, run.json) is written as produced under
# OUT/work/ and packed into OUT/static-ARCH.tar.gz when done (the device returns at most 8 files).
# --tiny: 2-layer models, tiny contexts, float32 on CPU -- the dry run CI executes
# (tests/calibrate/test_gpu_campaign.py), so the GPU path is the same script with real sizes.
# Full sizes (bf16, TP=1): decode vs context 512-16k and batch 1-16, prefill vs new/cached tokens, the ~70-token
# scoring pass, verification vs gamma; achieved fraction of HBM bandwidth per decode point (bandwidth.json).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CARRY="$ROOT/.cache/gpu-carry"
PY="${PY:-python3}"
ARCHS="${ARCHS:-r1-distill-qwen-1.5b qwen2.5-7b qwq-32b}"
OP_MODELS="${OP_MODELS:-meta-llama/Llama-2-7b-hf meta-llama/Meta-Llama-3-8B}"
STATIC_MAX_S="${STATIC_MAX_S:-200}"  # per architecture: remaining points are skipped (listed in bandwidth.json)
E2E_PAIRS="${E2E_PAIRS:-r1-distill-qwen-1.5b:r1-distill-qwen-1.5b-cut4 qwen2.5-7b:qwen2.5-7b-cut4}"
# system:threshold:gamma per configuration; a subset finishes a stage an earlier device call was cut short in
E2E_CONFS="${E2E_CONFS:-vanilla-base:7:4 vanilla-small:7:4 specdecode:7:4 specreason:0:4 specreason:7:4 specreason-decode:7:4}"
failed=0
# python -m specsim_cli ARGS... (the specsim command line) with the repository's packages, from its root (model caches and run keys are relative
# to it; the stages make their folders absolute first)
py() { (cd "$ROOT" && PYTHONPATH="$ROOT" "$PY" -m "$@"); }
absdir() { mkdir -p "$1" && (cd "$1" && pwd); }
cmd="${1:?usage: $0 prepare | setup | static OUT [--tiny] | ops OUT [--tiny] | e2e OUT [--tiny] | steps PLAN OUT | kernels PLAN OUT | analyze RES}"
shift

case "$cmd" in
  prepare)
    mkdir -p "$CARRY/wheels"
    "${PIP_PY:-$ROOT/.venv/bin/python}" -m pip download -q --disable-pip-version-check --only-binary=:all: \
      --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform any -d "$CARRY/wheels" simpy pydantic gguf typer click rich
    du -sh "$CARRY"
    ;;
  setup)
    "$PY" -m pip install -q --no-index --find-links "$CARRY/wheels" simpy pydantic gguf
    # the device image's typer lacks an attribute the CLI patches: ours, carried
    # (--upgrade: without it pip keeps the image's own typer, and the CLI fails on it)
    "$PY" -m pip install -q --no-index --no-deps --upgrade --find-links "$CARRY/wheels" typer click rich shellingham
    "$PY" -c "import torch, transformers, simpy, pydantic; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
    ;;
  static)
    OUT="${1:?usage: $0 static OUT [--tiny]}"
    OUT="$(absdir "$OUT")"
    TINY="${2:-}"
    mkdir -p "$OUT/work"
    for arch in $ARCHS; do
      dir="$OUT/work/static-$arch"
      if [ "$TINY" = "--tiny" ]; then
        opts=(--layers 2 --context 32,96 --batch 1,2 --new-tokens 16 --cached-tokens 0,32 --gamma 1,3
              --decode-tokens 3 --repeats 1 --dtype float32 --device cpu)
      else
        opts=(--context 512,2048,8192,16384 --batch 1,4,16 --new-tokens 512,2048 --cached-tokens 0,4096
              --gamma 1,2,4,8 --decode-tokens 32 --repeats 3 --dtype bfloat16 --max-seconds "$STATIC_MAX_S")
      fi
      echo "static-bench $arch -> $dir" >&2
      py specsim_cli measure static-bench --arch "$arch" --out "$dir" "${opts[@]}" \
        || { failed=$((failed + 1)); echo "static-bench $arch failed; packing what it wrote" >&2; }
      tar -czf "$OUT/static-$arch.tar.gz" -C "$OUT/work" "static-$arch"
    done
    ls -la "$OUT"
    exit $((failed > 0))
    ;;
  ops)
    # one TP shard of one layer per (tokens, TP) on this one GPU, as Vidur's profiler; read back with
    # `specsim import vidur OUT/vidur-ours` next to the public A100/A40 profiles
    OUT="${1:?usage: $0 ops OUT [--tiny]}"
    OUT="$(absdir "$OUT")"
    TINY="${2:-}"
    mkdir -p "$OUT/work"
    models="$OP_MODELS"
    opts=(--tp 1,2,4 --repeats 20 --dtype bfloat16)
    if [ "$TINY" = "--tiny" ]; then
      models="tiny/test-2l"
      opts=(--tokens 1,16 --tp 1,2 --repeats 3 --dtype float32 --device cpu)
    fi
    for m in $models; do
      py specsim_cli measure op-bench --model "$m" --out "$OUT/work/vidur-ours" "${opts[@]}"
    done
    tar -czf "$OUT/ops.tar.gz" -C "$OUT/work" vidur-ours
    ls -la "$OUT"
    ;;
  e2e)
    # End-to-end requests of all five systems on the torch engine, random weights (arch:NAME), one base
    # architecture and its 4-layer cut as small model and draft per pair. With random weights there is no
    # tokenizer: a step ends at --step-max-tokens, the judge's score is unparsable (treated as 0), so SpecReason
    # keeps every step at threshold 0 and regenerates every step at threshold 7 -- the two call paths.
    OUT="${1:?usage: $0 e2e OUT [--tiny]}"
    OUT="$(absdir "$OUT")"
    TINY="${2:-}"
    mkdir -p "$OUT/work"
    # the device has no reasoning-gym: four GSM-style word problems of our own (random weights read only their
    # token counts; without a tokenizer the engine makes ~1 pseudo-token per 4 characters)
    problems="$OUT/work/problems.jsonl"
    cat > "$problems" <<'JSONL'
{"id": "e2e-0", "question": "A baker makes 24 loaves of bread every morning. She sells 3/4 of them before noon and gives half of the rest to a shelter. How many loaves does she have left at the end of the day?", "answer": "3"}
{"id": "e2e-1", "question": "A train travels 180 km in 2 hours and then 150 km in 3 hours. What is its average speed, in km per hour, over the whole trip?", "answer": "66"}
{"id": "e2e-2", "question": "Tom has twice as many marbles as Anna, and Anna has 7 more marbles than Ben. If Ben has 12 marbles, how many marbles do the three children have together?", "answer": "69"}
{"id": "e2e-3", "question": "A rectangle is 3 times as long as it is wide, and its perimeter is 64 cm. What is its area in square centimetres?", "answer": "192"}
JSONL
    pairs="$E2E_PAIRS"
    opts=(--requests 2 --warmup 1 --budget 512 --step-max-tokens 128 --dtype bfloat16 --max-model-len 4096)
    if [ "$TINY" = "--tiny" ]; then
      pairs="${E2E_TINY_PAIRS:-smollm2-135m:smollm2-135m-cut6}"
      opts=(--requests 1 --warmup 0 --budget 12 --step-max-tokens 6 --dtype float32 --device cpu)
    fi
    for pair in $pairs; do
      base="${pair%%:*}"; small="${pair#*:}"
      for conf in $E2E_CONFS; do
        IFS=: read -r system thr gamma <<< "$conf"
        case "$system" in
          specdecode) name="$system-g$gamma" ;;
          specreason) name="$system-t$thr" ;;
          specreason-decode) name="$system-t$thr-g$gamma" ;;
          *) name="$system" ;;
        esac
        dir="$OUT/work/e2e-$base/$name"
        echo "e2e $base + $small: $name -> $dir" >&2
        py specsim_cli measure run --engine torch --base "arch:$base" \
          --small "arch:$small" --system "$system" --threshold "$thr" --gamma "$gamma" --dataset "jsonl:$problems" --out "$dir" "${opts[@]}" \
          || { failed=$((failed + 1)); echo "e2e $base $name failed" >&2; }
      done
      tar -czf "$OUT/e2e-$base.tar.gz" -C "$OUT/work" "e2e-$base"
    done
    ls -la "$OUT"
    exit $((failed > 0))
    ;;
  steps)
    PLAN="${1:?usage: $0 steps PLAN OUT}"
    OUT="$(absdir "${2:?usage: $0 steps PLAN OUT}")"
    "$PY" "$ROOT/calibrate/measure/gpu_step_bench.py" "$PLAN" "$OUT"
    ;;
  kernels)
    PLAN="${1:?usage: $0 kernels PLAN OUT}"
    OUT="$(absdir "${2:?usage: $0 kernels PLAN OUT}")"
    "$PY" "$ROOT/calibrate/measure/gpu_kernel_bench.py" "$PLAN" "$OUT"
    ;;
  analyze)
    # Here, on the CPU, after the device runs: RES holds the tarballs the stages returned. Writes RES/analysis/.
    # e2e: per pair, a cost profile fitted on vanilla-base, vanilla-small and specreason-t0 predicts the held-out
    # specdecode-g4, specreason-t7 and specreason-decode-t7-g4 runs (configs-<pair>/); the first pair's profile
    # predicts every other pair's runs (transfer-<pair>/: same GPU and engine, another model size); the static-bench
    # profile, the GPU's transferred prior and its datasheet-era prior predict every run (from-bench-, from-prior-,
    # from-datasheet-<pair>/).
    # --allow-implausible: a profile fitted here on a few runs may carry a value outside its physical range (the CPU
    # dry run's tiny fits do); it is validated anyway and flagged in the report (kind: rejected), not dropped.
    RES="${1:?usage: $0 analyze RES}"
    RES="$(absdir "$RES")"
    X="$RES/extracted"; A="$RES/analysis"
    mkdir -p "$X" "$A"
    for t in "$RES"/*.tar.gz; do [ -e "$t" ] && tar -xzf "$t" -C "$X"; done
    # static-bench: a profile fitted on every record (bench.yaml) and held-out folds -- each architecture predicted
    # from the others (1.5B + 32B -> 7B among them) and contexts > 2048 / gamma > 2 from the rest -- scored against
    # the transferred and the datasheet priors (static-bench/report.md)
    static=("$X"/static-*/)
    if [ -d "${static[0]}" ]; then
      py specsim_cli fit bench "${static[@]}" --out "$A/bench.yaml" \
        --report "$A/static-bench" --name gpu-campaign-static-bench || { failed=$((failed + 1)); echo "fit-bench failed" >&2; }
    fi
    first=""
    for d in "$X"/e2e-*/; do
      [ -d "$d" ] || continue
      pair="$(basename "$d")"
      fit=()
      for c in vanilla-base vanilla-small specreason-t0; do [ -d "$d$c" ] && fit+=("$d$c"); done
      py specsim_cli fit cost "${fit[@]}" --out "$A/profile-$pair.yaml" \
        --name "gpu-campaign-$pair"
      py specsim_cli validate runs "$d"*/ --profile "$A/profile-$pair.yaml" \
        --out "$A/configs-$pair" --no-distribution --drift exclude --allow-implausible || echo "configs-$pair: exit $?" >&2
      if [ -z "$first" ]; then
        first="$pair"
      else
        py specsim_cli validate runs "$d"*/ --profile "$A/profile-$first.yaml" \
          --out "$A/transfer-$pair" --no-distribution --drift exclude --allow-implausible || echo "transfer-$pair: exit $?" >&2
      fi
      if [ -f "$A/bench.yaml" ]; then  # the static-bench profile (CUDA graphs) predicting the eager engine's requests
        py specsim_cli validate runs "$d"*/ --profile "$A/bench.yaml" \
          --out "$A/from-bench-$pair" --no-distribution --drift exclude --allow-implausible || echo "from-bench-$pair: exit $?" >&2
      fi
      for prior in prior datasheet; do  # before any calibration: the transferred GPU prior and the datasheet-era one
        py specsim_cli validate runs "$d"*/ --profile "$prior" \
          --out "$A/from-$prior-$pair" --no-distribution --drift exclude --allow-implausible || echo "from-$prior-$pair: exit $?" >&2
      done
    done
    py specsim_cli validate gpu-summary "$A" || failed=$((failed + 1))
    ls -la "$A"
    exit $((failed > 0))
    ;;
  *)
    echo "error: $0: unknown stage '$cmd' (prepare | setup | static | ops | e2e | steps | analyze)" >&2
    exit 2
    ;;
esac
