#!/usr/bin/env bash
# GPU measurement campaign (issue 15): everything a lent H100/H200 runs, in calls of at most 10 minutes,
# so device minutes go to measurement only. The device has torch + transformers but no network and no
# pydantic/simpy/gguf: `prepare` (here) puts their wheels in .cache/gpu-carry, which the device call carries.
#
#   scripts/gpu_campaign.sh prepare                      # here, once: wheels for the device (Python 3.12)
#   # device run, carry [".cache/gpu-carry"]:
#   #   bash scripts/gpu_campaign.sh setup && bash scripts/gpu_campaign.sh static "$OUT"
#   scripts/gpu_campaign.sh static OUT [--tiny]          # static-KV-cache + CUDA-graph bench of three architectures
#   scripts/gpu_campaign.sh ops OUT [--tiny]             # per-layer op timings in Vidur's layout (two Vidur shapes)
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
cmd="${1:?usage: $0 prepare | setup | static OUT [--tiny] | ops OUT [--tiny]}"
shift

case "$cmd" in
  prepare)
    mkdir -p "$CARRY/wheels"
    "${PIP_PY:-$ROOT/.venv/bin/python}" -m pip download -q --disable-pip-version-check --only-binary=:all: \
      --python-version 3.12 --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
      --platform any -d "$CARRY/wheels" simpy pydantic gguf
    du -sh "$CARRY"
    ;;
  setup)
    "$PY" -m pip install -q --no-index --find-links "$CARRY/wheels" simpy pydantic gguf
    "$PY" -c "import torch, transformers, simpy, pydantic; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'transformers', transformers.__version__)"
    ;;
  static)
    OUT="${1:?usage: $0 static OUT [--tiny]}"
    TINY="${2:-}"
    mkdir -p "$OUT/work"
    for arch in $ARCHS; do
      dir="$OUT/work/static-$arch"
      if [ "$TINY" = "--tiny" ]; then
        opts=(--layers 2 --contexts 32,96 --batches 1,2 --new-tokens 16 --cached-tokens 0,32 --gammas 1,3
              --decode-tokens 3 --repeats 1 --dtype float32 --device cpu)
      else
        opts=(--contexts 512,2048,8192,16384 --batches 1,4,16 --new-tokens 512,2048 --cached-tokens 0,4096
              --gammas 1,2,4,8 --decode-tokens 32 --repeats 3 --dtype bfloat16)
      fi
      echo "static-bench $arch -> $dir" >&2
      (cd "$ROOT" && PYTHONPATH="$ROOT" "$PY" -m specsim_cli calibrate static-bench --arch "$arch" --out "$dir" "${opts[@]}")
      tar -czf "$OUT/static-$arch.tar.gz" -C "$OUT/work" "static-$arch"
    done
    ls -la "$OUT"
    ;;
  ops)
    # one TP shard of one layer per (tokens, TP) on this one GPU, as Vidur's profiler; read back with
    # `specsim calibrate import-vidur OUT/vidur-ours` next to the public A100/A40 profiles
    OUT="${1:?usage: $0 ops OUT [--tiny]}"
    TINY="${2:-}"
    mkdir -p "$OUT/work"
    models="$OP_MODELS"
    opts=(--tp 1,2,4 --repeats 20 --dtype bfloat16)
    if [ "$TINY" = "--tiny" ]; then
      models="tiny/test-2l"
      opts=(--tokens 1,16 --tp 1,2 --repeats 3 --dtype float32 --device cpu)
    fi
    for m in $models; do
      (cd "$ROOT" && PYTHONPATH="$ROOT" "$PY" -m calibrate.op_bench --model "$m" --out "$OUT/work/vidur-ours" "${opts[@]}")
    done
    tar -czf "$OUT/ops.tar.gz" -C "$OUT/work" vidur-ours
    ls -la "$OUT"
    ;;
  *)
    echo "error: $0: unknown stage '$cmd' (prepare | setup | static | ops)" >&2
    exit 2
    ;;
esac
