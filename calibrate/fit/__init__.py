"""The fit side of calibration: measured-run loading, every fitter, importers of third-party data.
Reads runs only through ``calibrate.contracts`` (trace schema, spec metrics, call table); never imports
``calibrate.measure``. Held-out validation of what is fitted here lives in ``validate``."""
