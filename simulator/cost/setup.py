"""What calls run on -- catalog hardware, TP degree, a catalog model per role -- and the one way to build the
role's :class:`~simulator.cost.cost_model.Deployment` from it with a set of cost parameters.

Used by the scenario (``simulator.inputs.scenario``), the fitters (``calibrate.fit``) and validation (``validate``): a role's
deployment is ``Deployment(model, hardware, tp, params.for_role(role), drafting, ep, pp, dp)`` in this one place."""

from __future__ import annotations

from dataclasses import dataclass, field

from simulator.catalog import HardwareSpec, ModelSpec, get_hardware, get_model
from simulator.cost.cost_model import CHAIN, Deployment, Drafting
from simulator.cost.cost_profile import CostParams


@dataclass
class Setup:
    """What the calls ran on: catalog hardware, TP degree, catalog models per role (base, small, and draft for
    speculative calls); optionally the draft's ``drafting`` (kind, tree), expert, pipeline and attention-data
    parallelism per role."""

    hardware: HardwareSpec
    tp: int
    models: dict[str, ModelSpec]
    drafting: Drafting = CHAIN
    ep: dict[str, int] = field(default_factory=dict)
    pp: dict[str, int] = field(default_factory=dict)
    dp: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_names(cls, hardware: str, tp: int, base: str, small: str, draft: str | None = None) -> "Setup":
        models = {"base": get_model(base, None, "--base-model"), "small": get_model(small, None, "--small-model")}
        models["draft"] = get_model(draft, None, "--draft-model") if draft else models["small"]
        return cls(get_hardware(hardware, None, "--hardware"), tp, models)

    def describe(self) -> dict:
        return {"hardware": self.hardware.name, "tp": self.tp, **{f"{r}_model": m.name for r, m in self.models.items()}}

    def deployments(self, params: CostParams, models: dict[str, ModelSpec] | None = None) -> dict[str, Deployment]:
        """{role: Deployment} of ``models`` (default: the setup's) under ``params`` (each role's
        ``params.for_role(role)``; the draft role with the setup's drafting)."""
        return {r: Deployment(m, self.hardware, self.tp, params.for_role(r),
                              drafting=self.drafting if r == "draft" else CHAIN, ep=self.ep.get(r, 1),
                              pp=self.pp.get(r, 1), dp=self.dp.get(r, 1))
                for r, m in (models or self.models).items()}
