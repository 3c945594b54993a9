"""``specsim import ...``: every importer (third-party measurements and published data into our contracts, every
record checked first)."""

HELP = "Import third-party measurements into our contracts (every record checked first)."
# new name -> (its function, "module:function" under specsim_cli.commands; its former name, a hidden alias)
COMMANDS = {
    "bench-serve": ("serving:import_bench_serve_cmd", "calibrate import-bench-serve"),
    "vidur": ("gpu:import_vidur_cmd", "calibrate import-vidur"),
    "aiconfigurator": ("gpu:import_aic_cmd", "calibrate import-aiconfigurator"),
    "llmservingsim": ("gpu:import_lss_cmd", "calibrate import-llmservingsim"),
    "llm-inference-bench": ("gpu:import_lib_cmd", "calibrate import-llm-inference-bench"),
    "specreason": ("fitting:import_specreason_cmd", "calibrate import-specreason"),
    "aggregates": ("runs:import_aggregates_cmd", "calibrate import-aggregates"),
}
