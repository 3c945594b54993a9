"""The order in which the fits write the catalog's GPU priors file (``simulator/catalog/gpu_priors.yaml``), and the
warning when one of them is rerun out of that order.

``specsim fit transfer-priors`` writes the file whole; ``fit engine``, ``fit mla`` and ``fit moe`` then merge their
terms into it, in that order, each fitting its own terms through the step model built from the terms already there
(the MoE fit reads the engine fit's roofline shape, so a MoE fit run before the engine fit gives other MoE terms).
Each merging fit records its command under ``evidence.<key>.command``. Rerunning a fit leaves the terms written after
it by the later fits standing on the terms it replaced (or, for ``transfer-priors``, drops them): nothing in the file
would show it. :func:`warn_later_fits` says so, naming the later fits' recorded commands to rerun, in order.
"""

from __future__ import annotations

import warnings
from pathlib import Path

# (evidence key, command) in the order the fits run; "transfer-priors" writes the file whole and records no key
CHAIN = (("transfer_priors", "specsim fit transfer-priors"), ("engine_step_model", "specsim fit engine"),
         ("mla_layer_fit", "specsim fit mla"), ("moe_layer_fit", "specsim fit moe"))


class StalePriorsWarning(UserWarning):
    """A fit of the priors chain rewrote terms that later fits of the chain had read."""


def recorded_fits(path: Path) -> dict:
    """The ``evidence`` mapping of the priors file at ``path``; empty where there is none or it cannot be read (a
    fit that rewrites the file whole does not need the old one)."""
    import yaml

    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    ev = raw.get("evidence") if isinstance(raw, dict) else None
    return ev if isinstance(ev, dict) else {}


def later_fits(evidence: str, recorded: dict) -> list[str]:
    """The commands of the fits after ``evidence`` in :data:`CHAIN` that ``recorded`` (the file's ``evidence`` before
    this fit wrote it) shows ran: each recorded command, else the chain's generic one."""
    keys = [k for k, _ in CHAIN]
    if evidence not in keys:
        raise ValueError(f"evidence {evidence!r}: expected one of {', '.join(keys)}")
    out = []
    for key, generic in CHAIN[keys.index(evidence) + 1:]:
        if key in recorded:
            entry = recorded[key]
            out.append((entry.get("command") if isinstance(entry, dict) else None) or generic)
    return out


def warn_later_fits(path: Path, evidence: str, recorded: dict, *, dropped: bool = False) -> list[str]:
    """Warn (:class:`StalePriorsWarning`) when fits after ``evidence`` had written into ``path``: their terms now
    stand on terms this fit replaced (``dropped``: were removed with the rest of the file). Returns the commands to
    rerun, in order (empty: nothing to say)."""
    rerun = later_fits(evidence, recorded or {})
    if rerun:
        what = ("dropped the terms of the later fits" if dropped
                else "replaced terms the later fits' terms were fitted through")
        warnings.warn(f"{path}: this fit {what}; rerun them, in this order: " + "; then ".join(rerun),
                      StalePriorsWarning, stacklevel=3)
    return rerun
