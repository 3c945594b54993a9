"""The command definitions as the packages register them (``simulator/cli.py``, ``calibrate/cli.py``, the ``register``
functions of ``calibrate`` and ``validate``), composed once, on first use, into one click tree keyed by each
command's former path. The task groups (``specsim_cli.commands.tree``) take their commands from here by that path,
so importing the tree (``specsim --help``) imports none of these modules."""

from __future__ import annotations

import functools

import typer

# commands that, past a few seconds, say what they are doing and when they are done (report_table.job)
ANNOUNCED = {
    (): (("validate", "validate: fitting and predicting the held-out runs (trace replay, then distribution mode)"),
         ("validate-serving", "validate-serving: fitting step times and replaying the measured levels"),
),
    ("calibrate",): (("fit", "calibrate fit: robust least squares over the measured calls"),
                     ("fit-workload", "calibrate fit-workload: fitting the workload distributions")),
}


def _announce_when_long(typer_app: typer.Typer, name: str, what: str) -> None:
    """Wrap a registered command so that, past a few seconds, it says what it is doing and when it is done
    (``report_table.job``); the command's own code (in other packages) stays as it is."""
    for info in typer_app.registered_commands:
        if (info.name or getattr(info.callback, "__name__", None)) == name and info.callback is not None \
                and not getattr(info.callback, "_announced", False):
            info.callback = announcing(info.callback, what)


def announcing(inner, what: str):
    """``inner`` wrapped so that, past a few seconds, it says ``what`` it is doing and when it is done."""
    from simulator.report.report_table import job

    @functools.wraps(inner)
    def wrapper(*args, **kwargs):
        with job(what, after_s=3.0):
            return inner(*args, **kwargs)

    wrapper._announced = True
    return wrapper


def _calibrate_app() -> typer.Typer:
    """The former ``calibrate`` group: calibrate/cli.py's app plus the fitters and the serving runners registered on
    it."""
    from calibrate.cli import app as calibrate_app
    from calibrate.fit.fit_cli import register as register_fit
    from calibrate.measure.serving_cli import register as register_serving

    register_fit(calibrate_app)
    register_serving(calibrate_app)
    return calibrate_app


def _validate_app() -> typer.Typer:
    """The former top-level ``validate`` and ``validate-*`` commands."""
    from validate.cli import register, register_checks
    from validate.serving import register as register_serving

    app = typer.Typer(add_completion=False)
    register(app)
    register_serving(app)
    register_checks(app)
    return app


@functools.cache
def former_tree():
    """The click tree of every command under its former path (built once)."""
    from calibrate.measure.study.cli import app as study_app
    from simulator.cli import app as simulator_app

    root = typer.Typer(add_completion=False)
    root.add_typer(simulator_app)
    validate_app = _validate_app()
    root.add_typer(validate_app)
    calibrate_app = _calibrate_app()
    root.add_typer(calibrate_app, name="calibrate")
    root.add_typer(study_app, name="study")
    for typer_app, prefix in ((validate_app, ()), (calibrate_app, ("calibrate",))):
        for name, what in ANNOUNCED[prefix]:
            _announce_when_long(typer_app, name, what)
    return typer.main.get_command(root)


def command(path: tuple[str, ...]):
    """The click command at ``path`` (its former path) in :func:`former_tree`."""
    cmd = former_tree()
    for word in path:
        cmd = cmd.commands[word]
    return cmd
