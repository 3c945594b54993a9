"""A stand-in for ``vllm`` in serve-bench's process tests (``SPECSIM_VLLM_CLI="python fake_vllm_cli.py"``).

``serve ... --port P``: an HTTP server on 127.0.0.1:P answering ``/health`` and ``/metrics``, with one child
process (like vLLM's engine core); every pid is appended to ``$FAKE_VLLM_PIDS``. SIGTERM stops its group.
``bench serve ... --result-dir D [--max-concurrency N]``: sleeps ``$FAKE_BENCH_SLEEP`` seconds, then writes
``D/result.json`` from the real closed-1 fixture with ``max_concurrency`` N.
"""

import http.server
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "bench_serve" / "closed-1.json"


def _note_pid(pid: int) -> None:
    with open(os.environ["FAKE_VLLM_PIDS"], "a") as fh:
        fh.write(f"{pid}\n")


def _arg(argv, name, default=None):
    return argv[argv.index(name) + 1] if name in argv else default


def serve(argv):
    port = int(_arg(argv, "--port"))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    _note_pid(os.getpid())
    _note_pid(child.pid)

    def on_term(*_):
        child.kill()
        os._exit(0)

    signal.signal(signal.SIGTERM, on_term)

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"ok" if self.path == "/health" else b"# HELP vllm:num_requests_running x\nvllm:num_requests_running 0\n"
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    time.sleep(float(os.environ.get("FAKE_SERVE_STARTUP", "0.3")))
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()


def bench(argv):
    time.sleep(float(os.environ.get("FAKE_BENCH_SLEEP", "0.2")))
    d = json.loads(FIXTURE.read_text())
    mc = _arg(argv, "--max-concurrency")
    d["max_concurrency"] = int(mc) if mc else None
    d["request_rate"] = _arg(argv, "--request-rate", "inf")
    out = Path(_arg(argv, "--result-dir")) / _arg(argv, "--result-filename", "result.json")
    out.write_text(json.dumps(d))


if __name__ == "__main__":
    a = sys.argv[1:]
    if a[:1] == ["serve"]:
        serve(a)
    elif a[:2] == ["bench", "serve"]:
        bench(a)
    else:
        sys.exit(f"fake vllm: unknown command {a}")
