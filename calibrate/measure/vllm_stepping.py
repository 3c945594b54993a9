"""The real engine of the concurrent serving runs: vLLM's engine core stepped by hand, in-process.

:class:`VllmSteppingEngine` implements the driver's :class:`~calibrate.contracts.serving_records.SteppingEngine` protocol
(``add`` / ``step`` / ``has_unfinished``) for ``specsim measure serve-run`` (:func:`calibrate.measure.serving_run.run_serving`)
and, through the broker's ``add_raw``, for ``serve-systems`` (:mod:`calibrate.measure.serving_systems`)."""

from __future__ import annotations

from pathlib import Path

from calibrate.contracts.serving_records import ServeRequest, StepReport


class VllmSteppingEngine:
    """vLLM's engine core stepped by hand (in-process: ``VLLM_ENABLE_V1_MULTIPROCESSING=0``).

    The scheduler's ``schedule`` is wrapped to keep the step's ``SchedulerOutput``: per scheduled
    request its new tokens and the tokens already computed (prefix-cache hits for a new request)."""

    def __init__(self, model_dir: str | Path, *, dtype: str = "float32", max_model_len: int = 2048, seed: int = 0,
                 prefix_caching: bool = False, max_num_seqs: int = 256, draft_dir: str | Path | None = None,
                 gamma: int = 0, engine_args: dict | None = None):
        from calibrate.measure.engine import apply_env_defaults, check_draft, describe_model_dir

        self.env = apply_env_defaults()
        self.info = describe_model_dir(model_dir, False)
        self.draft_info = check_draft(self.info, draft_dir, gamma, False) if draft_dir else None
        self.gamma = gamma if draft_dir else 0
        self.speculative = {"method": "draft_model", "model": str(draft_dir), "num_speculative_tokens": gamma} \
            if draft_dir else None
        from vllm import LLM

        extra = {"speculative_config": dict(self.speculative)} if self.speculative else {}
        extra.update(engine_args or {})  # further vLLM engine arguments (num_gpu_blocks_override, block_size, ...)
        self.llm = LLM(model=str(model_dir), dtype=dtype, max_model_len=max_model_len, seed=seed, enforce_eager=True,
                       enable_prefix_caching=prefix_caching, gpu_memory_utilization=0.4, max_num_seqs=max_num_seqs,
                       **extra)
        self.tok = self.llm.get_tokenizer()
        self.eng = self.llm.llm_engine
        self.sched = self.eng.engine_core.engine_core.scheduler
        self.limits = {"max_num_seqs": int(self.sched.max_num_running_reqs),
                       "max_num_batched_tokens": int(self.sched.max_num_scheduled_tokens),
                       "prefix_caching": prefix_caching, "max_model_len": max_model_len, "enforce_eager": True}
        self._last = None
        self._ext: dict[str, str] = {}
        orig = self.sched.schedule

        def schedule(*a, **k):
            self._last = orig(*a, **k)
            # vLLM schedules internal ids ("<id>-<8 random chars>"): keep each one's external id (ours)
            states = self.eng.output_processor.request_states
            self._ext = {rid: getattr(states.get(rid), "external_req_id", None) or rid
                         for rid in self._last.num_scheduled_tokens}
            return self._last

        self.sched.schedule = schedule

    def chat_prompt(self, question: str) -> list[int]:
        text = self.tok.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True,
                                            tokenize=False)
        return list(self.tok.encode(text, add_special_tokens=False))

    def add(self, req: ServeRequest) -> None:
        from vllm import SamplingParams

        params = SamplingParams(max_tokens=req.max_tokens, temperature=0.0, ignore_eos=True, detokenize=False)
        self.add_raw(str(req.request_id), req.prompt_ids, params)

    def add_raw(self, req_id: str, prompt_ids, params) -> None:
        """Any call: ``req_id`` is "<request>" or "<request>-<call>" (the request index comes first)."""
        from vllm.inputs import TokensPrompt

        self.eng.add_request(req_id, TokensPrompt(prompt_token_ids=list(prompt_ids)), params)

    def step(self) -> StepReport:
        self._last = None
        outs = self.eng.step()
        so = self._last
        rids, new, ctx, spec, cids = [], [], [], [], []
        if so is not None and so.total_num_scheduled_tokens > 0:
            computed = {r.req_id: r.num_computed_tokens for r in so.scheduled_new_reqs}
            cr = so.scheduled_cached_reqs
            computed.update(zip(cr.req_ids, cr.num_computed_tokens))
            drafts = so.scheduled_spec_decode_tokens or {}
            for rid, k in so.num_scheduled_tokens.items():
                cids.append(str(self._ext.get(rid, rid)))
                rids.append(int(rid.split("-")[0]))
                new.append(int(k))
                ctx.append(int(computed.get(rid, 0)))
                spec.append(len(drafts.get(rid, ())))
        outputs = [(int(str(o.request_id).split("-")[0]), len(o.outputs[0].token_ids), bool(o.finished),
                    int(o.num_cached_tokens or 0)) for o in outs]
        return StepReport(rids, new, ctx, len(self.sched.waiting), outputs, list(outs),
                          spec if self.speculative else None, cids)

    def last_preemptions(self) -> int:
        """Requests the last step's scheduling preempted (vLLM's ``SchedulerOutput.preempted_req_ids``)."""
        ids = getattr(self._last, "preempted_req_ids", None) if self._last is not None else None
        return len(ids) if ids else 0

    def has_unfinished(self) -> bool:
        return self.eng.has_unfinished_requests()

    def version(self) -> str:
        import vllm

        return str(vllm.__version__)

    def close(self) -> None:
        import gc

        try:
            self.eng.engine_core.shutdown()
        except Exception:
            pass
        del self.llm, self.eng, self.sched
        gc.collect()
