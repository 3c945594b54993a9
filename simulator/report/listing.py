"""``specsim list``: the catalogs and the shipped scenarios as tables."""

from __future__ import annotations

from rich.table import Table

from simulator.catalog import hardware_catalog, model_catalog
from simulator.report.report_table import print_rich_table


def engines_table() -> Table:
    """The engine catalog (``simulator/catalog/engine_hosts.yaml``): each fitted version's host terms and where they
    came from; a scenario's ``serving_engine`` or ``pass-time --engine-version`` takes its own version's entry or the nearest
    (:func:`simulator.catalog.versions.nearest_version`)."""
    from simulator.catalog.engine_hosts import ServingEngine, async_on, engine_hosts

    ms = lambda p: "-" if p is None else f"{p.value * 1e3:.3g}"  # noqa: E731
    t = Table("engine", "version", "t_seq us", "t_tp ms", "t_call ms", "t_fe ms", "async overlap", "async default",
              "kind", "source")
    for name, versions in engine_hosts().items():
        for v in versions:
            on = async_on(ServingEngine(name=name, version=v.version), v.version)
            t.add_row(name, v.version, f"{v.seq_overhead_s.value * 1e6:.3g}", ms(v.tp_step_overhead_s),
                      ms(v.call_overhead_s), ms(v.front_end_serial_s), f"{v.async_overlap.value:.3g}",
                      "on" if on else "off", v.seq_overhead_s.kind, str(v.seq_overhead_s.source)[:60])
    return t


def listing(what: str) -> None:
    if what == "engines":
        t = engines_table()
    elif what == "hardware":
        t = Table("name", "device", "BF16 TFLOP/s", "HBM GB/s", "memory GB", "link", "link GB/s", "source")
        for h in hardware_catalog().values():
            t.add_row(h.name, h.display, f"{h.dense_bf16_flops_per_s / 1e12:.1f}", f"{h.memory_bandwidth_bytes_per_s / 1e9:.0f}",
                      f"{h.memory_bytes / 1e9:.0f}", h.interconnect, f"{h.link_bandwidth_bytes_per_s / 1e9:.0f}", h.source)
    elif what == "models":
        t = Table("name", "arch", "layers", "hidden", "heads/kv", "head_dim", "inter", "vocab", "params (computed)", "published")
        for m in model_catalog().values():
            pub = f"{m.published_params / 1e9:.3f}B" if m.published_params else "-"
            t.add_row(m.name, m.arch, str(m.layers), str(m.hidden), f"{m.heads}/{m.kv_heads}", str(m.head_dim),
                      str(m.intermediate), str(m.vocab), f"{m.params / 1e9:.3f}B", pub)
    elif what in ("workloads", "profiles"):
        from simulator.inputs.loading import read_yaml
        from simulator.paths import profile_dir

        kinds = ("workload",) if what == "workloads" else ("cost", "accuracy", "gpu", "workload")
        t = (Table("workload (scenario's workload:)", "dataset", "base model", "small model", "provenance")
             if what == "workloads" else Table("profile", "kind", "for", "provenance"))
        for kind in kinds:
            for p in sorted(profile_dir(kind).glob(f"{kind}_*.yaml")):
                d = read_yaml(p)
                d = d if isinstance(d, dict) else {}
                prov = d.get("provenance") if isinstance(d.get("provenance"), dict) else {}
                src = f"{prov.get('kind', '?')}: {str(prov.get('source', ''))[:70]}"
                name = p.stem[len(kind) + 1:]
                if what == "workloads":
                    ds = str(d.get("dataset", ""))
                    t.add_row(name, ds if len(ds) <= 40 else ds[:39] + "…", str(d.get("base_model", "")),
                              str(d.get("small_model", "")), str(prov.get("kind", "?")))
                else:
                    what_for = d.get("hardware") or d.get("workload") or d.get("base_model") or ""
                    t.add_row(name, kind, str(what_for), src)
    else:
        from simulator.inputs.loading import read_yaml
        from simulator.inputs.scenario import list_scenarios

        t = Table("scenario", "description")
        for p in list_scenarios():
            d = read_yaml(p)
            t.add_row(p.stem, d.get("description", "") if isinstance(d, dict) else "")
    print_rich_table(t)
