"""The top-level commands beside the task groups: ``list``, ``show`` (``specsim_cli/commands/show.py``), ``init``."""

from __future__ import annotations

from pathlib import Path

import typer

from simulator.errors import InputError
from simulator.output_contract import writes
from specsim_cli.commands.show import show

app = typer.Typer(add_completion=False)


@app.command("list")
def list_cmd(what: str = typer.Argument(..., help="hardware | models | engines | scenarios | workloads | profiles")):
    """List the hardware catalog, the model catalog, the serving engines' fitted versions, the shipped scenarios,
    workloads or profiles.

    Example: specsim list hardware
    """
    from simulator.report.listing import listing

    if what not in ("hardware", "models", "engines", "scenarios", "workloads", "profiles"):
        raise InputError(None, "what", f"expected hardware, models, engines, scenarios, workloads or profiles "
                         f"(got {what!r})")
    listing(what)


app.command()(show)


@app.command()
@writes(path="yaml")
def init(
    path: Path = typer.Argument(..., help="scenario file to write, e.g. my-scenario.yaml"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing file"),
):
    """Write a commented scenario to start from (the reference setup, every field explained).

    Example: specsim init my-scenario.yaml && specsim simulate whatif my-scenario.yaml
    """
    from simulator.inputs.loading import write_atomic
    from simulator.inputs.scenario_template import INIT_TEMPLATE

    if str(path).strip() == "" or path.suffix.lower() not in (".yaml", ".yml"):
        raise InputError(None, "path", f"expected a .yaml file name (got {str(path)!r})")
    if path.is_dir():
        raise InputError(None, "path", f"{path} is a folder; give a file name, e.g. {path / 'scenario.yaml'}")
    if path.exists() and not force:
        raise InputError(None, "path", f"{path} exists: refusing to overwrite it; pass --force or choose another name")
    from simulator.report.report_table import wrote

    write_atomic(path, INIT_TEMPLATE.format(name=path.stem, path=path))
    wrote(path, "scenario; edit it, then specsim show / whatif / capacity")
