"""One speculative decoding iteration, priced over pass-time aggregates: the one definition behind the
what-if engines' cost tables (``simulator.cost.cost_tables``: ``draft_iter`` / ``verify_iter``, batch 1 over every
context), the γ rule (``simulator.engines.gamma_choice.iteration_parts``, B sequences at one context) and the serving engine
(``simulator.engines.serving.engine.Engine``: ``_spec_time`` with the prefills sharing the iteration, ``round_time`` and the
γ policy's ``sync_gamma``; its k-round stretches evaluate it over an array of contexts, or through its vectorised
form ``simulator.engines.serving.pass_cost.spec_iteration_times``).

An iteration of nd decoding sequences with contexts c_j (total C = sum c_j) at γ, with a drafter of tree width w
(1: a chain) and v = w γ + 1 verified tokens per sequence, and n_pref prefills (aggregates N, KV, A) sharing it:

    draft pass 0       the prefills + w tokens on c_j per decoding sequence              (none for a free drafter)
    draft pass i       w tokens on c_j + i per decoding sequence, i = 1..γ-1             (none for a free drafter)
    (a block drafter:  ONE draft pass: the prefills + γ tokens (γ logit rows) on c_j per decoding sequence)
    verification       the prefills + v tokens (v logit rows) on c_j per decoding sequence

γ = 0 (a γ policy's plain decoding, or no draft): no draft pass, except the draft ingesting the prefills (if any);
the verification is one token per decoding sequence. A pass costs T_pass(n, kv, attn, logits, seqs) over the
aggregates of its sequences (n_j new tokens on c_j cached, l_j logit rows): sum n_j, sum (c_j + n_j),
sum n_j (c_j + (n_j + 1)/2), sum l_j and their number -- ``Deployment.pass_time`` or the serving engine's
``PassCost.time`` / ``PassCost.times``. The aggregates depend on the contexts only through C, which broadcasts
(a number or a numpy array of totals): all of them are integers, exact in floating point (below 2^53), so any
caller gets the same floats for the same batch whatever the order of its own sums.
"""

from __future__ import annotations

from dataclasses import replace

from simulator.cost.cost_model import Deployment, Drafting

NO_PREFILL = (0, 0, 0, 0)


def speculating_target(target: Deployment, draft: Deployment | None) -> Deployment:
    """``target`` as its engine runs when it speculates with ``draft`` (None: as it is): every pass of that engine,
    prefills and scoring included, runs with ``CostParams.speculating_with`` (a separate draft model: no async
    scheduling by default). Callers apply it where γ >= 1 is configured (γ = 0: a plain server)."""
    if draft is None:
        return target
    cost = target.cost.speculating_with(draft.drafting)
    return target if cost is target.cost else replace(target, cost=cost)


def speculative_iteration(target_pass, draft_pass, drafting: Drafting, gamma: int, n_decoding: int, total_context,
                          prefill: tuple = NO_PREFILL, verify_tokens: int | None = None):
    """(draft seconds, verification seconds) of one speculative iteration (see the module docstring).

    ``target_pass`` / ``draft_pass``: T_pass callables ``(n, kv, attn, logits, seqs)``; ``draft_pass`` None for a
    free drafter (prompt lookup) or no draft. ``n_decoding`` sequences of total context ``total_context`` (a float,
    or a numpy array of totals: the result broadcasts); ``prefill`` = (N, KV, A, n_pref): the aggregates and number
    of the prefills sharing the passes; ``verify_tokens``: w γ + 1 (``drafting.verify_tokens(gamma)`` when None).

    The draft seconds are the passes summed in order (pass 0 + pass 1 + ...; 0.0 when none runs) and the caller adds
    the verification after them: the serving engine's iteration time is ``draft + verify``, float for float. Token,
    logit-row and sequence counts go to the callables as the integers they are (both pass times convert them to
    floats exactly), KV and attention aggregates as integers or floats as ``total_context`` is."""
    N, KV, A, n_pref = prefill
    nd, cd = n_decoding, total_context
    v = drafting.verify_tokens(gamma) if verify_tokens is None else verify_tokens
    B = n_pref + nd
    d = 0.0
    if draft_pass is not None:
        w = drafting.tree_width
        if gamma == 0:  # no draft pass: the draft only ingests the prefills
            if N:
                d = draft_pass(N, KV, A, n_pref, n_pref)
        elif drafting.kind == "block":  # one pass of gamma tokens on c_j per decoding sequence
            n = nd * gamma
            d = draft_pass(N + n, KV + cd + n, A + gamma * cd + nd * (gamma * (gamma + 1) // 2), n_pref + n, B)
        elif w == 1:  # a chain: one token on c_j + i per decoding sequence (its attention pairs are its KV)
            d = draft_pass(N + nd, KV + cd + nd, A + cd + nd, B, B)
            if nd:
                for i in range(1, gamma):
                    kv = cd + nd * (i + 1)
                    d = d + draft_pass(nd, kv, kv, nd, nd)
        else:  # a tree: w tokens on c_j + i per decoding sequence
            ww = nd * w
            half = nd * (w * (w + 1) // 2)  # sum over the decoding sequences of w (w + 1) / 2
            d = draft_pass(N + ww, KV + cd + ww, A + w * cd + half, n_pref + ww, B)
            if nd:
                for i in range(1, gamma):
                    d = d + draft_pass(ww, cd + nd * (i + w), w * cd + ww * i + half, ww, nd)
    return d, target_pass(N + nd * v, KV + cd + nd * v, A + v * cd + nd * (v * (v + 1) // 2), n_pref + nd * v, B)
