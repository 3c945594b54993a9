"""``specsim calibrate import-vidur | import-aiconfigurator | fit-gpu | validate-gpu`` (thin: parse, call, print)."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    @app.command("import-vidur")
    def import_vidur_cmd(
        folder: Path = typer.Argument(..., help="Vidur data/profiling-style folder (compute/, network/)"),
        out: Path = typer.Option(..., help="records CSV to write (+ OUT.provenance.yaml)"),
    ) -> None:
        """Vidur's per-layer op and all-reduce profiles -> measured op records (our contract)."""
        from calibrate.gpu_profiles.import_vidur import import_vidur
        from calibrate.gpu_profiles.records import write_records

        df, prov = import_vidur(folder)
        write_records(df, out, prov)
        typer.echo(f"wrote {len(df)} records to {out} ({', '.join(f'{k} {v}' for k, v in df['op'].value_counts().items())})")

    @app.command("import-aiconfigurator")
    def import_aic_cmd(
        folder: Path = typer.Argument(..., help="AIConfigurator systems/data-style folder (<gpu>/{gemm,attention,comm}/...)"),
        out: Path = typer.Option(..., help="records CSV to write (+ OUT.provenance.yaml)"),
    ) -> None:
        """AIConfigurator's collected vLLM kernel tables -> measured op records (our contract)."""
        from calibrate.gpu_profiles.import_aiconfigurator import import_aiconfigurator
        from calibrate.gpu_profiles.records import write_records

        df, prov = import_aiconfigurator(folder)
        write_records(df, out, prov)
        typer.echo(f"wrote {len(df)} records to {out} ({', '.join(f'{k} {v}' for k, v in df['op'].value_counts().items())})")
