"""Accelerator specs (``hardware.yaml``), validated on load."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.loading import read_yaml

CATALOG_PATH = Path(__file__).with_name("hardware.yaml")


class HardwareSpec(BaseModel):
    """One accelerator (per device). Units are suffixes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    display: str
    dense_bf16_flops_per_s: float = Field(gt=0)
    memory_bandwidth_bytes_per_s: float = Field(gt=0)
    memory_bytes: float = Field(gt=0)
    interconnect: Literal["pcie", "nvlink", "none"]
    link_bandwidth_bytes_per_s: float = Field(gt=0)
    allreduce_latency_s: float = Field(ge=0)
    source: str

    @property
    def ridge_tokens(self) -> float:
        """Arithmetic intensity (FLOP/byte) at the roofline ridge; ~tokens per pass for bf16."""
        return self.dense_bf16_flops_per_s / self.memory_bandwidth_bytes_per_s


@lru_cache(maxsize=None)
def hardware_catalog() -> dict[str, HardwareSpec]:
    raw = read_yaml(CATALOG_PATH)
    try:
        items = TypeAdapter(list[HardwareSpec]).validate_python(raw)
    except ValidationError as e:
        raise pydantic_error_to_input_error(str(CATALOG_PATH), e) from None
    return {h.name: h for h in items}


def get_hardware(name: str, file: str | None = None, field: str = "hardware.gpu") -> HardwareSpec:
    cat = hardware_catalog()
    if name not in cat:
        raise InputError(file, field, f"unknown hardware {name!r}; known: {', '.join(sorted(cat))}")
    return cat[name]
