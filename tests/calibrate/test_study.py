"""Study (issue 6): token classes, acceptance bookkeeping, the greedy spec loop, the CLI."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from calibrate.measure.study.acceptance import (acceptance_length, conditional_acceptance, per_position_acceptance,
                                        replay_greedy, run_lengths, speedup_iid, speedup_per_position)
from calibrate.measure.study.token_classes import step_offsets, token_class
from specsim_cli.main import main

MODEL_DIR = Path(".cache/models/smollm2-135m-instruct")


@pytest.mark.parametrize("text, cls", [
    (" 12", "digit/arith"), ("=", "digit/arith"), (" +", "digit/arith"), ("$", "digit/arith"),
    ("\n\n", "whitespace"), (" ", "whitespace"),
    ("Wait", "opener/reflection"), (" So", "opener/reflection"), (" Hmm", "opener/reflection"), ("First", "opener/reflection"),
    (".", "format/punct"), ("**", "format/punct"), (" (", "format/punct"),
    (" apples", "word"), ("ing", "word"),
])
def test_token_class_hand_cases(text, cls):
    assert token_class(text) == cls


def test_step_offsets_reset_after_blank_line():
    assert step_offsets(["A", " b", ".\n\n", "C", " d", "\n", "\n", "e"]) == [0, 1, 2, 0, 1, 2, 3, 0]


def test_per_position_acceptance_from_hand_log():
    # (k drafted, accepted): a_1 = 3/4, a_2 = 2/4, a_3 = 1/3 (only three iterations drafted 3)
    log = [(3, 3), (3, 0), (2, 2), (3, 1), (0, 0)]
    a = per_position_acceptance(log, 3)
    np.testing.assert_allclose(a, [3 / 4, 2 / 4, 1 / 3])
    np.testing.assert_allclose(conditional_acceptance(a), [3 / 4, 2 / 3, 2 / 3])
    assert acceptance_length(log) == pytest.approx(1 + 6 / 4)


def test_replay_greedy_hand_case():
    match = np.array([True, True, False, True, True, True, False, False, True, True])
    run = run_lengths(match, 8)
    assert run.tolist() == [2, 1, 0, 3, 2, 1, 0, 0, 2, 1]
    # gamma 2 over 10 tokens: t=1 accept 1 -> t=3 accept 2 -> t=6 accept 0 -> t=7 accept 0 -> t=8 k=1 accept 1
    log = replay_greedy(run, np.full(10, 8), 2, 10)
    assert log == [(2, 1), (2, 2), (2, 0), (2, 0), (1, 1)]
    assert sum(a + 1 for _, a in log) == 10 - 1  # every generated token after the prefill's


def test_speedup_limits():
    assert speedup_iid(0.0, 4, 0.0) == pytest.approx(1.0)       # nothing accepted, free draft: plain decoding
    assert speedup_per_position(np.ones(3), 0.0) == pytest.approx(4.0)  # alpha = 1: gamma + 1 tokens per step
    assert speedup_per_position(np.ones(3), 0.1, v=2.0) == pytest.approx(4.0 / 2.3)


def test_transfer_acceptance_bounded_and_monotone():
    from validate.study.simulate import transfer_acceptance

    a = transfer_acceptance([0.7, 0.48, 0.31], [0.3, 0.1, 0.03], [0.5, 0.25, 0.1])
    assert all(0 <= x <= 1 for x in a) and a == sorted(a, reverse=True) and a[0] > 0.7
    assert transfer_acceptance([0.7, 0.48], [0.3, 0.1], [0.3, 0.1]) == pytest.approx([0.7, 0.48])


@pytest.mark.parametrize("args", [["--gamma", "0-3"], ["--gamma", "x"], ["--draft", "cut4,bogus"],
                                  ["--problems", "0"], ["--timed-gammas", "9", "--gamma", "1-8"]])
def test_study_cli_bad_options_exit_2(args, tmp_path, capsys):
    assert main(["measure", "study", "specdecode", "--out", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    assert not (tmp_path / "r").exists()


@pytest.mark.real_engine
def test_greedy_speculative_equals_target_greedy(tmp_path, model_cache):
    import torch

    from calibrate.measure.model_cache import cut_draft
    from calibrate.measure.study.greedy_spec import ModelDrafter, NgramDrafter, speculative_decode, vanilla_decode
    from calibrate.measure.study.measure import load_causal_lm
    from calibrate.measure.torch_engine import KVState
    from transformers import AutoTokenizer

    MODEL_DIR = model_cache["base"]
    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(str(MODEL_DIR))
    prompt = tok.encode("Tom has 3 apples and buys 4 more. How many apples? Answer step by step.", add_special_tokens=False)
    target = KVState(load_causal_lm(MODEL_DIR))
    draft = load_causal_lm(cut_draft(MODEL_DIR, 2, tmp_path / "draft2"))
    want = vanilla_decode(target, prompt, 12, {tok.eos_token_id}).tokens
    for drafter in (ModelDrafter(draft), NgramDrafter()):
        got = speculative_decode(target, drafter, prompt, 12, 3, {tok.eos_token_id})
        assert got.tokens == want
        assert sum(a + 1 for _, a in got.log) == len(got.tokens) - 1
