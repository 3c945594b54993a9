"""The MoE layer fit (calibrate.gpu_priors.moe_fit): synthetic recovery through the one fitter, the catalog priors
it wrote, the priors-file merge, and bad input -> one line, exit 2."""

import numpy as np
import pandas as pd
import pytest
import yaml

from calibrate.gpu_priors import moe_catalog as MC
from calibrate.gpu_priors import moe_fit as M
from simulator.catalog import get_hardware, hardware_catalog
from simulator.cost.cost_profile import prior_profile
from specsim_cli.main import main

TRUE = {"h100-sxm.moe_mem_efficiency": 0.9, "h100-sxm.moe_compute_efficiency": 0.35,
        "h100-sxm.moe_layer_overhead_s": 30e-6, "h100-sxm.expert_overhead_s": 0.2e-6,
        "h100-sxm.moe_token_passes": 5.5, "h100-sxm.moe_ep_overhead_s": 20e-6,
        "l40s.moe_mem_efficiency": 0.85, "l40s.moe_compute_efficiency": 0.45, "l40s.moe_layer_overhead_s": 25e-6,
        "l40s.expert_overhead_s": 0.1e-6, "l40s.moe_token_passes": 4.8, "l40s.moe_ep_overhead_s": 50e-6,
        "power_law_1.2.routing_skew": 0.75,
        "h100-sxm|w8a8-fp8-block.compute_ratio": 0.5, "h100-sxm|w8a8-fp8-block.mem_ratio": 0.9,
        "l40s|w8a8-fp8-block.compute_ratio": 0.9, "l40s|w8a8-fp8-block.mem_ratio": 1.0}


def synthetic(rng) -> pd.DataFrame:
    rows = []
    for gpu in ("h100-sxm", "l40s"):
        for (H, I, E, k) in ((2048, 768, 128, 8), (4096, 1536, 128, 8), (7168, 2048, 256, 8), (4096, 14336, 8, 2)):
            for tp, ep in ((1, 1), (2, 1), (8, 1), (1, 8), (1, 32)):
                if ep > E:
                    continue
                for N in (1, 4, 16, 64, 256, 1024, 4096, 16384):
                    for dist, dtype in (("balanced", "bfloat16"), ("power_law_1.2", "bfloat16"),
                                        ("balanced", "fp8_block")):
                        rows.append(dict(gpu=gpu, tokens=float(N), hidden=float(H), inter=float(I), experts=float(E),
                                         topk=float(k), tp=float(tp), ep=float(ep), distribution=dist, mats=3.0,
                                         bytes_per_weight=M.DTYPES[dtype][0], rate=M.DTYPES[dtype][1], dtype=dtype,
                                         source="aic"))
    f = M.with_layer_shape(pd.DataFrame(rows))
    t = M.predict(f, TRUE)
    return f.assign(time_s=t * np.exp(rng.normal(0, 0.01, len(t))))


def test_fit_recovers_the_parameters_of_synthetic_tables():
    f = synthetic(np.random.default_rng(0))
    fr = M.fit(f)
    for n in ("h100-sxm.moe_mem_efficiency", "h100-sxm.moe_compute_efficiency", "l40s.moe_mem_efficiency",
              "l40s.moe_compute_efficiency", "power_law_1.2.routing_skew", "h100-sxm.moe_token_passes",
              "h100-sxm|w8a8-fp8-block.compute_ratio", "h100-sxm|w8a8-fp8-block.mem_ratio",
              "l40s|w8a8-fp8-block.compute_ratio"):
        assert fr.values[n] == pytest.approx(TRUE[n], rel=0.05), n
    for n in ("h100-sxm.moe_layer_overhead_s", "l40s.moe_ep_overhead_s"):
        assert fr.values[n] == pytest.approx(TRUE[n], rel=0.25), n
    err = np.abs(M.predict(f, fr.values) / f["time_s"] - 1)
    assert np.median(err) < 0.01


def test_held_out_gpu_is_scored_with_transferred_values():
    f = synthetic(np.random.default_rng(1))
    h = M.heldout(f)
    assert set(h["fold"]) == {"gpu-out:h100-sxm", "gpu-out:l40s"}
    fr = M.fit(f[f["gpu"] == "l40s"].reset_index(drop=True))  # a GPU held out takes the others' kind ratios
    held = M.transferred(fr, "h100-sxm", ["l40s"])
    assert held["h100-sxm|w8a8-fp8-block.compute_ratio"] == fr.values["l40s|w8a8-fp8-block.compute_ratio"]
    s = M.summarize(h)
    # the two synthetic GPUs differ: transfer is not exact, but the form is the generator's
    assert (s["median_ape"] < 0.6).all() and (s["points"] > 100).all()


