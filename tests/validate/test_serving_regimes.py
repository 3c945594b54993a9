"""The released runs' held-out errors by regime (validate/serving/regimes.py)."""

import pandas as pd
import pytest

from simulator.errors import InputError
from validate.serving.regimes import regime, summarize, write


def _row(**kw):
    base = dict(gpu="h100-sxm", version="0.11", in_fit=True, concurrency=0, dataset="random", input_tokens=2000,
                output_tokens=100, meas_out_tps=70.0, pred_out_tps=100.0, err_tpot_ms=-0.2, err_itl_ms=-0.1,
                err_ttft_ms=-0.3, err_out_tps=0.43)
    base.update(kw)
    return base


def test_regime_of_each_kind_of_run():
    assert regime(_row(concurrency=4, dataset="sharegpt")) == "loop"
    assert regime(_row(dataset="sharegpt")) == "burst, ShareGPT"
    assert regime(_row(input_tokens=32000)) == "burst, long prompts"
    assert regime(_row(input_tokens=128, output_tokens=4)) == "burst, short"
    assert regime(_row(input_tokens=1000, output_tokens=2000)) == "other"


def test_summary_groups_fitted_rows_by_gpu_and_regime_with_an_all_row():
    h = pd.DataFrame([_row(), _row(err_tpot_ms=-0.4, meas_out_tps=50.0), _row(dataset="sharegpt", err_tpot_ms=0.1),
                      _row(in_fit=False, err_tpot_ms=9.0), _row(gpu="a100-80gb", err_tpot_ms=0.05)])
    s = summarize(h, "gpu").set_index(["gpu", "regime"])
    long = s.loc[("h100-sxm", "burst, long prompts")]
    assert long["runs"] == 2  # the row outside the fit is left out, as in the report's own summary
    assert long["tpot_ms median |err| %"] == pytest.approx(30.0) and long["tpot_ms bias %"] == pytest.approx(-30.0)
    assert long["measured / predicted tps"] == pytest.approx(0.6)
    assert s.loc[("h100-sxm", "all")]["runs"] == 3 and s.loc[("a100-80gb", "all")]["runs"] == 1


def test_a_report_without_its_heldout_tables_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="heldout-gpu.csv"):
        write(tmp_path, tmp_path / "o", "specsim validate serving-regimes x")
    pd.DataFrame([_row()]).drop(columns=["in_fit"]).to_csv(tmp_path / "heldout-gpu.csv", index=False)
    with pytest.raises(InputError, match="in_fit"):
        write(tmp_path, tmp_path / "o", "specsim validate serving-regimes x")
