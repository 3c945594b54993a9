"""A character-level fake engine: a test double for the orchestrator's unit tests only.

Token ids are Unicode code points. The model writes scripted steps: step k of ``writer(k)``;
the judge returns the digit ``judge(step_text)`` with logprob ~0. A call's time is the wall time
the call took (as a real engine's is), so a run's call times never exceed its requests' latencies.
"""

from __future__ import annotations

import time
from typing import Callable

from calibrate.measure.engine import Engine, Generation, Sampling, ScoreResult


class FakeEngine(Engine):
    name = "fake"

    def __init__(self, writer: Callable[[int], str], judge: Callable[[str], int] | None = None, gamma: int = 0,
                 key: str = "chars"):
        self.writer, self.judge, self.gamma, self.key = writer, judge, gamma, key
        self.calls: list[tuple[str, int]] = []  # (kind, prompt tokens)

    def encode(self, text: str) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(i) for i in ids)

    def chat_prompt(self, question: str) -> list[int]:
        return self.encode(f"<user>{question}</user>\n")

    def generate(self, prompt_ids, max_tokens, stop, sampling: Sampling, seed) -> Generation:
        t0 = time.perf_counter()
        self.calls.append(("generate", len(prompt_ids)))
        context = self.decode(prompt_ids).split("</user>\n", 1)[1]
        text = self.writer(context.count("\n\n"))
        ids = self.encode(text)[:max_tokens]
        finish = "stop" if self.decode(ids).endswith("\n\n") else "length"
        drafted = [len(ids)] * self.gamma
        accepted = [len(ids) // (i + 2) for i in range(self.gamma)]
        return Generation(ids, self.decode(ids), finish, time.perf_counter() - t0, len(prompt_ids), len(prompt_ids) - 1,
                          drafted if self.gamma else [], accepted if self.gamma else [])

    def score(self, prompt_ids, top_k: int = 10) -> ScoreResult:
        t0 = time.perf_counter()
        self.calls.append(("score", len(prompt_ids)))
        text = self.decode(prompt_ids)
        step = text.rsplit("[Judge]", 1)[0].rstrip("\n").rsplit("\n\n", 1)[-1]
        d = self.judge(step) if self.judge else 9
        top = {str(d): -0.01, "x": -5.0}
        return ScoreResult(top, time.perf_counter() - t0, len(prompt_ids), len(prompt_ids) - 80)

    @property
    def tokenizer_key(self) -> str:
        return self.key

    def describe(self) -> dict:
        return {"path": "fake", "architecture": "fake", "num_layers": 0, "vocab_size": 0x110000,
                "hidden_size": 0, "dummy_weights": True}
