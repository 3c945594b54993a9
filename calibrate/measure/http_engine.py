"""An :class:`~calibrate.measure.engine.Engine` behind an OpenAI-compatible ``vllm serve`` (``/v1/completions``).

This is how the SpecReason reference implementation deploys its two models: each one a vLLM server, the
orchestrator a client. The calls are the in-process engines' calls, over HTTP:

- a **step** is a completion on the token ids of the chain so far (``prompt`` as a list of ids), ``stop``
  ["\\n\\n"] with ``include_stop_str_in_output``, ``return_token_ids`` (so the orchestrator gets the engine's
  own ids, never a re-tokenization), the run's temperature / top_p / seed;
- the **score** is one greedy token with ``logprobs`` = top-k over the judge prompt;
- prefix caching is the server's (``--enable-prefix-caching``); ``cached_tokens`` is read from
  ``usage.prompt_tokens_details`` (the server needs ``--enable-prompt-tokens-details``);
- a speculative base server's per-call drafted / accepted counts are the difference of its ``/metrics``
  spec-decode counters around the call (one call at a time), read by ``calibrate.contracts.spec_metrics``.

``time_s`` of a call is the client's wall time of the HTTP request, so the HTTP and API-server overhead is part
of every call (the in-process runner's times have none; ``serve-specreason`` reports the difference).
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from calibrate.measure.engine import Engine, Generation, Sampling, ScoreResult, describe_model_dir
from simulator.errors import InputError


class HttpEngine(Engine):
    name = "http"

    def __init__(self, base_url: str, served_name: str, model_dir: str | Path, *, gamma: int = 0,
                 draft_info: dict | None = None, prefix_cache_block: int = 16, timeout_s: float = 600.0):
        from transformers import AutoTokenizer

        self.url = base_url.rstrip("/")
        self.served_name = served_name
        self.model_dir = Path(model_dir)
        self.info = describe_model_dir(self.model_dir, False)
        self.tok = AutoTokenizer.from_pretrained(str(self.model_dir))
        self.gamma = gamma
        self.draft_info = draft_info
        self.prefix_cache_block = prefix_cache_block
        self.timeout_s = timeout_s
        self.calls = 0

    # -- HTTP ------------------------------------------------------------------------------------
    def _post(self, payload: dict) -> tuple[dict, float]:
        body = json.dumps({"model": self.served_name, **payload}).encode()
        req = urllib.request.Request(f"{self.url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                out = json.loads(r.read())
        except urllib.error.HTTPError as e:
            raise InputError(self.url, "/v1/completions", f"HTTP {e.code}: {e.read()[:200]!r}") from None
        dt = time.perf_counter() - t0
        self.calls += 1
        return out, dt

    @staticmethod
    def _cached(out: dict) -> int:
        det = (out.get("usage") or {}).get("prompt_tokens_details") or {}
        return int(det.get("cached_tokens") or 0)

    # -- calls -------------------------------------------------------------------------------------
    def generate(self, prompt_ids, max_tokens, stop, sampling: Sampling, seed) -> Generation:
        before = self._spec_counters() if self.gamma else None
        out, dt = self._post({"prompt": list(prompt_ids), "max_tokens": int(max_tokens), "stop": list(stop),
                              "include_stop_str_in_output": True, "return_token_ids": True,
                              "temperature": sampling.temperature, "top_p": sampling.top_p, "seed": seed})
        c = out["choices"][0]
        finish = "length" if c.get("finish_reason") == "length" else ("stop" if c.get("stop_reason") is not None else "eos")
        ids = c.get("token_ids")
        if ids is None:  # a server without return_token_ids: the step's text re-encoded
            ids = self.encode(c.get("text", ""))
        gen = Generation(token_ids=list(ids), text=c.get("text", ""), finish_reason=finish, time_s=dt,
                         prompt_tokens=len(prompt_ids), cached_tokens=self._cached(out))
        if self.gamma:
            after = self._spec_counters()
            drafts = after[0] - before[0]
            gen.spec_drafted_per_pos = [drafts] * self.gamma
            gen.spec_accepted_per_pos = [a - b for a, b in zip(after[1], before[1])]
        return gen

    def score(self, prompt_ids, top_k: int = 10) -> ScoreResult:
        out, dt = self._post({"prompt": list(prompt_ids), "max_tokens": 1, "temperature": 0.0, "logprobs": top_k})
        lp = (out["choices"][0].get("logprobs") or {}).get("top_logprobs") or [{}]
        top = {str(k): float(v) for k, v in (lp[0] or {}).items()}
        return ScoreResult(top_logprobs=top, time_s=dt, prompt_tokens=len(prompt_ids), cached_tokens=self._cached(out))

    def _spec_counters(self) -> tuple[int, list[int]]:
        """(drafts, accepted per position) totals of the server's spec-decode counters (calibrate.contracts.spec_metrics)."""
        from calibrate.contracts.spec_metrics import DRAFTS, PER_POS, read_prometheus

        with urllib.request.urlopen(f"{self.url}/metrics", timeout=30) as r:
            text = r.read()
        with tempfile.NamedTemporaryFile(suffix=".txt") as fh:
            fh.write(text)
            fh.flush()
            series = read_prometheus(fh.name)
        drafts, per_pos = 0, [0] * self.gamma
        for vals in series.values():
            drafts += int(vals.get(DRAFTS, 0))
            for i in range(self.gamma):
                per_pos[i] += int(vals.get(f"{PER_POS}@{i}", 0))
        return drafts, per_pos

    def describe(self) -> dict:
        d = dict(self.info)
        d["server"] = self.url
        if self.gamma and self.draft_info:
            d["draft"] = self.draft_info
        return d

    def version(self) -> str:
        from calibrate.measure.vllm_cli import vllm_version

        return vllm_version()