def test_same_version_design_transfers_from_the_held_out_tables_kernels():
    """A GPU measured only on an older kernel generation: the same-version design transfers from the other GPUs'
    tables of that generation (their own parameter sets, GPU@version), the newest design from their newest tables."""
    rng = np.random.default_rng(2)
    old = {k.replace("h100-sxm", "h100-sxm@0.14.0").replace("l40s", "l40s@0.14.0"): v for k, v in TRUE.items()}
    new = {**TRUE, "h100-sxm.moe_layer_overhead_s": 300e-6, "l40s.moe_layer_overhead_s": 250e-6,
           "h100-sxm.moe_mem_efficiency": 0.3, "l40s.moe_mem_efficiency": 0.3}  # another kernel generation
    a100 = {k.replace("h100-sxm", "a100-80gb"): v for k, v in TRUE.items() if k.startswith("h100-sxm")}
    frames = []
    for gpu, unit, version, values in (("h100-sxm", "h100-sxm@0.14.0", "0.14.0", old), ("l40s", "l40s@0.14.0", "0.14.0", old),
                                       ("h100-sxm", "h100-sxm", "0.24.0", new), ("l40s", "l40s", "0.24.0", new),
                                       ("a100-80gb", "a100-80gb", "0.14.0", {**TRUE, **a100})):
        f = synthetic(rng)
        f = f[f["gpu"] == "h100-sxm"].assign(gpu=gpu, unit=unit, version=version)
        f = M.with_layer_shape(f)
        frames.append(f.assign(time_s=M.predict(f, values) * np.exp(rng.normal(0, 0.01, len(f)))))
    f = pd.concat(frames, ignore_index=True)
    same, newest = (M.heldout(f, design=d) for d in ("same-version", "newest"))
    a_same, a_new = (h[h["fold"] == "gpu-out:a100-80gb"] for h in (same, newest))
    assert set(a_same["transferred_from"]) == {"h100-sxm@0.14.0, l40s@0.14.0"}
    assert set(a_new["transferred_from"]) == {"h100-sxm, l40s"}
    assert len(a_same) == len(a_new) == (f["unit"] == "a100-80gb").sum()  # scored on its own (newest) table only
    assert np.median(np.abs(a_same["error"])) < 0.1 < np.median(np.abs(a_new["error"]))
    with pytest.raises(ValueError, match="design"):
        M.heldout(f, design="nearest")


def test_pair_ratios_show_a_pure_bandwidth_change():
    rng = np.random.default_rng(3)
    f = synthetic(rng)
    f = f[f["gpu"] == "h100-sxm"].assign(version="0.14.0")
    g = f.assign(gpu="a100-80gb", time_s=f["time_s"] * 2.0)
    r = M.pair_ratios(pd.concat([f, g], ignore_index=True))
    assert len(r) and set(r["version"]) == {"0.14.0"}
    assert np.allclose(np.where(r["a"] == "a100-80gb", r["median"], -r["median"]), np.log(2.0), atol=0.03)


def test_skewed_routing_reduces_to_uniform_and_to_k():
    from simulator.catalog.models import skewed_experts_hit

    n = np.array([1.0, 3.0, 17.0, 300.0])
    assert np.allclose(skewed_experts_hit(128, 8, n, 0.0), 128 * (1 - (1 - 8 / 128) ** n))
    for s in (0.3, 0.75, 2.0):
        h = skewed_experts_hit(128, 8, n, s)
        assert h[0] == pytest.approx(8.0)  # one token: its k experts
        assert np.all(h <= skewed_experts_hit(128, 8, n, 0.0) + 1e-9) and np.all(np.diff(h) > 0)


def test_catalog_gpus_carry_the_moe_priors():
    for name, hw in hardware_catalog().items():
        if hw.interconnect == "none":
            continue
        prof = prior_profile(hw)
        for k in M.KINDS:
            p = getattr(prof, k)
            assert p is not None and p.kind in ("calibrated", "transferred") and "moe_fit" in p.source, (name, k)
        c = prof.params(hw)
        assert 0 < c.expert_mem_efficiency <= M.BOUNDS["moe_mem_efficiency"][1] and 0 < c.expert_compute_efficiency <= 1
    assert prior_profile(get_hardware("h100-sxm")).moe_mem_efficiency.kind == "calibrated"


def test_update_priors_file_merges_and_keeps_the_rest(tmp_path):
    src = tmp_path / "p.yaml"
    src.write_text("# header\npriors:\n  h100-sxm:\n    mem_efficiency: {value: 0.9, kind: calibrated, source: x}\n")
    MC.update_priors_file(src, {"h100-sxm": {"moe_mem_efficiency": {"value": 0.95, "kind": "calibrated", "source": "y"}}},
                         "specsim fit moe --priors p.yaml")
    raw = yaml.safe_load(src.read_text())
    assert set(raw["priors"]["h100-sxm"]) == {"mem_efficiency", "moe_mem_efficiency"}
    text = src.read_text()
    assert text.startswith("# header\n") and "fit moe --priors p.yaml" in text
    assert raw["evidence"]["moe_layer_fit"]["command"].endswith("p.yaml")
    MC.update_priors_file(src, {}, "specsim fit moe --priors p.yaml --date 2")  # a rerun: one command line
    assert src.read_text().count("#   specsim fit moe") == 1 and src.read_text().startswith("# header\n")


