"""The commented scenario ``specsim init`` writes: the reference setup, every field explained."""

INIT_TEMPLATE = """\
# A specreason-sim scenario (specsim init). Every field below is explained; `specsim show {path}` prints
# it resolved with every default filled in, `specsim simulate whatif {path}` runs its grid.
name: {name}
description: QwQ-32B base + R1-Distill-Qwen-1.5B small on 2x RTX A6000 (edit me)
# hardware: a catalog name (specsim list hardware) and how many devices one replica has
hardware: {{gpu: rtx-a6000, count: 2}}
# base and small (reasoning) models: catalog names (specsim list models) or a path to a HF config.json;
# tp = tensor-parallel degree
base: {{model: qwq-32b, tp: 2}}
small: {{model: r1-distill-qwen-1.5b, tp: 2}}
# the workload model (steps, scores, acceptance) fitted from traces (specsim list workloads); use one fitted
# for your base + small models: a borrowed one is flagged in every table
workload: aime_qwq32b_r1-1.5b
# cost profiles: prior (catalog priors per GPU) or fitted profiles (specsim list profiles)
cost_profiles: [prior]
# GPU memory share of each engine (the rest: activations, the other engine)
memory_fraction: {{base: 0.8, small: 0.1}}
# systems to compare: vanilla-base, vanilla-small, specdecode, specreason, specreason-decode
systems: [vanilla-base, specdecode, specreason, specreason-decode]
grid:
  gamma: [2, 4, 6]        # draft tokens per verification (specdecode, specreason-decode), 1..16
  threshold: [5, 7]       # SpecReason acceptance threshold 0..10 (10: never keep a small step)
  first_n: [0]            # first steps always taken by the base model
engine: analytic          # analytic (closed form) | des (discrete-event: adds p50/p90/p99)
# how vLLM runs the calls under load (capacity, serve-workload): left out, vLLM's defaults on the GPU (`vllm serve`:
# max_num_batched_tokens 8192 and max_num_seqs 1024 on a GPU reporting >= 70 GiB that is not an A100, else 2048 and
# 256; `specsim show {path} --section resolved` prints them per GPU), prefix caching on
# execution: {{max_num_batched_tokens: 2048, max_num_seqs: 256, prefix_caching: true}}
requests: 400             # DES requests per grid point
slo: "p99_latency<=900s"  # capacity planning (specsim simulate capacity / report)
seed: 0
"""
