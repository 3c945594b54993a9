"""``specsim simulate ...``: predictions from a scenario, no engine run (what-if grids, capacity, reports, one step's
time, one workload's plain serving)."""

HELP = "Predict from a scenario: what-if grids, capacity planning, reports, one engine step's time."
# new name -> the command's former path (every former name keeps working, hidden: specsim_cli.commands.aliases)
COMMANDS = {
    "whatif": ("whatif",),
    "capacity": ("capacity",),
    "report": ("report",),
    "pass-time": ("pass-time",),
    "serve-workload": ("serve-workload",),
}
