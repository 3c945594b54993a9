"""Serving-model validation: measured concurrent runs (``specsim measure serve-run``) against
the serving simulator (``simulator.engines.serving``), request by request and run by run.

Prediction = trace replay through the serving simulator: the same arrivals (open loop: the
measured arrival instants via ``ReplayArrivals``; closed loop: the same N users with no think
time, so the simulator decides when each request is sent, as the real users did) and each
request's plan built from its measured token counts (one base-engine call: prompt tokens not
served from the prefix cache as new tokens, generated tokens as output). Only time is predicted.

Compared per request: latency and TTFT (median / p90 APE, bias = median signed error); per
run: throughput (requests/s over first arrival -> last completion, output tokens/s) and the
time-weighted batch size (engine steps weighted by their duration; the simulator's engine
timeline likewise).

Held-out discipline: two predictions are made for every run,

- ``profile``: the cost profile as given (fitted on single-request runs only), so every run is
  out of sample;
- ``profile+step-fit`` (with ``fit_levels``): ``mem_efficiency``, ``compute_efficiency`` and
  ``step_overhead_s`` re-fitted by robust least squares on the *engine steps* of the fit levels
  only (each step's measured wall time against ``T_pass`` of its batch aggregates); the runs of
  those levels are in-sample and reported as such, never as validation.

The headline (and ``--max-median-ape``) is the held-out median APE of request latency.

Layout (one concept per module):

- ``load``: ``ServingRun`` and ``load_run`` (a measured run directory);
- ``predict``: replay plans, ``predict_run``, run-level figures (measured and predicted);
- ``fit``: step aggregates and ``fit_step_params`` (the step fit);
- ``compare``: ``validate_serving`` (the whole validation) and ``speedup_table``;
- ``report``: ``write_report`` (markdown, CSVs, summary) and ``plots``.

The command is ``specsim validate serving`` (``specsim_cli/commands/serving_validation.py``).
"""

from .compare import ServingValidation, speedup_table, validate_serving
from .fit import FIT_PARAMS, SEQ_OVERHEAD_START, fit_step_params, step_aggregates, step_times
from .load import ServingRun, load_run
from .predict import (MEMORY_FRACTION, measured_run_figures, predict_run, predicted_run_figures,
                      replay_plans, replay_system_plans)
from .report import plots, write_report

__all__ = ["FIT_PARAMS", "MEMORY_FRACTION", "SEQ_OVERHEAD_START", "ServingRun", "ServingValidation",
           "fit_step_params", "load_run", "measured_run_figures", "plots", "predict_run", "predicted_run_figures",
           "replay_plans", "replay_system_plans", "speedup_table", "step_aggregates", "step_times",
           "validate_serving", "write_report"]
