"""``specsim calibrate import-vidur | import-aiconfigurator | import-llmservingsim | import-llm-inference-bench |
fit-gpu`` (thin: parse, call, print). Bad input: one line ``error: FILE: ...`` on stderr, exit 2 (the ``specsim``
error contract); tables an importer skipped: one ``warning:`` line on stderr naming them and why."""

from __future__ import annotations

from pathlib import Path

import typer


def _warn_skipped(skipped: dict[str, str], modules: dict[str, int] | None = None) -> None:
    """One stderr line naming what an importer skipped (files it cannot interpret, modules it does not map)."""
    items = [f"{f} ({why})" for f, why in skipped.items()]
    items += [f"module {m!r} ({n} rows: not one the importer maps)" for m, n in (modules or {}).items()]
    if items:
        what = f"{len(skipped)} table(s) whose layout cannot be interpreted" if skipped else ""
        what += (" and " if skipped and modules else "") + (f"{len(modules)} unknown module(s)" if modules else "")
        typer.echo(f"warning: skipped {what}: " + "; ".join(items), err=True)


def register(app: typer.Typer) -> None:
    @app.command("import-vidur")
    def import_vidur_cmd(
        folder: Path = typer.Argument(..., help="Vidur data/profiling-style folder (compute/, network/)"),
        out: Path = typer.Option(..., help="records CSV to write (+ OUT.provenance.yaml)"),
    ) -> None:
        """Vidur's per-layer op and all-reduce profiles -> measured op records (our contract)."""
        from calibrate.fit.gpu_profiles.import_vidur import import_vidur
        from calibrate.fit.gpu_profiles.records import write_records

        df, prov = import_vidur(folder)
        write_records(df, out, prov)
        typer.echo(f"wrote {len(df)} records to {out} ({', '.join(f'{k} {v}' for k, v in df['op'].value_counts().items())})")

    @app.command("import-aiconfigurator")
    def import_aic_cmd(
        folder: Path = typer.Argument(..., help="AIConfigurator systems/data-style folder (<gpu>/{gemm,attention,comm}/...)"),
        out: Path = typer.Option(..., help="records CSV to write (+ OUT.provenance.yaml)"),
    ) -> None:
        """AIConfigurator's collected vLLM kernel tables -> measured op records (our contract)."""
        from calibrate.fit.gpu_profiles.import_aiconfigurator import import_aiconfigurator
        from calibrate.fit.gpu_profiles.records import write_records

        df, prov = import_aiconfigurator(folder)
        write_records(df, out, prov)
        _warn_skipped(prov.get("files_skipped", {}))
        typer.echo(f"wrote {len(df)} records to {out} ({', '.join(f'{k} {v}' for k, v in df['op'].value_counts().items())})")

    @app.command("import-llmservingsim")
    def import_lss_cmd(
        folder: Path = typer.Argument(..., help="LLMServingSim perf_models-style folder (<GPU>/<org>/<model>/tp<N>/)"),
        out: Path = typer.Option(..., help="records CSV to write (+ OUT.provenance.yaml)"),
    ) -> None:
        """LLMServingSim's per-module layer and attention profiles -> measured op records (our contract)."""
        from calibrate.fit.gpu_profiles.import_llmservingsim import import_llmservingsim
        from calibrate.fit.gpu_profiles.records import write_records

        df, prov = import_llmservingsim(folder)
        write_records(df, out, prov)
        _warn_skipped(prov.get("files_skipped", {}), prov.get("modules_unknown", {}))
        typer.echo(f"wrote {len(df)} records to {out} ({', '.join(f'{k} {v}' for k, v in df['op'].value_counts().items())})")

    @app.command("import-llm-inference-bench")
    def import_lib_cmd(
        file: Path = typer.Argument(..., help="LLM-Inference-Bench All_results.csv"),
        out: Path = typer.Option(..., help="runs CSV to write (+ OUT.provenance.yaml)"),
    ) -> None:
        """LLM-Inference-Bench's whole offline-batch runs -> one row per consistent run (our names and units)."""
        import datetime as dt

        from calibrate.fit.gpu_profiles.import_llm_inference_bench import BENCH_COLUMNS, import_llm_inference_bench
        from calibrate.fit.gpu_profiles.records import write_table

        df, prov = import_llm_inference_bench(file)
        meta = {"date": dt.date.today().isoformat(), **prov, "rows": int(len(df)),
                "columns": {c: f"{t}: {u}" for c, (t, u) in BENCH_COLUMNS.items()}}
        write_table(df[list(BENCH_COLUMNS)], out, meta)
        typer.echo(f"wrote {len(df)} runs to {out} ({sum(prov['rows_dropped'].values())} inconsistent rows dropped)")

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

        from calibrate.fit.gpu_profiles.profile import build_gpu_profile, write_gpu_profile
        from calibrate.fit.gpu_profiles.records import read_records, sidecar_path

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