def test_missing_records_is_one_line_exit_2(tmp_path, capsys):
    code = main(["fit", "moe", "--records", str(tmp_path / "none.csv"), "--report", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "none.csv: no records file" in err
    f = tmp_path / "x.csv"
    pd.DataFrame({c: [] for c in ["source_file", "source_row", "gpu", "op", "tokens", "hidden", "expert_intermediate",
                                  "experts", "topk", "tp", "ep", "distribution", "dtype", "version", "backend",
                                  "time_s"]}).to_csv(f, index=False)
    code = main(["fit", "moe", "--records", str(f), "--report", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 2 and "op: no moe records" in err


def test_held_out_and_catalog_transfer_by_one_rule():
    """A GPU without a fit takes the median of the fused-kernel fits: not an eager one-expert-linears unit (LSS only)
    nor a parameter held at its bound; the catalog and the held-out folds give the same value."""
    from types import SimpleNamespace

    kinds = {"a100-80gb": 0.3, "h100-sxm": 0.4, "l40s": 0.5}
    values = {f"{g}.{k}": (x if k == "moe_compute_efficiency" else M.PRIORS[k]) for g, x in kinds.items() for k in M.KINDS}
    values |= {"rtx-a6000.moe_compute_efficiency": 0.9, "rtx-a6000.moe_mem_efficiency": 0.8,
               "b200.moe_compute_efficiency": 0.99, "b200.moe_layer_overhead_s": 1e-5}
    fitted = {n for n in values if not n.startswith("b200.")} | {"b200.moe_layer_overhead_s"}  # b200's eta at its bound
    fr = SimpleNamespace(values=values, fitted=fitted, stderr={})
    units = ["a100-80gb", "b200", "h100-sxm", "l40s", "rtx-a6000"]
    assert M.transfer_value(fr, "moe_compute_efficiency", units) == pytest.approx(0.4)  # neither 0.9 nor 0.99
    held = M.transferred(fr, "h200", units)
    cat = MC.catalog_priors(fr, ["a40"])["a40"]
    assert held["h200.moe_compute_efficiency"] == pytest.approx(cat["moe_compute_efficiency"]["value"]) == 0.4
    assert "(a100-80gb, l40s, h100-sxm)" in cat["moe_compute_efficiency"]["source"]  # FIT_GPUS order


def test_older_tables_are_fitted_into_the_catalog_the_simulator_reads():
    """Each GPU's older table is fitted on its own (skews frozen) and written as moe_kernels.yaml's entry, which the
    simulator's catalog model reads back; the newest table's version is named, not repeated."""
    from simulator.catalog.moe_kernels import GpuTables, pick_table

    rng = np.random.default_rng(3)
    slow = {**TRUE, "h100-sxm.moe_compute_efficiency": 0.2}
    frames = []
    for unit, version, values in (("h100-sxm@0.14.0", "0.14.0", {k.replace("h100-sxm", "h100-sxm@0.14.0"): v
                                                                   for k, v in slow.items()}),
                                  ("h100-sxm", "0.24.0", TRUE)):
        f = synthetic(rng)
        f = M.with_layer_shape(f[f["gpu"] == "h100-sxm"].assign(unit=unit, version=version))
        frames.append(f.assign(time_s=M.predict(f, values) * np.exp(rng.normal(0, 0.01, len(f)))))
    f = pd.concat(frames, ignore_index=True)
    fr = M.fit(f[M.units_of(f) == f["gpu"].to_numpy(str)].reset_index(drop=True))
    old = MC.fit_older(f, fr)
    assert old.values["power_law_1.2.routing_skew"] == fr.values["power_law_1.2.routing_skew"]  # one per label
    assert old.values["h100-sxm@0.14.0|w8a8-fp8-block.compute_ratio"] == pytest.approx(0.5, rel=0.05)  # its own
    kinds = MC.kind_ratios(fr, "test")
    assert kinds["w8a8-fp8-block"]["compute_ratio"]["value"] == pytest.approx(0.5, rel=0.05)
    assert kinds["w8a8-fp8-block"]["compute_ratio"]["kind"] == "transferred"
    tables = MC.kernel_tables(fr, old, {"h100-sxm": "0.24.0"}, "test")
    t = GpuTables.model_validate(tables["h100-sxm"])
    assert t.newest == "0.24.0" and [k.version for k in t.older] == ["0.14.0"]
    assert t.older[0].terms["moe_compute_efficiency"].value == pytest.approx(0.2, rel=0.05)
    assert t.kinds["w8a8-fp8-block"]["compute_ratio"].value == pytest.approx(0.5, rel=0.05)
    assert t.older[0].kinds["w8a8-fp8-block"]["mem_ratio"].value == pytest.approx(0.9, rel=0.05)
    assert pick_table(t, "0.11").version == "0.14.0" and pick_table(t, "0.30") is None
    assert MC.fit_older(f[M.units_of(f) == "h100-sxm"], fr) is None
