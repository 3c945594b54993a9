"""How far to trust a serving prediction (``serving_accuracy.yaml``): the held-out error of plain vLLM serving
predictions on released ``vllm bench serve`` runs, per GPU and regime, as a capacity table or report quotes it.

The file is derived, never edited: ``specsim validate serving-accuracy`` writes it from a released serving report's
held-out-by-GPU table (:mod:`validate.serving.accuracy`). Per GPU (and pooled over GPUs, ``all GPUs``) and per regime
(``all``, ``loop``: N users in a closed loop, ``burst, ShareGPT``, ``burst, long prompts``, ...): the fitted runs'
count and, per figure (``out_tps`` output throughput, ``tpot_ms``, ``ttft_ms``, ``itl_ms``), the median and p90 of
|predicted / measured - 1| and the median signed error (``bias``; < 0: the prediction is low), in percent.

:func:`error_lines` says it in words for the GPUs of a scenario; a GPU without released runs gets the pooled figures,
said so; a CPU host gets nothing (its cost profile is calibrated on that host)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from simulator.errors import InputError, pydantic_error_to_input_error
from simulator.inputs.loading import read_yaml
from simulator.paths import CATALOG_DIR

ACCURACY_PATH = CATALOG_DIR / "serving_accuracy.yaml"
POOLED = "all GPUs"
FIGURES = {"out_tps": "throughput", "tpot_ms": "TPOT", "ttft_ms": "TTFT", "itl_ms": "ITL"}
HEADING = "Model error (plain vLLM serving, held out by GPU; simulator/catalog/serving_accuracy.yaml)"
QUOTED = ("out_tps", "tpot_ms", "ttft_ms")  # the figures a line quotes: what a capacity plan stands on


class Error(BaseModel):
    """One figure's held-out error over a group of runs, percent."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    median: float = Field(ge=0)  # median |predicted / measured - 1|
    p90: float = Field(ge=0)
    bias: float  # median signed error


class Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: int = Field(ge=1)
    versions: list[str] = Field(min_length=1)  # the engine versions of its runs
    out_tps: Error
    tpot_ms: Error
    ttft_ms: Error
    itl_ms: Error


class Provenance(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["derived"]
    source: str
    command: str
    date: str
    engine_versions: list[str] = Field(min_length=1)


class ServingAccuracy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    provenance: Provenance
    gpus: dict[str, dict[str, Group]]
    versions_held_out: dict[str, Group] | None = None  # every run predicted without its version's runs, by regime


def read_serving_accuracy(path: Path | None = None) -> ServingAccuracy | None:
    """The file at ``path`` (default the catalog's), checked; None where it is absent."""
    path = Path(path or ACCURACY_PATH)
    if not path.is_file():
        return None
    try:
        acc = ServingAccuracy.model_validate(read_yaml(path) or {})
    except ValidationError as e:
        raise pydantic_error_to_input_error(str(path), e) from None
    if POOLED not in acc.gpus or "all" not in acc.gpus[POOLED]:
        raise InputError(str(path), f"gpus.{POOLED}.all", "expected the pooled figures over every GPU")
    return acc


@lru_cache(maxsize=None)
def serving_accuracy() -> ServingAccuracy | None:
    return read_serving_accuracy()


def _pct(x: float, sign: bool = False) -> str:
    """A percentage as a planner reads it: whole numbers from 10, one decimal below (never an exponent)."""
    return f"{x:{'+' if sign else ''}.{0 if abs(x) >= 10 else 1}f}%"


def _figures(g: Group) -> str:
    return ", ".join(f"{FIGURES[f]} {_pct(getattr(g, f).median)} ({_pct(getattr(g, f).bias, True)})" for f in QUOTED)


def _gpu_errors(groups: dict[str, Group]) -> str:
    """One GPU's runs and their errors, over all its runs and its closed-loop ones."""
    a = groups["all"]
    text = (f"{a.runs} released `vllm bench serve` runs (vLLM {', '.join(a.versions)}), predicted with host terms "
            f"fitted without its runs: median |error| (bias) {_figures(a)}")
    if "loop" in groups:
        text += f"; the {groups['loop'].runs} closed-loop runs among them: {_figures(groups['loop'])}"
    return text


def error_line(hardware: str, acc: ServingAccuracy | None = None) -> str | None:
    """One sentence: the held-out error on ``hardware`` (median |error| and, in brackets, the bias, per figure), over
    all its released runs and, where there are some, its closed-loop ones; for a GPU without released runs its same
    chip's (``same_chip_as``) where that one has some, else the pooled figures, said so; None for a CPU host or
    without the file."""
    from simulator.catalog.hardware import same_chip

    acc = acc or serving_accuracy()
    if acc is None or hardware == "cpu":
        return None
    own = acc.gpus.get(hardware)
    sibling = same_chip().get(hardware)
    if own is None and sibling in acc.gpus:  # same silicon, other memory: its kernels' runs are the nearest
        return (f"{hardware}: no released serving run on this GPU; on {sibling}, the same chip, "
                f"{_gpu_errors(acc.gpus[sibling])}")
    if own is None:
        pooled = acc.gpus[POOLED]["all"]
        n_gpus = len([g for g in acc.gpus if g != POOLED])
        return (f"{hardware}: no released serving run held out on this GPU; over the {n_gpus} GPUs that have them "
                f"({pooled.runs} runs, vLLM {', '.join(pooled.versions)}, each held out by GPU), median |error| "
                f"(bias): {_figures(pooled)}")
    return f"{hardware}: {_gpu_errors(own)}"


def error_lines(hardware_names, acc: ServingAccuracy | None = None) -> list[str]:
    """:func:`error_line` for each GPU of a scenario, in order, once each."""
    out = []
    for h in dict.fromkeys(str(h) for h in hardware_names):
        line = error_line(h, acc)
        if line:
            out.append(line)
    return out


def version_note(engine: str, version: str, acc: ServingAccuracy | None = None) -> str | None:
    """A sentence where the scenario's serving engine is not among the versions the figures were measured on (its
    host terms then come from a fit of other versions or another data set): None where it is, or without the file."""
    acc = acc or serving_accuracy()
    if acc is None:
        return None
    have = acc.provenance.engine_versions
    if engine == "vllm" and ".".join(str(version).split(".")[:2]) in have:  # 0.11.2 ran 0.11's code path
        return None
    line = (f"the scenario's serving engine, {engine} {version}, is not among the versions these runs measured "
            f"(vLLM {', '.join(have)}): its errors may differ")
    held = (acc.versions_held_out or {}).get("all")
    if held is not None:
        line += (f"; each of those runs predicted with host terms fitted without its own version's: median |error| "
                 f"(bias) {_figures(held)}")
    return line


def scenario_error_lines(rs, hardware: str | None = None) -> list[str]:
    """:func:`error_lines` for the GPUs of a resolved scenario ``rs`` priced by the catalog's priors (``hardware``:
    that one only), then :func:`version_note` for its serving engine; none for a CPU host or a cost profile loaded
    from a file (its own calibration stands)."""
    from simulator.catalog.engine_hosts import running_version

    names = [hardware] if hardware else rs.hardware_names
    lines = error_lines(h for h in names if h not in rs.cost_profiles)
    se = rs.scenario.serving_engine
    note = version_note(se.name, running_version(se)) if lines else None
    return lines + ([note] if note else [])


def error_block(lines: list[str]) -> str:
    """The lines as a terminal prints them: :data:`HEADING`, then one bullet each."""
    return "\n".join([f"{HEADING}:"] + [f"- {line}" for line in lines])
