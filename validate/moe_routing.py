"""The MoE layer fit held out by GPU without AIConfigurator's ``balanced`` rows (a diagnostic).

The ``balanced`` rows of the fused-MoE tables run below the streaming floor of the min(E, N k) experts the MoE fit
reads them as touching (``validate.inferencex.moe_kernel_check``: DeepSeek's shape, 16+ tokens, H100 and B200). This
refits the MoE terms (``calibrate.gpu_priors.moe_fit``: the same rows, fitter and folds) on the power-law
routed rows (and LLMServingSim's) only and prints the held-out errors by GPU; the catalog is not touched. Compare
with reports/moe-layer/report.md (every routing). Slow: every fold refits the MoE terms.

    specsim validate moe-routing [--records out/gpu-records/aiconfigurator.csv] [--out DIR]
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from simulator.errors import InputError


def heldout_without_balanced(records: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(summary by fold and source on the fitted dtypes, every held-out row) of the MoE fit without ``balanced``."""
    from calibrate.gpu_priors import moe_fit

    _, f, _ = moe_fit.load_rows(Path(records), keep=lambda d: d["distribution"] != "balanced")
    h = moe_fit.heldout(f)
    return moe_fit.summarize(h), h


def write_summary(records: Path, out: Path | None) -> str:
    """The held-out table without the balanced rows (printed by ``specsim validate moe-routing``); with
    ``out``: OUT/summary.csv."""
    from simulator.inputs.loading import write_atomic

    s, _ = heldout_without_balanced(records)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_atomic(out / "summary.csv", s.to_csv(index=False))
    return s.to_string(index=False)
