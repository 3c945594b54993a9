"""Rerunning one fit of the GPU priors chain (transfer-priors, engine, mla, moe) after later ones warns, naming the
later fits' recorded commands in order; the chain's own order says nothing."""

from __future__ import annotations

import warnings

import pytest
import yaml

from calibrate.gpu_priors.engine_report import merge_priors_file
from calibrate.gpu_priors.priors_chain import CHAIN, StalePriorsWarning, later_fits, recorded_fits, warn_later_fits

MOE_CMD = "specsim fit moe --report R --priors P --date 2026-11-29 --force"


def merge(path, evidence, value=1.0):
    merge_priors_file(path, {"h100-sxm": {f"{evidence}_term": {"value": value, "kind": "calibrated", "source": "t"}}},
                      f"specsim fit {evidence} --priors {path}", evidence=evidence, says=f"# then {evidence}:",
                      marks=(evidence,))


def run_in_order(path, keys):
    with warnings.catch_warnings():
        warnings.simplefilter("error", StalePriorsWarning)  # the chain's own order warns of nothing
        for key in keys:
            merge(path, key)


def test_the_chain_in_its_order_warns_of_nothing(tmp_path):
    p = tmp_path / "gpu_priors.yaml"
    run_in_order(p, [k for k, _ in CHAIN[1:]])
    raw = yaml.safe_load(p.read_text())
    assert set(raw["evidence"]) == {k for k, _ in CHAIN[1:]}
    assert {f"{k}_term" for k, _ in CHAIN[1:]} <= set(raw["priors"]["h100-sxm"])


def test_an_earlier_fit_rerun_names_the_later_fits_commands_in_order(tmp_path):
    p = tmp_path / "gpu_priors.yaml"
    run_in_order(p, ["engine_step_model", "mla_layer_fit", "moe_layer_fit"])
    with pytest.warns(StalePriorsWarning) as w:
        merge(p, "engine_step_model", value=2.0)
    msg = str(w[0].message)
    assert str(p) in msg and "replaced terms" in msg
    assert msg.index("fit mla_layer_fit") < msg.index("fit moe_layer_fit")  # the recorded commands, in chain order
    assert yaml.safe_load(p.read_text())["priors"]["h100-sxm"]["engine_step_model_term"]["value"] == 2.0  # written


def test_the_last_fit_rerun_warns_of_nothing(tmp_path):
    p = tmp_path / "gpu_priors.yaml"
    run_in_order(p, ["engine_step_model", "mla_layer_fit", "moe_layer_fit", "moe_layer_fit"])


def test_later_fits_reads_recorded_commands_else_the_generic_ones():
    recorded = {"moe_layer_fit": {"command": MOE_CMD}, "mla_layer_fit": "not a mapping"}
    assert later_fits("engine_step_model", recorded) == ["specsim fit mla", MOE_CMD]
    assert later_fits("transfer_priors", {"engine_step_model": {}}) == ["specsim fit engine"]
    assert later_fits("moe_layer_fit", recorded) == []
    with pytest.raises(ValueError, match="expected one of"):
        later_fits("fit_quant", recorded)


def test_a_whole_rewrite_says_it_dropped_the_later_fits(tmp_path):
    with pytest.warns(StalePriorsWarning, match="dropped the terms of the later fits"):
        assert warn_later_fits(tmp_path / "p.yaml", "transfer_priors",
                               {"moe_layer_fit": {"command": MOE_CMD}}, dropped=True) == [MOE_CMD]


@pytest.mark.parametrize("text", ["", "[1, 2]", "evidence: 3", "a: [unclosed", "\udcff"])
def test_an_unreadable_old_file_records_nothing(tmp_path, text):
    p = tmp_path / "p.yaml"
    p.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert recorded_fits(p) == {}
    assert recorded_fits(tmp_path / "absent.yaml") == {}


def test_the_shipped_catalog_recorded_the_chain_in_order():
    from simulator.paths import REPO

    ev = recorded_fits(REPO / "simulator" / "catalog" / "gpu_priors.yaml")
    keys = [k for k, _ in CHAIN if k in ev]
    assert keys == [k for k, _ in CHAIN[1:]], "the catalog's priors file records every merging fit of the chain"
    head = [ln for ln in (REPO / "simulator" / "catalog" / "gpu_priors.yaml").read_text().splitlines()
            if ln.startswith("#   specsim fit ")]
    order = [next(i for i, (_, c) in enumerate(CHAIN) if ln.strip("# ").startswith(c)) for ln in head]
    assert order == sorted(order), "the header names the chain's commands in the order they must run"
