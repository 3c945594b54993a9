"""The fit side of calibration: measured-run loading, every fitter, importers of third-party data, GPU profiles.
Reads runs only through ``calibrate.trace_schema`` and ``calibrate.spec_metrics``; never imports ``calibrate.run``."""
