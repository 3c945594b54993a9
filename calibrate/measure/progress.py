"""Rich progress bar for runs: requests, steps, tokens/s, small-step acceptance so far."""

from __future__ import annotations

import time

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    def __init__(self, total_requests: int):
        self.total = total_requests
        self.steps = self.tokens = self.proposed = self.accepted = self.done = 0
        self.t0 = time.perf_counter()
        self.progress = Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[info]}"), TimeElapsedColumn(), transient=False)
        self.task = None

    def __enter__(self):
        self.progress.__enter__()
        self.task = self.progress.add_task("run", total=self.total, info="")
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def _info(self) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        acc = f"{self.accepted}/{self.proposed} small steps kept" if self.proposed else "no proposals"
        return f"steps {self.steps} | {self.tokens / dt:.1f} tok/s | {acc}"

    def step(self, rec: dict) -> None:
        self.steps += 1
        self.tokens += rec["kept_tokens"]
        if rec["small_tokens"] and rec["score_time_s"] > 0:
            self.proposed += 1
            self.accepted += int(rec["accepted"])
        self.progress.update(self.task, info=self._info())

    def request(self, rec: dict) -> None:
        self.done += 1
        self.progress.update(self.task, advance=1, info=self._info())

    def summary(self) -> str:
        return f"{self.done} new requests, {self._info()}"
