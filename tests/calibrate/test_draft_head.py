"""EAGLE-style draft head (issue 17a): shapes, exact replay == the real head decoder, spec == greedy,
a perfect oracle gives gamma + 1 tokens per iteration, bad input -> InputError / exit 2."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.errors import InputError
from specsim_cli.main import main


# -- no torch needed ------------------------------------------------------------------------------------

def test_validate_gamma_and_missing_model_dir(tmp_path):
    from calibrate.measure.study.draft_head import require_model_dir, validate_gamma

    assert validate_gamma(3) == 3
    for bad in (0, -1):
        with pytest.raises(InputError):
            validate_gamma(bad)
    with pytest.raises(InputError):
        require_model_dir(tmp_path / "nope")


@pytest.mark.parametrize("args", [["--gamma", "0-3"], ["--timed-gammas", "0"], ["--repeats", "0"],
                                  ["--timed-problems", "3", "--problems", "2"], ["--model-cache", "MISSING"]])
def test_draft_head_cli_bad_input_exit_2(args, tmp_path, capsys):
    args = [str(tmp_path / "missing-cache") if a == "MISSING" else a for a in args]
    assert main(["measure", "study", "draft-head", "--out", str(tmp_path / "r"), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "\n" not in err
    assert not (tmp_path / "r").exists()


# -- the real model -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real(model_cache):
    import torch
    from transformers import AutoTokenizer

    from calibrate.measure.datasets import INSTRUCTION
    from calibrate.measure.study import draft_head as dh
    from calibrate.measure.study.greedy_spec import vanilla_decode
    from calibrate.measure.study.measure import load_causal_lm
    from calibrate.measure.torch_engine import KVState

    torch.set_num_threads(1)
    d = model_cache["base"]
    tok = AutoTokenizer.from_pretrained(str(d))
    target = load_causal_lm(d, "float32")
    q = f"{INSTRUCTION}\n\nTom has 3 apples and buys 4 more. How many apples does he have?"
    prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                tokenize=False), add_special_tokens=False)
    eos = {tok.eos_token_id}
    want = vanilla_decode(KVState(target), prompt, 20, eos).tokens
    # a head that has seen this very sequence for a few steps: it accepts runs of several tokens and also fails,
    # so replay and decoder are compared on accepts, partial accepts and rejections
    head, _ = dh.train_head(target, [prompt + want], [len(prompt)], epochs=25, batch=1, lr=3e-3, log=lambda *a: None)
    return {"target": target, "prompt": prompt, "want": want, "eos": eos, "head": head, "dh": dh}


@pytest.mark.real_engine
def test_head_shapes_and_frozen_parts(real):
    import torch

    target, head = real["target"], real["dh"].build_head(real["target"])
    h = target.config.hidden_size
    g, logits = head(torch.tensor([[5, 6, 7], [8, 9, 10]]), torch.randn(2, 3, h), torch.arange(1, 4)[None].expand(2, 3))
    assert g.shape == (2, 3, h) and logits.shape == (2, 3, target.config.vocab_size)
    # only fc + one decoder layer are the head's own parameters; embedding / norm / LM head stay the target's
    layer = sum(p.numel() for p in target.model.layers[-1].parameters())
    assert sum(p.numel() for p in head.parameters()) == 2 * h * h + layer
    assert not any(k.startswith(("_frozen", "embed", "lm_head")) for k in head.state_dict())
    # initialised from the target's last layer
    assert torch.equal(head.layer.mlp.down_proj.weight, target.model.layers[-1].mlp.down_proj.weight)


@pytest.mark.real_engine
def test_exact_replay_equals_head_decoder_and_greedy(real):
    from calibrate.measure.study.acceptance import replay_greedy
    from calibrate.measure.study.greedy_spec import HeadDrafter, HiddenKVState, speculative_decode

    target, prompt, want = real["target"], real["prompt"], real["want"]
    logs = []
    # the head fitted to this sequence (long accepted runs) and a fresh one (mostly rejections)
    for head in (real["head"], real["dh"].build_head(target).eval()):
        run = real["dh"].head_runs(head, target, prompt, want, 8)
        for gamma in (2, 3):
            got = speculative_decode(HiddenKVState(target), HeadDrafter(head), prompt, len(want), gamma, real["eos"])
            assert got.tokens == want  # speculative output == the target's greedy output, token for token
            assert replay_greedy(run, np.full(len(want), 8), gamma, len(want)) == got.log
            logs += got.log
    assert any(a >= 2 for _, a in logs) and any(a < k for k, a in logs)  # accepts and rejections both exercised


class _OracleHead:
    """Test double: drafts the target's greedy token for each position (a lookup by position id), passes the
    feature through, and keeps a dummy KV cache so ``HeadDrafter``'s crop / position bookkeeping is exercised."""

    def __init__(self, seq, vocab, config):
        self.seq, self.vocab, self.config = seq, vocab, config

    def new_cache(self):
        from transformers import DynamicCache

        return DynamicCache()

    def __call__(self, tokens, feats, positions, cache=None):
        import torch

        b, t = tokens.shape
        if cache is not None:
            cache.update(torch.zeros(b, 1, t, 1), torch.zeros(b, 1, t, 1), 0)
            assert cache.get_seq_length() == int(positions[0, -1])  # head position j sits at cache slot j
        nxt = [[self.seq[int(p) + 1] if int(p) + 1 < len(self.seq) else 0 for p in row] for row in positions]
        logits = torch.nn.functional.one_hot(torch.tensor(nxt), self.vocab).float()
        return feats, logits


@pytest.mark.real_engine
def test_oracle_head_gives_gamma_plus_one_tokens_per_iteration(real):
    from calibrate.measure.study.greedy_spec import HeadDrafter, HiddenKVState, speculative_decode

    target, prompt, want = real["target"], real["prompt"], real["want"]
    oracle = _OracleHead(prompt + want, target.config.vocab_size, target.config)
    for gamma in (1, 3):
        got = speculative_decode(HiddenKVState(target), HeadDrafter(oracle), prompt, len(want), gamma, real["eos"])
        assert got.tokens == want
        assert all(a == k for k, a in got.log)                      # every draft accepted
        full = [k for k, _ in got.log if k == gamma]
        assert len(full) >= len(got.log) - 1 and len(full) * (gamma + 1) <= len(want)  # gamma + 1 tokens per iteration
    run = real["dh"].head_runs(oracle, target, prompt, want, 4)
    assert run[1:].tolist() == [min(4, len(want) - t) for t in range(1, len(want))]


@pytest.mark.real_engine
def test_speculative_decode_rejects_gamma_below_one(real):
    from calibrate.measure.study.greedy_spec import HeadDrafter, HiddenKVState, speculative_decode

    with pytest.raises(InputError):
        speculative_decode(HiddenKVState(real["target"]), HeadDrafter(real["head"]), real["prompt"], 8, 0, real["eos"])
