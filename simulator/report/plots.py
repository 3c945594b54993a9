"""The one way the project draws: matplotlib on the non-interactive Agg backend, imported only when a figure is made
(it costs start-up time every command would otherwise pay). Figures are written with
:func:`simulator.inputs.loading.save_figure_atomic`."""

from __future__ import annotations


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
