"""``specsim fit ...``: every fitter (cost profiles, workloads, accuracy, acceptance, the GPU kernel and engine
models, the priors they transfer)."""

HELP = "Fit profiles and priors: cost, workload, accuracy, acceptance, the GPU kernel and engine models."
COMMANDS = {
    "cost": ("calibrate", "fit"),
    "workload": ("calibrate", "fit-workload"),
    "workload-traces": ("calibrate", "fit-workload-traces"),
    "bench": ("calibrate", "fit-bench"),
    "accuracy": ("calibrate", "fit-accuracy"),
    "acceptance": ("calibrate", "fit-acceptance"),
    "mixture": ("calibrate", "fit-mixture"),
    "drafter-curves": ("calibrate", "fit-drafter-curves"),
    "published-priors": ("calibrate", "published-priors"),
    "gpu": ("calibrate", "fit-gpu"),
    "engine": ("calibrate", "gpu", "fit-engine"),
    "moe": ("calibrate", "gpu", "fit-moe"),
    "mla": ("calibrate", "gpu", "fit-mla"),
    "quant": ("calibrate", "gpu", "fit-quant"),
    "transfer-priors": ("calibrate", "gpu", "transfer-priors"),
}
