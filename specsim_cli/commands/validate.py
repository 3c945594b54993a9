"""``specsim validate ...``: every validation (predictions against held-out measurements, input checks).
``specsim validate RUN...`` (the former ``specsim validate``) still runs ``validate runs``, with a note."""

HELP = "Validate predictions against held-out measurements, and check inputs (exit 1: a quality bar failed)."
COMMANDS = {
    "runs": ("validate",),
    "serving": ("validate-serving",),
    "capacity": ("validate-capacity",),
    "drift": ("validate-drift",),
    "cpu": ("validate-cpu",),
    "inferencex": ("validate-inferencex",),
    "moe-routing": ("validate-moe-routing",),
    "gpu-summary": ("validate-gpu-summary",),
    "mixture": ("calibrate", "validate-mixture"),
    "kernels": ("calibrate", "gpu", "validate-kernels"),
    "step-summary": ("calibrate", "gpu", "step-summary"),
    "priors": ("calibrate", "gpu", "check-priors"),
    "spec-sweep": ("calibrate", "gpu", "spec-sweep"),
    "trace": ("calibrate", "check-trace"),
}
DEFINED = {
    "capacity": "specsim_cli.commands.checks:validate_capacity_cmd",
    "mixture": "specsim_cli.commands.checks:validate_mixture_cmd",
    "kernels": "specsim_cli.commands.checks:validate_kernels_cmd",
}
# defined commands that, past a few seconds, say what they are doing (the others: specsim_cli.commands.legacy)
ANNOUNCED = {"capacity": "validate-capacity: judging the measured levels, searching the predicted capacity"}
DEFAULT = "runs"  # an unknown first word: the former `specsim validate RUN...`
