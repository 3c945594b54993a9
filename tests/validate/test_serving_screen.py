"""The released-runs screen (validate/serving/screen.py): the comparison with an earlier screen, a bad earlier
screen -> one line, exit 2, nothing written, and a real replay of a few released runs."""

import numpy as np
import pandas as pd
import pytest

from calibrate.fit.host_fit import FIGS
from simulator.errors import InputError
from specsim_cli.main import main
from validate.serving import screen as S


def table(errs: dict[str, float], gpu="h100-sxm", in_fit=True) -> pd.DataFrame:
    return pd.DataFrame([{"run": r, "gpu": gpu, "model": "m", "in_fit": in_fit,
                          **{f"err_{f}": e for f in FIGS}} for r, e in errs.items()])


def test_compare_gives_medians_before_and_now_on_shared_fitted_runs():
    before = pd.concat([table({"a": 0.1, "b": -0.2, "c": 0.3}), table({"d": 0.5}, gpu="a100-80gb")])
    now = pd.concat([table({"a": 0.1, "b": -0.6, "c": 0.3, "x": 9.0}), table({"d": 0.1}, gpu="a100-80gb"),
                     table({"e": 5.0}, in_fit=False)])
    per_gpu, moved = S.compare(now, before)
    g = per_gpu.set_index("gpu")
    assert g.loc["all", "runs"] == 4  # x has no earlier row, e is not a fitted run
    assert g.loc["h100-sxm", "tpot_ms before %"] == pytest.approx(20.0)
    assert g.loc["h100-sxm", "tpot_ms now %"] == pytest.approx(30.0)
    assert g.loc["a100-80gb", "itl_ms now %"] == pytest.approx(10.0)
    assert set(moved["run"][:2]) == {"b", "d"} and list(moved["run"][2:]) in (["a", "c"], ["c", "a"])  # 0.4 each
    b = moved.set_index("run").loc["b"]
    assert b["err_tpot_ms_before"] == pytest.approx(-0.2) and b["err_tpot_ms"] == -0.6


def test_a_bad_earlier_screen_is_an_input_error_naming_it(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        S.read_against(tmp_path / "none.csv")
    bad = tmp_path / "bad.csv"
    table({"a": 0.1}).drop(columns="err_ttft_ms").to_csv(bad, index=False)
    with pytest.raises(InputError, match="err_ttft_ms") as e:
        S.read_against(bad)
    assert "bad.csv" in str(e.value)


def test_cli_bad_against_exits_2_before_replaying_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "screen"
    code = main(["validate", "serving-screen", "--out", str(out), "--against", str(tmp_path / "none.csv")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "none.csv" in err
    assert not out.exists()


def test_a_real_replay_of_closed_loop_runs_compares_equal_with_itself(tmp_path):
    from calibrate.fit.gpustack_import import GPUSTACK, released_runs

    if not (GPUSTACK / "serving_benchmarks.csv").is_file():
        pytest.skip("released table not in ../shared/data")
    runs = [r for r in released_runs()[0] if r.concurrency and r.requests <= 100 and r.output_tokens >= 16][:2]
    assert len(runs) == 2
    text = S.write(tmp_path / "a", "test", workers=1, runs=runs)
    t = pd.read_csv(tmp_path / "a" / "screen.csv")
    assert len(t) == 2 and np.isfinite(t[[f"err_{f}" for f in FIGS]].to_numpy()).all() and "| all |" in text
    again = S.write(tmp_path / "b", "test", against=tmp_path / "a" / "screen.csv", workers=1, runs=runs)
    per_gpu, _ = S.compare(pd.read_csv(tmp_path / "b" / "screen.csv"), t)
    for f in FIGS:  # deterministic (seeded) replays: the same catalog screens the same
        assert per_gpu[f"{f} before %"].to_numpy() == pytest.approx(per_gpu[f"{f} now %"].to_numpy(), rel=1e-9)
    assert "Against" in again
