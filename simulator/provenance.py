"""Provenance block carried by every profile, trace and report."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict


class Provenance(BaseModel):
    """Where a set of numbers came from.

    ``kind``: ``datasheet`` / ``published`` (a public figure), ``prior`` (an engineering
    guess to be calibrated), ``fitted`` / ``measured`` (derived from runs named in ``source``).
    """

    model_config = ConfigDict(extra="allow")

    kind: Literal["datasheet", "published", "prior", "fitted", "measured"]
    source: str
    method: str | None = None
    date: str | None = None
    hardware: str | None = None
    engine: str | None = None
    models: list[str] | None = None
    seed: int | None = None
