"""``specsim calibrate ...`` commands. Heavy engines are imported inside the commands."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, add_completion=False)
