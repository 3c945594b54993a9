"""Acceptance priors per drafter kind (docs/drafters.md): a parametric shape of per-position acceptance whose level
is the deployment's own AL(1) and whose shape was fitted on measured AL(k) curves of drafters of the same kind.

Per-position acceptance a_i = P(first i drafts accepted), i = 1..K; the mean acceptance length at k drafts (bonus
token included) is AL(k) = 1 + sum_{i<=k} a_i, so AL(1) = 1 + a_1 and, for an autoregressive drafter (EAGLE, MTP:
the draft of position i does not depend on k), AL(k) - AL(k-1) = a_k. A family writes a_i = a_1 prod_{2<=j<=i} c_j
with conditional rates c_j in [0, 1], so a is non-increasing and in [0, 1] whatever the parameters:

- ``geometric``: c_j = sigmoid(t0) (one rate);
- ``geometric-decay``: c_j = sigmoid(t0) sigmoid(t1)^(j-2) (the rate itself decays);
- ``logistic``: c_j = sigmoid(t0 - exp(t1) (j-2)) (a logistic in position);
- ``power``: a_i = a_1 i^(-exp(t0)).

The fitted shapes (family and parameters per kind, with the held-out error and provenance) live in
``simulator/catalog/drafter_priors.yaml``, written by ``specsim fit drafter-curves``.
"""

from __future__ import annotations

from simulator.paths import CATALOG_DIR

from functools import lru_cache
from pathlib import Path

import numpy as np

from simulator.errors import InputError
from simulator.inputs.loading import read_yaml

PRIORS_FILE = CATALOG_DIR / "drafter_priors.yaml"
FAMILIES = {"geometric": 1, "geometric-decay": 2, "logistic": 2, "power": 1}  # family -> number of shape parameters
PRIOR_KINDS = ("eagle3", "mtp", "block")  # drafter kinds with a measured-curve prior
# DeepSeek trains its MTP module to draft one token ahead (the DeepSeek-V3 technical report: MTP depth D = 1), and
# vLLM reuses that one module for every drafted token: past the first, it drafts from its own drafts, beyond its
# training, and its acceptance falls away faster than a module trained for several steps (Qwen3-Next / Qwen3.5:
# trained for multi-step drafting). Such a module takes the shape of its own curves ("mtp-one-step").
ONE_STEP_MTP_ARCHS = ("deepseek_v3", "deepseek_v32")  # catalog / config.json architectures
ONE_STEP_MTP_FAMILY = "deepseek"  # a measured curve's target model, by name
PRIOR_SHAPES = PRIOR_KINDS + ("mtp-one-step",)  # the priors file's shapes


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.clip(np.asarray(x, dtype=float), -500.0, 500.0)))


def per_position(family: str, a1: float, params, k: int = 8) -> np.ndarray:
    """a_1..a_k of ``family`` at level a_1 = ``a1`` (in [0, 1]) with shape ``params``."""
    if family not in FAMILIES:
        raise ValueError(f"unknown acceptance family {family!r}; known: {', '.join(FAMILIES)}")
    th = [float(x) for x in params]
    if len(th) != FAMILIES[family]:
        raise ValueError(f"family {family} takes {FAMILIES[family]} parameter(s) (got {len(th)})")
    if not 0.0 <= a1 <= 1.0:
        raise ValueError(f"a_1 must lie in [0, 1] (got {a1:g})")
    j = np.arange(2, k + 1, dtype=float)
    if family == "power":
        return a1 * np.arange(1, k + 1, dtype=float) ** (-np.exp(min(th[0], 500.0)))
    if family == "geometric":
        c = np.full(k - 1, _sigmoid(th[0]))
    elif family == "geometric-decay":
        c = _sigmoid(th[0]) * _sigmoid(th[1]) ** (j - 2.0)
    else:
        c = _sigmoid(th[0] - np.exp(min(th[1], 500.0)) * (j - 2.0))
    return a1 * np.concatenate([[1.0], np.cumprod(c)])


def acceptance_length(a) -> np.ndarray:
    """AL(1..k) = 1 + cumulative sums of a_1..a_k."""
    return 1.0 + np.cumsum(np.asarray(a, dtype=float))


def from_acceptance_length(al) -> np.ndarray:
    """a_1..a_k from AL(1..k) (the inverse of :func:`acceptance_length`)."""
    al = np.asarray(al, dtype=float)
    return np.diff(np.concatenate([[1.0], al]))


@lru_cache(maxsize=None)
def _priors_doc(path: str) -> dict:
    doc = read_yaml(path)
    if not isinstance(doc, dict) or not isinstance(doc.get("kinds"), dict):
        raise InputError(path, "kinds", "expected a mapping of drafter kind -> {family, params, ...}")
    return doc


def kind_prior(kind: str, path: str | Path = PRIORS_FILE) -> dict:
    """The fitted shape of drafter ``kind`` (family, params, held-out error, source) from the priors file."""
    doc = _priors_doc(str(path))
    if kind not in doc["kinds"]:
        raise InputError(str(path), f"kinds.{kind}", f"no acceptance prior for drafter kind {kind!r} "
                         f"(have: {', '.join(doc['kinds'])})")
    p = doc["kinds"][kind]
    if not isinstance(p, dict) or p.get("family") not in FAMILIES or not isinstance(p.get("params"), list):
        raise InputError(str(path), f"kinds.{kind}", f"expected family (one of {', '.join(FAMILIES)}) and params")
    return {**p, "source": doc.get("source", "")}


def prior_kind(kind: str, arch: str | None = None, model_name: str | None = None) -> str:
    """The prior shape a ``kind`` drafter of a target (its ``arch``, or its model name for a measured curve) takes:
    ``mtp-one-step`` for the MTP module of a target that trains it for one step, else ``kind``."""
    one_step = arch in ONE_STEP_MTP_ARCHS or (model_name or "").lower().startswith(ONE_STEP_MTP_FAMILY)
    return "mtp-one-step" if kind == "mtp" and one_step else kind


def prior_acceptance(kind: str, al1: float, k: int = 8, path: str | Path = PRIORS_FILE) -> list[float]:
    """a_1..a_k of a ``kind`` drafter whose measured AL(1) is ``al1`` (in [1, 2]): level a_1 = AL(1) - 1, shape
    from the kind's fitted curves."""
    p = kind_prior(kind, path)
    return [float(x) for x in per_position(p["family"], al1 - 1.0, p["params"], k)]


def extend_with(a, family: str, params, k: int = 8) -> list[float]:
    """a_1..a_k from measured a_1..a_m (kept as measured): positions beyond m follow the conditional rates
    c_j = a_j / a_{j-1} of ``family``'s shape ``params``."""
    a = [float(x) for x in a]
    if not a:
        raise ValueError("no measured acceptance to extend")
    shape = per_position(family, 1.0, params, max(k, len(a)))
    for j in range(len(a), k):
        a.append(a[-1] * (shape[j] / shape[j - 1] if shape[j - 1] > 0 else 0.0))
    return a[:k]


def extend(a, kind: str, k: int = 8, path: str | Path = PRIORS_FILE) -> list[float]:
    """A deployment's measured a_1..a_m (its ``/metrics`` at m drafts) extended to k positions with the ``kind``
    prior's shape (:func:`extend_with`)."""
    p = kind_prior(kind, path)
    return extend_with(a, p["family"], p["params"], k)
