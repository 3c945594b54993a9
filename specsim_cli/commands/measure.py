"""``specsim measure ...``: every command that runs an engine or a real system (runs, serving ladders,
microbenchmarks, the GPU step campaign's plan, the studies on real small models)."""

HELP = "Run the real systems and engines: runs, serving ladders, microbenchmarks, studies on real small models."
COMMANDS = {
    "prepare-models": ("calibrate", "prepare-models"),
    "cut-draft": ("calibrate", "cut-draft"),
    "run": ("calibrate", "run"),
    "microbench": ("calibrate", "microbench"),
    "static-bench": ("calibrate", "static-bench"),
    "op-bench": ("calibrate", "gpu", "op-bench"),
    "serve-run": ("calibrate", "serve-run"),
    "serve-systems": ("calibrate", "serve-systems"),
    "serve-bench": ("calibrate", "serve-bench"),
    "serve-specreason": ("calibrate", "serve-specreason"),
    "compare-serve": ("calibrate", "compare-serve"),
    "spec-metrics": ("calibrate", "spec-metrics"),
    "burst-probe": ("calibrate", "burst-probe"),
    "step-plan": ("calibrate", "gpu", "step-plan"),
    "step-predict": ("calibrate", "gpu", "step-predict"),
}
# commands defined in specsim_cli (name -> "module:function"); the others come from their former definition
DEFINED = {
    "serve-bench": "specsim_cli.commands.serving:serve_bench_cmd",
    "serve-specreason": "specsim_cli.commands.serving:serve_specreason_cmd",
    "compare-serve": "specsim_cli.commands.serving:compare_serve_cmd",
    "burst-probe": "specsim_cli.commands.serving:burst_probe",
}
# sub-groups: name -> (help, {new name: former path})
GROUPS = {
    "study": ("Speculative decoding study on real small models (torch, CPU) against the simulator's predictions.",
              {"specdecode": ("study", "specdecode"), "draft-head": ("study", "draft-head")}),
}
