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

    @app.command("fit-gpu")
    def fit_gpu_cmd(
        records: list[Path] = typer.Argument(..., help="records CSVs (import-vidur / import-aiconfigurator output)"),
        gpu: str = typer.Option(..., help="catalog hardware name, e.g. a100-80gb"),
        out: Path = typer.Option(..., help="profile YAML to write, e.g. simulator/profiles/gpu_a100-80gb.yaml"),
        date: str = typer.Option(None, help="date recorded in the provenance (default: today)"),
    ) -> None:
        """Fit the GPU kernel model's named parameters for one GPU and write the profile with provenance."""
        import sys

        import pandas as pd
        import yaml

        from calibrate.gpu_profiles.profile import build_gpu_profile, write_gpu_profile
        from calibrate.gpu_profiles.records import read_records, sidecar_path

        frames, inputs = [], {}
        for r in records:
            frames.append(read_records(r))
            side = sidecar_path(r)
            if side.is_file():
                meta = yaml.safe_load(side.read_text(encoding="utf-8")) or {}
                inputs[meta.get("source", str(r))] = (f"{meta.get('source_path', r)} (repo {meta.get('source_repo', '?')}"
                                                      f" @ {str(meta.get('source_commit', '?'))[:12]})")
        command = "specsim calibrate fit-gpu " + " ".join(sys.argv[sys.argv.index("fit-gpu") + 1:]) if "fit-gpu" in sys.argv else "specsim calibrate fit-gpu"
        prof = build_gpu_profile(pd.concat(frames, ignore_index=True), gpu, inputs, command, date)
        write_gpu_profile(prof, out, command)
        typer.echo(f"wrote {out}: " + ", ".join(f"{k}={v['value']:.4g} ({v['kind']})" for k, v in prof["params"].items()))
