"""torch/transformers engine (any device): for hosts with torch but no vLLM.

Prefix caching: the engine keeps the KV cache of the last sequence it processed and reuses the
longest common prefix (``DynamicCache.crop``), which is what the CoT-then-judge call pattern
needs. Speculative decoding is our own loop (Leviathan et al. 2023), in the paper's symbols:
q = draft distribution, p = target distribution, gamma = drafted tokens per iteration.
"""

from __future__ import annotations

import time
from pathlib import Path

from calibrate.measure.engine import Engine, Generation, Sampling, ScoreResult, apply_env_defaults, check_draft, describe_model_dir


class KVState:
    """One model plus the KV cache of the last sequence it ran; ``extend`` reuses the common prefix."""

    def __init__(self, model):
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.ids: list[int] = []

    def extend(self, ids: list[int]):
        """Logits [n_new, vocab] for the positions of ``ids`` not already cached, and the cached count."""
        import torch

        n = 0
        for a, b in zip(self.ids, ids):
            if a != b:
                break
            n += 1
        n = min(n, len(ids) - 1)  # always recompute at least the last position to get its logits
        if n < len(self.ids):
            self.cache.crop(n - len(self.ids))  # negative: drop that many trailing positions
        new = torch.tensor([ids[n:]], device=self.model.device)
        with torch.inference_mode():
            out = self.model(input_ids=new, past_key_values=self.cache, use_cache=True)
        self.ids = list(ids)
        return out.logits[0].float(), n


def _probs(logits, s: Sampling):
    """Sampling distribution after temperature and top-p (one-hot argmax at temperature 0)."""
    import torch

    if s.temperature <= 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()
    p = torch.softmax(logits / s.temperature, dim=-1)
    if s.top_p < 1.0:
        sp, idx = p.sort(dim=-1, descending=True)
        drop = sp.cumsum(-1) - sp > s.top_p
        sp = sp.masked_fill(drop, 0.0)
        p = torch.zeros_like(p).scatter(-1, idx, sp)
        p = p / p.sum(-1, keepdim=True)
    return p


def _sample(p, gen) -> int:
    import torch

    return int(torch.multinomial(p, 1, generator=gen).item())


