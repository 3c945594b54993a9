"""``specsim validate ...``: every validation (predictions against held-out measurements, input checks).
``specsim validate RUN...`` (the former ``specsim validate``) still runs ``validate runs``, with a note."""

HELP = "Validate predictions against held-out measurements, and check inputs (exit 1: a quality bar failed)."
# new name -> (its function, "module:function" under specsim_cli.commands; its former name, a hidden alias)
COMMANDS = {
    "runs": ("validations:validate", "validate"),
    "serving": ("specsim_cli.commands.serving_validation:validate_serving_cmd", "validate-serving"),
    "sharegpt-spread": ("specsim_cli.commands.serving_validation:sharegpt_spread_cmd", None),
    "serving-screen": ("specsim_cli.commands.serving_validation:serving_screen_cmd", None),
    "serving-regimes": ("specsim_cli.commands.serving_validation:serving_regimes_cmd", None),
    "serving-accuracy": ("specsim_cli.commands.serving_validation:serving_accuracy_cmd", None),
    "kv-waves": ("specsim_cli.commands.serving_validation:kv_waves_cmd", None),
    "capacity": ("checks:validate_capacity_cmd", "validate-capacity"),
    "drift": ("validations:validate_drift", "validate-drift"),
    "cpu": ("validations:validate_cpu", "validate-cpu"),
    "inferencex": ("validations:validate_inferencex", "validate-inferencex"),
    "moe-routing": ("validations:validate_moe_routing", "validate-moe-routing"),
    "moe-shapes": ("validations:validate_moe_shapes", None),
    "gpu-summary": ("validations:validate_gpu_summary", "validate-gpu-summary"),
    "mixture": ("checks:validate_mixture_cmd", "calibrate validate-mixture"),
    "kernels": ("checks:validate_kernels_cmd", "calibrate gpu validate-kernels"),
    "step-summary": ("gpu:step_summary_cmd", "calibrate gpu step-summary"),
    "kernel-summary": ("gpu:kernel_summary_cmd", None),
    "priors": ("gpu:check_priors_cmd", "calibrate gpu check-priors"),
    "spec-sweep": ("gpu:spec_sweep_cmd", "calibrate gpu spec-sweep"),
    "trace": ("runs:check_trace_cmd", "calibrate check-trace"),
}
# commands that, past a few seconds, say what they are doing and when they are done (report_table.job)
ANNOUNCED = {"runs": "validate: fitting and predicting the held-out runs (trace replay, then distribution mode)",
             "serving": ("validate-serving: fitting and replaying (the measured levels' step times; with --released the "
                         "host terms of every held-out fold)"),
             "sharegpt-spread": "validate sharegpt-spread: replaying the ShareGPT runs at four spreads",
             "serving-screen": "validate serving-screen: replaying every released run with the catalog as it stands",
             "kv-waves": "validate kv-waves: measuring the bursts on vLLM (or reading them), replaying them",
             "capacity": "validate-capacity: judging the measured levels, searching the predicted capacity"}
DEFAULT = "runs"  # an unknown first word that is a path or an option: the former `specsim validate RUN...`
