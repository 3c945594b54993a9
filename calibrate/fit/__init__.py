"""The fit side of calibration: measured-run loading, every fitter, importers of third-party data, GPU profiles.
Reads runs only through ``calibrate.contracts.trace_schema`` and ``calibrate.contracts.spec_metrics``; never imports ``calibrate.measure``."""
