"""``specsim import ...``: every importer (third-party measurements and published data into our contracts, every
record checked first)."""

HELP = "Import third-party measurements into our contracts (every record checked first)."
COMMANDS = {
    "bench-serve": ("calibrate", "import-bench-serve"),
    "vidur": ("calibrate", "import-vidur"),
    "aiconfigurator": ("calibrate", "import-aiconfigurator"),
    "llmservingsim": ("calibrate", "import-llmservingsim"),
    "llm-inference-bench": ("calibrate", "import-llm-inference-bench"),
    "specreason": ("calibrate", "import-specreason"),
    "aggregates": ("calibrate", "import-aggregates"),
}
DEFINED = {"bench-serve": "specsim_cli.commands.serving:import_bench_serve_cmd"}
