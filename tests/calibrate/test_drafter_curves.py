"""Acceptance priors per drafter kind from the measured AL(k) curves (docs/drafters.md): the shipped priors are what
``specsim fit drafter-curves`` fits on ../shared/data (skipped where it is absent), the held-out errors are
the documented ones, and bad curve files name the file and field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from calibrate.fit.drafter_curves import held_out, read_curves, summary
from simulator.inputs.drafter_priors import kind_prior
from simulator.errors import InputError
from tests.conftest import examples, error_lines

ROOT = Path(__file__).resolve().parents[2]
CURVES = ROOT.parent / "shared" / "data" / "engine-measurements" / "acceptance-length-vs-k"
needs_data = pytest.mark.skipif(not CURVES.is_dir(), reason="../shared/data acceptance-length-vs-k absent")


@pytest.fixture(scope="module")
def curves():
    return read_curves(CURVES)


@needs_data
def test_reads_every_curve_by_kind(curves):
    """Every curve has a kind; an MTP curve of a DeepSeek target takes the one-step module's shape, every other MTP
    curve the multi-step one (properties, not today's count of files: the data grows)."""
    assert {c.kind for c in curves} <= {"mtp", "mtp-one-step", "eagle3", "block"}
    for c in curves:
        if c.kind.startswith("mtp"):
            assert (c.kind == "mtp-one-step") == c.model.lower().startswith("deepseek"), c.name
    assert all(len(c.al) == 8 and 1.0 <= c.al[0] <= 2.0 for c in curves)


@needs_data
def test_a_one_step_module_saturates_sooner_than_a_multi_step_one(curves):
    """What the split rests on: at the same AL(1), the one-step module's fitted shape gains less per extra draft
    from the third on (DeepSeek-V3's report: MTP depth 1; vLLM reuses the module for every drafted token)."""
    from simulator.inputs.drafter_priors import prior_acceptance

    one, multi = prior_acceptance("mtp-one-step", 1.85), prior_acceptance("mtp", 1.85)
    assert one[0] == pytest.approx(multi[0]) and all(o < m for o, m in zip(one[2:], multi[2:]))
    assert 1 + sum(one) < 0.8 * (1 + sum(multi))


@needs_data
def test_shipped_priors_are_the_held_out_fit(curves):
    """The committed held-out errors are recomputed from the data (leave one curve out within its kind). The issue's
    bound of 5% holds for no kind: EAGLE-3 7.9% max (5.2% mean over curves), block 12.1%, MTP 14.5% and the one-step
    MTP module 11.0% (one MTP shape for both: 41.8%; DeepSeek-V4's curve is flat at 2.55 from k = 4, Qwen3.5's
    reaches 5.21 at k = 8, at nearly the same AL(1))."""
    fam = kind_prior("eagle3")["family"]
    s = summary(curves, held_out(curves, fam))
    for kind, (mean, worst, n) in s.items():
        p = kind_prior(kind)
        assert p["family"] == fam
        assert worst == pytest.approx(p["held_out_max_error"], abs=2e-3), kind
        assert mean == pytest.approx(p["held_out_mean_max_error"], abs=2e-3), kind
    assert s["eagle3"][1] <= 0.09 and s["block"][1] <= 0.13 and s["mtp"][1] <= 0.16
    assert s.get("mtp-one-step", (0, 0.0))[1] <= 0.12


def _write(tmp_path, text: str) -> Path:
    d = tmp_path / "curves"
    d.mkdir()
    (d / "x_mtp.yaml").write_text(text)
    return d


HEADER = "# key = num_speculative_tokens (MTP level); value = golden AL\n"


@pytest.mark.parametrize("text,field", [
    ("m:\n  thinking_on: {1: 1.8}\n", "header"),
    (HEADER + "m:\n  thinking_on: {1: 1.8, 2: 2.4}\n", "m.thinking_on"),
    (HEADER + "m:\n  thinking_on: {" + ", ".join(f"{k}: {1.5 if k != 3 else 'x'}" for k in range(1, 9)) + "}\n",
     "m.thinking_on.3"),
    (HEADER + "m:\n  thinking_maybe: {1: 1.8}\n", "m"),
])
def test_bad_curve_files_name_file_and_field(tmp_path, text, field):
    d = _write(tmp_path, text)
    with pytest.raises(InputError) as e:
        read_curves(d)
    assert e.value.file.endswith("x_mtp.yaml") and e.value.field == field, (e.value.field, e.value.message)


def test_bad_curve_file_exits_2_with_one_line(tmp_path):
    d = _write(tmp_path, "m:\n  thinking_on: {1: 1.8}\n")
    out = tmp_path / "priors.yaml"
    r = subprocess.run([sys.executable, "-m", "specsim_cli", "fit", "drafter-curves", str(d), "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 2 and len(error_lines(r.stderr)) == 1 and "x_mtp.yaml" in r.stderr, r.stderr
    assert not out.exists()


def test_a_curve_fitted_on_itself_is_close(tmp_path):
    """A geometric curve is recovered from its own AL(1) and shape when the kind holds only copies of it."""
    al = 1.0 + np.cumsum(0.8 * 0.7 ** np.arange(8))
    body = ", ".join(f"{k}: {v:.6f}" for k, v in zip(range(1, 9), al))
    d = tmp_path / "c"
    d.mkdir()
    for i in range(2):
        (d / f"m{i}.yaml").write_text(HEADER + f"m{i}:\n  thinking_on: {{{body}}}\n")
    errs = held_out(read_curves(d), "geometric")
    assert max(e.max() for e in errs.values()) < 1e-5


@settings(max_examples=examples(60), deadline=None)
@given(al=st.lists(st.floats(1.0, 6.0), min_size=2, max_size=8),
       steps=st.lists(st.floats(0.0, 1.0), min_size=8, max_size=8), start=st.floats(1.0, 6.0))
def test_no_non_decreasing_curve_beats_the_monotone_floor(al, steps, start):
    """Any non-decreasing AL(k) misses some measured point by at least the floor; a curve that never falls has none."""
    from calibrate.fit.drafter_curves import monotone_floor

    pred = start + np.cumsum(steps[: len(al)])  # an arbitrary non-decreasing candidate
    assert np.max(np.abs(pred / np.asarray(al) - 1.0)) >= monotone_floor(al) - 1e-12
    assert monotone_floor(sorted(al)) == 0.0
    assert monotone_floor([3.77, 3.47]) == pytest.approx(0.30 / 7.24)
