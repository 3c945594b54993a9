"""Integer distributions that serve both engines (the Ciw habit).

Every distribution compiles to one :class:`IntPMF` -- a probability mass function on an
integer support. The analytic engine reads ``pmf`` / ``mean`` / ``survival``; the
discrete-event engine calls ``sample(rng, size)`` on the very same object, so the two
engines cannot disagree about the input.

YAML forms (``kind`` selects):

- ``{kind: constant, value: 120}``
- ``{kind: empirical, values: [57, 115, 44], weights: [1, 1, 1]}`` (weights optional)
- ``{kind: lognormal, median: 80, sigma: 0.7, min: 1, max: 512}`` discretised on [min, max]
- ``{kind: geometric, mean: 60, min: 1, max: 2000}`` truncated on [min, max]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator


@dataclass(frozen=True)
class IntPMF:
    """P(X = support[i]) = probs[i]; support strictly increasing, probs sum to 1."""

    support: np.ndarray
    probs: np.ndarray

    @property
    def mean(self) -> float:
        return float(np.dot(self.support, self.probs))

    @property
    def max(self) -> int:
        return int(self.support[-1])

    @property
    def min(self) -> int:
        return int(self.support[0])

    def dense(self, length: int | None = None) -> np.ndarray:
        """pmf as a dense array indexed by value: out[v] = P(X = v)."""
        n = (self.max + 1) if length is None else length
        out = np.zeros(n)
        keep = self.support < n
        np.add.at(out, self.support[keep], self.probs[keep])
        return out

    def survival(self, length: int | None = None) -> np.ndarray:
        """out[g] = P(X > g) for g = 0 .. length-1."""
        d = self.dense(max(length or 0, self.max + 1))
        sf = 1.0 - np.cumsum(d)
        sf = np.clip(sf, 0.0, 1.0)
        return sf[: (length or len(sf))]

    def sample(self, rng: np.random.Generator, size=None):
        idx = rng.choice(len(self.support), size=size, p=self.probs)
        return self.support[idx]

    @staticmethod
    def from_weights(values, weights=None) -> "IntPMF":
        v = np.asarray(values, dtype=np.int64)
        w = np.ones(len(v)) if weights is None else np.asarray(weights, dtype=float)
        order = np.argsort(v, kind="stable")
        v, w = v[order], w[order]
        uniq, inv = np.unique(v, return_inverse=True)
        agg = np.zeros(len(uniq))
        np.add.at(agg, inv, w)
        return IntPMF(uniq, agg / agg.sum())


class _Base(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Constant(_Base):
    kind: Literal["constant"]
    value: int = Field(ge=0)

    def compile(self) -> IntPMF:
        return IntPMF(np.array([self.value]), np.array([1.0]))


class Empirical(_Base):
    kind: Literal["empirical"]
    values: list[int] = Field(min_length=1)
    weights: list[float] | None = None

    @model_validator(mode="after")
    def _check(self):
        if any(v < 0 for v in self.values):
            raise ValueError("values must be >= 0")
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError("weights must have the same length as values")
            if any(w < 0 for w in self.weights) or sum(self.weights) <= 0:
                raise ValueError("weights must be >= 0 with a positive sum")
        return self

    def compile(self) -> IntPMF:
        return IntPMF.from_weights(self.values, self.weights)


class LogNormal(_Base):
    kind: Literal["lognormal"]
    median: float = Field(gt=0)
    sigma: float = Field(gt=0, le=5)
    min: int = Field(default=1, ge=0)
    max: int = Field(default=512, ge=1)

    @model_validator(mode="after")
    def _check(self):
        if self.max < self.min:
            raise ValueError("max must be >= min")
        return self

    def compile(self) -> IntPMF:
        v = np.arange(self.min, self.max + 1)
        from scipy import stats  # a third of a second at start-up: imported where used

        dist = stats.lognorm(s=self.sigma, scale=self.median)
        # mass of [v - 0.5, v + 0.5), the ends absorb the tails
        edges = np.concatenate([[-np.inf], v[1:] - 0.5, [np.inf]])
        p = np.diff(dist.cdf(np.clip(edges, 0, None)))
        return IntPMF(v, p / p.sum())


class Geometric(_Base):
    kind: Literal["geometric"]
    mean: float = Field(gt=0)
    min: int = Field(default=1, ge=0)
    max: int = Field(default=4096, ge=1)

    def compile(self) -> IntPMF:
        v = np.arange(self.min, self.max + 1)
        p_stop = 1.0 / max(self.mean - self.min + 1.0, 1.0)
        w = (1 - p_stop) ** (v - self.min)
        return IntPMF(v, w / w.sum())


IntDistribution = Annotated[Union[Constant, Empirical, LogNormal, Geometric], Field(discriminator="kind")]


def closed_cdf(p) -> np.ndarray:
    """CDF of a pmf for inverse-CDF draws (``searchsorted(cdf, u, side="right")``): normalised and closed just
    above 1, so every uniform u < 1 lands inside the support."""
    c = np.cumsum(np.asarray(p, dtype=float))
    c /= c[-1]
    c[-1] = 1.0 + 1e-12
    return c

