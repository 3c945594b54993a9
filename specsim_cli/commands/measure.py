"""``specsim measure ...``: every command that runs an engine or a real system (runs, serving ladders,
microbenchmarks, the GPU step campaign's plan, the studies on real small models)."""

HELP = "Run the real systems and engines: runs, serving ladders, microbenchmarks, studies on real small models."
# new name -> (its function, "module:function" under specsim_cli.commands; its former name, a hidden alias, or None)
COMMANDS = {
    "prepare-models": ("runs:prepare_models_cmd", "calibrate prepare-models"),
    "cut-draft": ("runs:cut_draft_cmd", "calibrate cut-draft"),
    "run": ("runs:run_cmd", "calibrate run"),
    "microbench": ("runs:microbench_cmd", "calibrate microbench"),
    "static-bench": ("runs:static_bench_cmd", "calibrate static-bench"),
    "op-bench": ("runs:op_bench_cmd", "calibrate gpu op-bench"),
    "serve-run": ("serving_runs:serve_run_cmd", "calibrate serve-run"),
    "serve-systems": ("serving_runs:serve_systems_cmd", "calibrate serve-systems"),
    "serve-bench": ("serving:serve_bench_cmd", "calibrate serve-bench"),
    "serve-specreason": ("serving:serve_specreason_cmd", "calibrate serve-specreason"),
    "compare-serve": ("serving:compare_serve_cmd", "calibrate compare-serve"),
    "spec-metrics": ("runs:spec_metrics_cmd", "calibrate spec-metrics"),
    "burst-probe": ("serving:burst_probe", "calibrate burst-probe"),
    "step-plan": ("gpu:step_plan_cmd", "calibrate gpu step-plan"),
    "step-predict": ("gpu:step_predict_cmd", "calibrate gpu step-predict"),
    "kernel-plan": ("gpu:kernel_plan_cmd", None),
}
# sub-groups: name -> (help, a table as COMMANDS)
GROUPS = {
    "study": ("Speculative decoding study on real small models (torch, CPU) against the simulator's predictions.",
              {"specdecode": ("study:specdecode", "study specdecode"),
               "draft-head": ("study:draft_head", "study draft-head")}),
}
