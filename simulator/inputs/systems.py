"""The systems, declared once (a registry), and their knobs.

- ``vanilla-base`` / ``vanilla-small``: one model generates the whole chain.
- ``specdecode`` (gamma): the base model generates, the small model drafts gamma tokens
  per iteration, the base verifies them in one pass (token level, exact).
- ``specreason`` (threshold, first_n): the small model proposes each step, the base model
  scores it (one prefill pass, one utility token 0..9), keeps it if score >= threshold,
  else regenerates it; the first ``first_n`` steps come from the base model.
- ``specreason-decode`` (threshold, gamma, first_n): SpecReason whose base-model
  generations use speculative decoding with the small model as draft.

Every rule that depends on *which* system runs reads a :class:`SystemSpec` from ``REGISTRY``
(simulator, calibrate and validate alike), never the system's name. Adding a system that reuses
the existing call kinds is one ``SystemSpec`` here (see docs/extending.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from simulator.option_values import FIRST_N_MAX


@dataclass(frozen=True)
class SystemSpec:
    """What a system does, as data.

    ``chain``: who writes the reasoning steps -- ``"base"`` (every step by the base model),
    ``"small"`` (every step by the small model) or ``"speculative"`` (the small model proposes,
    the base model scores, keeps or regenerates; the first ``first_n`` steps by the base model).
    ``draft``: the base engine decodes speculatively with the small model as draft (uses gamma).
    ``scores_steps``: steps are scored against a threshold (uses threshold and first_n).
    ``one_call``: the whole chain is one engine call by default (vanilla and specdecode);
    ``execution.step_calls`` turns such a system into one call per step.
    """

    name: str
    chain: Literal["base", "small", "speculative"]
    draft: bool = False
    description: str = ""

    @property
    def scores_steps(self) -> bool:
        return self.chain == "speculative"

    @property
    def one_call(self) -> bool:
        return self.chain != "speculative"

    @property
    def uses_small(self) -> bool:
        """The small model runs (as a step writer or as a draft)."""
        return self.chain in ("small", "speculative") or self.draft

    @property
    def uses_base(self) -> bool:
        return self.chain != "small"

    @property
    def small_writes_steps(self) -> bool:
        return self.chain in ("small", "speculative")


REGISTRY: dict[str, SystemSpec] = {s.name: s for s in (
    SystemSpec("vanilla-base", "base", description="the base model alone"),
    SystemSpec("vanilla-small", "small", description="the small model alone"),
    SystemSpec("specdecode", "base", draft=True, description="speculative decoding, small model as draft (exact)"),
    SystemSpec("specreason", "speculative", description="small model proposes steps, base model scores them"),
    SystemSpec("specreason-decode", "speculative", draft=True,
               description="SpecReason with speculative decoding for the base model's regenerations"),
)}


class _SystemNames(Sequence):
    """The registered system names, read from ``REGISTRY`` at each use (an entry added to it -- in this file, or by
    a test at run time -- is known everywhere at once)."""

    def __getitem__(self, i):
        return tuple(REGISTRY)[i]

    def __len__(self) -> int:
        return len(REGISTRY)

    def __contains__(self, name) -> bool:
        return name in REGISTRY

    def __repr__(self) -> str:
        return repr(tuple(REGISTRY))


SYSTEMS: Sequence[str] = _SystemNames()


def spec_of(system: str) -> SystemSpec:
    """The registry entry of a system name (KeyError names the known ones)."""
    try:
        return REGISTRY[system]
    except KeyError:
        raise KeyError(f"unknown system {system!r}; known: {', '.join(SYSTEMS)}") from None


class SystemConfig(BaseModel):
    """One point of the configuration grid. Knobs a system does not use are None."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: str
    gamma: int | None = Field(default=None, ge=0, le=64)  # 0: no speculation (plain decoding); scenarios take 1..16
    threshold: int | None = Field(default=None, ge=0, le=10)  # 10: never keep (every step scored, then regenerated)
    first_n: int = Field(default=0, ge=0, le=FIRST_N_MAX)
    # how the base engine picks γ per iteration: ``fixed`` (gamma every iteration) or ``goodput`` (the expected-
    # goodput rule of ``simulator.engines.gamma_choice`` at the running batch, 0..gamma): serving simulator only
    gamma_policy: Literal["fixed", "goodput"] = "fixed"

    @field_validator("system")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in REGISTRY:
            raise ValueError(f"unknown system {v!r}; known: {', '.join(SYSTEMS)}")
        return v

    @model_validator(mode="after")
    def _policy_needs_draft(self):
        if self.gamma_policy != "fixed" and not (self.spec.draft and self.gamma):
            raise ValueError(f"gamma_policy {self.gamma_policy!r} needs a drafting system with gamma >= 1 (its gamma_max)")
        return self

    @property
    def adaptive(self) -> bool:
        """γ is chosen per engine iteration (``gamma`` is then the largest γ the policy may pick)."""
        return self.gamma_policy != "fixed"

    @property
    def spec(self) -> SystemSpec:
        return REGISTRY[self.system]

    @property
    def drafts(self) -> bool:
        """The base engine decodes speculatively: a drafting system with gamma >= 1 (gamma = 0 is plain decoding)."""
        return self.spec.draft and bool(self.gamma)

    @property
    def label(self) -> str:
        parts = [self.system]
        if self.gamma is not None:
            parts.append(f"g=auto<={self.gamma}" if self.adaptive else f"g={self.gamma}")
        if self.threshold is not None:
            parts.append(f"t={self.threshold}")
        if self.first_n:
            parts.append(f"n={self.first_n}")
        return " ".join(parts)


def expand_systems(systems, gammas, thresholds, first_ns) -> list[SystemConfig]:
    """The grid: each system crossed with only the knobs it uses; a value listed twice (``--system x --system x``,
    ``gamma: [2, 2]``) is one configuration, in the order first listed."""
    systems, gammas, thresholds, first_ns = (list(dict.fromkeys(v)) for v in (systems, gammas, thresholds, first_ns))
    out: list[SystemConfig] = []
    for s in systems:
        spec = spec_of(s)
        gs = gammas if spec.draft else [None]
        ts = thresholds if spec.scores_steps else [None]
        ns = first_ns if spec.scores_steps else [0]
        for g in gs:
            for t in ts:
                for n in ns:
                    out.append(SystemConfig(system=s, gamma=g, threshold=t, first_n=n))
    return out
