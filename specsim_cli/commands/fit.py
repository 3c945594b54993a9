"""``specsim fit ...``: every fitter (cost profiles, workloads, accuracy, acceptance, the GPU kernel and engine
models, the priors they transfer)."""

HELP = "Fit profiles and priors: cost, workload, accuracy, acceptance, the GPU kernel and engine models."
# new name -> (its function, "module:function" under specsim_cli.commands; its former name, a hidden alias)
COMMANDS = {
    "cost": ("fitting:fit", "calibrate fit"),
    "workload": ("fitting:fit_workload", "calibrate fit-workload"),
    "workload-traces": ("fitting:fit_workload_traces", "calibrate fit-workload-traces"),
    "bench": ("fitting:fit_bench", "calibrate fit-bench"),
    "accuracy": ("fitting:fit_accuracy", "calibrate fit-accuracy"),
    "acceptance": ("runs:fit_acceptance_cmd", "calibrate fit-acceptance"),
    "mixture": ("runs:fit_mixture_cmd", "calibrate fit-mixture"),
    "drafter-curves": ("fitting:fit_drafter_curves", "calibrate fit-drafter-curves"),
    "front-end-cpu": ("fitting:fit_front_end_cpu", None),
    "published-priors": ("fitting:published_priors", "calibrate published-priors"),
    "gpu": ("gpu:fit_gpu_cmd", "calibrate fit-gpu"),
    "engine": ("gpu:fit_engine_cmd", "calibrate gpu fit-engine"),
    "moe": ("gpu:fit_moe_cmd", "calibrate gpu fit-moe"),
    "mla": ("gpu:fit_mla_cmd", "calibrate gpu fit-mla"),
    "quant": ("gpu:fit_quant_cmd", "calibrate gpu fit-quant"),
    "attention": ("gpu:fit_attention_cmd", None),
    "allreduce": ("gpu:fit_allreduce_cmd", None),
    "transfer-priors": ("gpu:transfer_priors_cmd", "calibrate gpu transfer-priors"),
}
# commands that, past a few seconds, say what they are doing and when they are done (report_table.job)
ANNOUNCED = {"cost": "calibrate fit: robust least squares over the measured calls",
             "workload": "calibrate fit-workload: fitting the workload distributions"}
