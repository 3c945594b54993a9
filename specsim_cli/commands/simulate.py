"""``specsim simulate ...``: predictions from a scenario, no engine run (what-if grids, capacity, reports, one step's
time, one workload's plain serving)."""

HELP = "Predict from a scenario: what-if grids, capacity planning, reports, one engine step's time."
# new name -> (its function, "module:function" under specsim_cli.commands; its former name, a hidden alias)
COMMANDS = {
    "whatif": ("predict:whatif", "whatif"),
    "capacity": ("capacity:capacity", "capacity"),
    "report": ("predict:report", "report"),
    "pass-time": ("predict:pass_time", "pass-time"),
    "serve-workload": ("predict:serve_workload", "serve-workload"),
}
