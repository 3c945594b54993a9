"""The five systems and their knobs.

- ``vanilla-base`` / ``vanilla-small``: one model generates the whole chain.
- ``specdecode`` (gamma): the base model generates, the small model drafts gamma tokens
  per iteration, the base verifies them in one pass (token level, exact).
- ``specreason`` (threshold, first_n): the small model proposes each step, the base model
  scores it (one prefill pass, one utility token 0..9), keeps it if score >= threshold,
  else regenerates it; the first ``first_n`` steps come from the base model.
- ``specreason-decode`` (threshold, gamma, first_n): SpecReason whose base-model
  generations use speculative decoding with the small model as draft.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SystemName = Literal["vanilla-base", "vanilla-small", "specdecode", "specreason", "specreason-decode"]
SYSTEMS: tuple[str, ...] = ("vanilla-base", "vanilla-small", "specdecode", "specreason", "specreason-decode")
USES_GAMMA = {"specdecode", "specreason-decode"}
USES_THRESHOLD = {"specreason", "specreason-decode"}


class SystemConfig(BaseModel):
    """One point of the configuration grid. Knobs a system does not use are None."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    system: SystemName
    gamma: int | None = Field(default=None, ge=1, le=16)
    threshold: int | None = Field(default=None, ge=0, le=10)  # 10: never keep (every step scored, then regenerated)
    first_n: int = Field(default=0, ge=0)

    @property
    def label(self) -> str:
        parts = [self.system]
        if self.gamma is not None:
            parts.append(f"g={self.gamma}")
        if self.threshold is not None:
            parts.append(f"t={self.threshold}")
        if self.first_n:
            parts.append(f"n={self.first_n}")
        return " ".join(parts)


def expand_systems(systems, gammas, thresholds, first_ns) -> list[SystemConfig]:
    """The grid: each system crossed with only the knobs it uses."""
    out: list[SystemConfig] = []
    for s in systems:
        gs = gammas if s in USES_GAMMA else [None]
        ts = thresholds if s in USES_THRESHOLD else [None]
        ns = first_ns if s in USES_THRESHOLD else [0]
        for g in gs:
            for t in ts:
                for n in ns:
                    out.append(SystemConfig(system=s, gamma=g, threshold=t, first_n=n))
    return out