class TorchEngine(Engine):
    name = "torch"

    def __init__(self, model_dir: str | Path, *, draft_dir: str | Path | None = None, gamma: int = 0,
                 dtype: str = "bfloat16", device: str = "auto", seed: int = 0, dummy: bool = False):
        self.env = apply_env_defaults()
        import torch

        self.model_dir = Path(model_dir)
        self.info = describe_model_dir(self.model_dir, dummy)
        self.device = ("cuda" if torch.cuda.is_available() else "cpu") if device == "auto" else device
        self.dtype = getattr(torch, dtype)
        self.dummy = dummy
        torch.manual_seed(seed)
        self.target = KVState(self._load(self.model_dir))
        self.tok = None
        if not dummy:
            from transformers import AutoTokenizer

            self.tok = AutoTokenizer.from_pretrained(str(self.model_dir))
        self.eos_ids = self._eos_ids()
        self.draft = None
        self.gamma = 0
        if draft_dir is not None:
            self.draft_info = check_draft(self.info, draft_dir, gamma, dummy)
            self.draft, self.gamma = KVState(self._load(Path(draft_dir))), gamma

    def _load(self, path: Path):
        from transformers import AutoConfig, AutoModelForCausalLM

        cfg = AutoConfig.from_pretrained(str(path))
        kw = {}
        if str(self.device).startswith("cpu") and any(getattr(cfg, k, None) for k in ("num_experts", "num_local_experts")):
            # a mixture of experts on CPU: transformers' default grouped-GEMM path falls back to one GEMM per expert
            # over every expert's weights; its eager path runs the experts the batch hits, as an engine's fused MoE
            kw["experts_implementation"] = "eager"
        if self.dummy:  # random weights made on the device itself (a 32B model's init on the host takes minutes)
            import torch

            with torch.device(self.device):
                model = AutoModelForCausalLM.from_config(cfg, dtype=self.dtype, **kw)
        else:
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=self.dtype, **kw)
        return model.to(self.device).eval()

    def _eos_ids(self) -> set[int]:
        if self.dummy:
            return set()
        cfg = self.target.model.generation_config
        eos = cfg.eos_token_id if cfg is not None and cfg.eos_token_id is not None else self.tok.eos_token_id
        return set(eos if isinstance(eos, list) else [eos]) - {None}

    # -- generation ---------------------------------------------------------------------------
    def _finished(self, gen_ids: list[int], stop: list[str], max_tokens: int) -> str | None:
        """Mirror vLLM: EOS and stop strings end generation; the stop string stays in the output."""
        if gen_ids and gen_ids[-1] in self.eos_ids:
            return "eos"
        if stop and self.tok is not None:
            tail = self.tok.decode(gen_ids[-8:])
            if any(s in tail for s in stop):
                return "stop"
        if len(gen_ids) >= max_tokens:
            return "length"
        return None

    def _text(self, gen_ids: list[int], finish: str | None, stop: list[str]) -> str:
        text = self.decode([t for t in gen_ids if t not in self.eos_ids])
        if finish == "stop":
            cut = min((text.find(s) + len(s) for s in stop if s in text), default=len(text))
            text = text[:cut]
        return text

    def generate(self, prompt_ids, max_tokens, stop, sampling: Sampling, seed) -> Generation:
        import torch

        # on the model's device: torch.multinomial refuses a CPU generator for CUDA probabilities (and vLLM samples
        # on the GPU too); the same seed gives other draws on another device
        g = torch.Generator(device=self.device).manual_seed(int(seed or 0) % (2**63))
        t0 = time.perf_counter()
        if self.draft is None:
            gen, finish, cached = self._decode_loop(list(prompt_ids), max_tokens, stop, sampling, g)
            drafted = accepted = []
        else:
            gen, finish, cached, drafted, accepted = self._speculative_decode(list(prompt_ids), max_tokens, stop,
                                                                              sampling, g)
        if self.device == "cuda":
            torch.cuda.synchronize()
        return Generation(token_ids=gen, text=self._text(gen, finish, stop), finish_reason=finish or "length",
                          time_s=time.perf_counter() - t0, prompt_tokens=len(prompt_ids), cached_tokens=cached,
                          spec_drafted_per_pos=drafted, spec_accepted_per_pos=accepted)

    def _decode_loop(self, ids, max_tokens, stop, s, g):
        logits, cached = self.target.extend(ids)
        gen: list[int] = []
        while True:
            gen.append(_sample(_probs(logits[-1], s), g))
            finish = self._finished(gen, stop, max_tokens)
            if finish:
                return gen, finish, cached
            logits, _ = self.target.extend(ids + gen)

    def _speculative_decode(self, ids, max_tokens, stop, s, g):
        """Draft gamma tokens with q, verify them in one target pass with p, accept by min(1, p/q)."""
        import torch

        logits, cached = self.target.extend(ids)
        gen = [_sample(_probs(logits[-1], s), g)]  # the prefill's token, as vLLM does
        drafted, accepted = [0] * self.gamma, [0] * self.gamma
        finish = self._finished(gen, stop, max_tokens)
        while not finish:
            k = min(self.gamma, max_tokens - len(gen) - 1)
            if k < 1:  # no room for a draft: one plain target step
                logits, _ = self.target.extend(ids + gen)
                gen.append(_sample(_probs(logits[-1], s), g))
                finish = self._finished(gen, stop, max_tokens)
                continue
            # Phase 1: draft k tokens sequentially from q.
            d, q = [], []
            for _ in range(k):
                dl, _ = self.draft.extend(ids + gen + d)
                q.append(_probs(dl[-1], s))
                d.append(_sample(q[-1], g))
            # Phase 2: verify all k drafts (and get the bonus distribution) in one target pass.
            tl, _ = self.target.extend(ids + gen + d)
            p = [_probs(tl[i], s) for i in range(-k - 1, 0)]
            # Phase 3: accept rule; on the first rejection resample from norm(max(0, p - q)).
            new = []
            for i in range(k):
                drafted[i] += 1
                r = torch.rand(1, generator=g, device=g.device).item()
                if r < min(1.0, (p[i][d[i]] / q[i][d[i]]).item()):
                    accepted[i] += 1
                    new.append(d[i])
                    continue
                resid = torch.clamp(p[i] - q[i], min=0)
                new.append(_sample(resid / resid.sum() if resid.sum() > 0 else p[i], g))
                break
            else:
                new.append(_sample(p[k], g))  # bonus token: all k drafts accepted
            for t in new:
                gen.append(t)
                finish = self._finished(gen, stop, max_tokens)
                if finish:
                    break
        return gen, finish, cached, drafted, accepted

    def score(self, prompt_ids, top_k: int = 10) -> ScoreResult:
        import torch

        t0 = time.perf_counter()
        logits, cached = self.target.extend(list(prompt_ids))
        lp = torch.log_softmax(logits[-1], dim=-1)
        vals, idx = lp.topk(top_k)
        top: dict[str, float] = {}
        for v, i in zip(vals.tolist(), idx.tolist()):
            key = self.decode([i]) if self.tok is not None else str(i)
            top[key] = max(top.get(key, float("-inf")), v)
        return ScoreResult(top_logprobs=top, time_s=time.perf_counter() - t0, prompt_tokens=len(prompt_ids),
                           cached_tokens=cached)

    def describe(self) -> dict:
        d = dict(self.info)
        if self.gamma:
            d["draft"] = self.draft_info
        return d

    def version(self) -> str:
        import torch
        import transformers

        return f"torch {torch.__version__}, transformers {transformers.__version__}"

    def close(self) -> None:
        import gc

        self.target = self.draft = None
        gc.collect()
