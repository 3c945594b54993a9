"""The run side of calibration: real engines (vLLM, torch), the orchestrator and runners, serving runs and
benchmarks. The only code that needs torch or vLLM; shares only ``calibrate.contracts.trace_schema`` and
``calibrate.contracts.spec_metrics`` (the trace and metrics contracts) with ``calibrate.fit``."""
