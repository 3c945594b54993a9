"""Issue 14: a killed ``specsim measure serve-run`` leaves no half-written level.

Each level is written to ``.LABEL.partial`` and renamed to ``LABEL`` once complete (``serve-systems``
shares ``partial_dir``/``publish_level``). A real SIGKILL during the second level of a campaign (a fake
stepping engine, no vLLM): the first level is whole, the second is absent under its own name (a glob like
``rep*/*`` cannot pick up the partial one); rerunning keeps the complete level and redoes the other.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r'''
import sys, time
from pathlib import Path
import calibrate.measure.serving_run as sr

class FakeEngine:
    """One token per running request per step; ``slow`` seconds per step."""
    info = {"architecture": "FakeForCausalLM", "path": "fake", "num_layers": 1, "hidden_size": 8,
            "vocab_size": 16, "dummy_weights": True}
    limits, env = {}, {}

    def __init__(self, slow):
        self.slow, self.running = slow, {}

    def chat_prompt(self, question):
        return list(range(200))

    def version(self):
        return "fake 0"

    def add(self, req):
        self.running[req.request_id] = [req, 0]

    def has_unfinished(self):
        return bool(self.running)

    def step(self):
        time.sleep(self.slow)
        ids = list(self.running)
        ctx = [len(self.running[i][0].prompt_ids) + self.running[i][1] if self.running[i][1] else 0 for i in ids]
        new = [1 if self.running[i][1] else len(self.running[i][0].prompt_ids) for i in ids]
        outs = []
        for i in ids:
            self.running[i][1] += 1
            done = self.running[i][1] >= self.running[i][0].max_tokens
            outs.append((i, self.running[i][1], done, 0))
            if done:
                del self.running[i]
        return sr.StepReport(request_ids=ids, new_tokens=new, context_tokens=ctx, waiting=0, outputs=outs)

    def close(self):
        pass

def fake_requests(chat_prompt, n, seed, min_tokens, max_tokens, dataset="x", offset=0, min_prompt_tokens=0):
    return [sr.ServeRequest(i, f"p{offset + i}", tuple(chat_prompt("")), max_tokens) for i in range(n)]

sr.make_requests = fake_requests
out, slow = sys.argv[1], float(sys.argv[2])
cfg = sr.ServeConfig(base="fake", arrivals=(sr.ClosedLoop(1), sr.ClosedLoop(2)), requests=6, min_tokens=8,
                     max_tokens=8, warmup=0, min_prompt_tokens=0)
sr.run_serving(cfg, out, engine=FakeEngine(slow), log=lambda m: print(m, flush=True))
'''


def _run(out: Path, slow: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(out), str(slow)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_killed_serve_run_leaves_no_half_written_level_and_resumes(tmp_path):
    from calibrate.contracts.serving_records import load_serving_run
    from calibrate.measure.serving_run import level_complete

    out = tmp_path / "rep1"
    p = _run(out, 0.05)
    t0 = time.time()
    while not (out / "closed-1").exists() and p.poll() is None and time.time() - t0 < 60:
        time.sleep(0.02)
    time.sleep(0.3)  # inside level closed-2 (>= 1.2 s of steps)
    assert p.poll() is None, p.communicate()
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert level_complete(out / "closed-1", 6)
    assert not (out / "closed-2").exists(), "a killed level is visible under its final name"
    assert (out / ".closed-2.partial").is_dir()
    seen = subprocess.run(["bash", "-c", "echo rep*/*"], cwd=tmp_path, capture_output=True, text=True).stdout.split()
    assert seen == ["rep1/closed-1"]  # what the README's `rep[0-9]*/*` globs hand to validate-serving
    first = (out / "closed-1" / "serve_requests.jsonl").read_bytes()

    p = _run(out, 0.0)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 0, err
    assert (out / "closed-1" / "serve_requests.jsonl").read_bytes() == first  # the complete level is kept
    assert level_complete(out / "closed-2", 6) and not (out / ".closed-2.partial").exists()
    for level in ("closed-1", "closed-2"):
        recs = load_serving_run(out / level)
        assert len(recs["serve_request"]) == 6
        assert len({r["request_id"] for r in recs["serve_request"]}) == 6
    assert json.loads((out / "closed-2" / "run.json").read_text())["options"]["wall_s"] > 0
