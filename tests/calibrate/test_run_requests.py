"""The one request loop (``calibrate.measure.runner.run_requests``: in-process runs and server-mode SpecReason runs) and the
one signal guard of the server runs (``calibrate.measure.server_process.interrupt_on_signals``), without engines."""

from __future__ import annotations

import os
import signal

import pytest

from calibrate.measure import runner
from calibrate.measure.server_process import interrupt_on_signals


class _FakeRunDirectory:
    opened: list["_FakeRunDirectory"] = []

    def __init__(self, done: set[int]):
        self.done_request_ids, self.written, self.closed = set(done), [], False

    def write_request(self, steps, req):
        self.written.append(req["request_id"])

    def close(self):
        self.closed = True


@pytest.fixture
def fake(monkeypatch):
    calls = []
    state = {"done": set()}

    def open_(out, manifest):
        rd = _FakeRunDirectory(state["done"])
        _FakeRunDirectory.opened.append(rd)
        return rd

    def run_request(cfg, prob, request_id, base, small, seed, on_step):
        calls.append((prob, request_id, seed, on_step is not None))
        return [], {"request_id": request_id}

    monkeypatch.setattr(runner.RunDirectory, "open", staticmethod(open_))
    monkeypatch.setattr(runner, "run_request", run_request)
    return calls, state


def test_warm_up_first_and_discarded_then_every_measured_request_written(fake, tmp_path):
    calls, _ = fake
    seen, checks = [], []
    rd = runner.run_requests(None, "b", "s", tmp_path, {}, ["p0", "p1"], ["w0"], 10, on_step=print,
                             on_request=seen.append, check=lambda: checks.append(1))
    assert calls == [("w0", 2, 12, False), ("p0", 0, 10, True), ("p1", 1, 11, True)]
    assert rd.written == [0, 1] and [r["request_id"] for r in seen] == [0, 1] and rd.closed
    assert len(checks) == 3  # before every request, warm-up included


def test_resume_skips_done_requests_and_the_warm_up_once_all_are_done(fake, tmp_path):
    calls, state = fake
    state["done"] = {0}  # a partial run: the fresh engines warm up again, then the requests left run
    rd = runner.run_requests(None, "b", "s", tmp_path, {}, ["p0", "p1"], ["w0"], 0)
    assert calls == [("w0", 2, 2, False), ("p1", 1, 1, False)] and rd.written == [1]
    state["done"] = {0, 1}
    calls.clear()
    rd = runner.run_requests(None, "b", "s", tmp_path, {}, ["p0", "p1"], ["w0"], 0)
    assert calls == [] and rd.written == [] and rd.closed


def test_an_interrupt_stops_the_loop_and_closes_the_run_directory(fake, tmp_path):
    calls, _ = fake

    def check():
        if len(calls) == 1:
            raise KeyboardInterrupt("signal 15")

    with pytest.raises(KeyboardInterrupt):
        runner.run_requests(None, "b", "s", tmp_path, {}, ["p0", "p1"], [], 0, check=check)
    assert len(calls) == 1 and _FakeRunDirectory.opened[-1].closed


def test_interrupt_on_signals_notes_the_signal_and_restores_the_handlers():
    before = signal.getsignal(signal.SIGTERM)
    with interrupt_on_signals() as intr:
        assert signal.getsignal(signal.SIGTERM) == intr.handler
        os.kill(os.getpid(), signal.SIGTERM)  # noted, not raised in the handler
        with pytest.raises(KeyboardInterrupt):
            intr.check()
    assert signal.getsignal(signal.SIGTERM) == before
