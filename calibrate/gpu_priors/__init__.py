"""GPU kernel profiles (third party) -> measured op records -> a GPU cost model that transfers.

- :mod:`.records`: the op-record contract (columns, units, provenance sidecar), atomic writes;
- :mod:`.import_vidur`, :mod:`.import_aiconfigurator`: the two public layouts into that contract;
- :mod:`.kernel_model`: per-op times from a few named physical parameters;
- :mod:`.fit`: per-GPU fits, the profile YAML (``calibrate/gpu_priors/profiles/gpu_*.yaml``), transfer to other GPUs;
- :mod:`.validate`: held-out figures (model, GPU, TP, KV length) against the priors and a roofline.
"""
