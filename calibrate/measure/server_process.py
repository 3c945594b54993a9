"""The server processes of the serving benchmarks (``specsim measure serve-bench``, ``serve-specreason``): start
``vllm serve`` / ``vllm bench serve`` in their own process group, wait for ``/health``, scrape ``/metrics``, and stop
them whatever happens (SIGTERM to the group, SIGKILL after a grace period; ``PR_SET_PDEATHSIG`` so that even a SIGKILL
of this process takes them down; a stale ``server.pid`` of an earlier session stopped first). :class:`_Interrupt`
turns SIGTERM / SIGINT into a ``KeyboardInterrupt`` at the caller's next check, so its ``finally`` stops the server."""

from __future__ import annotations

import datetime as _dt
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

from simulator.errors import InputError

HOST = "127.0.0.1"
# the vllm CLI; SPECSIM_VLLM_CLI (a command prefix) replaces it, e.g. with the tests' fake server and client
CLI = shlex.split(os.environ["SPECSIM_VLLM_CLI"]) if os.environ.get("SPECSIM_VLLM_CLI") else \
    [sys.executable, "-m", "calibrate.measure.vllm_cli"]
CPU_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_USE_AOT_COMPILE": "0", "TOKENIZERS_PARALLELISM": "false"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _pdeathsig() -> None:  # runs in the child before exec: die with the parent (Linux), own process group
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds (user + system) used so far by the process ``pid`` itself (``front_end``: `vllm serve`'s API-server
    process, which parses, tokenises, detokenises and streams every request in one asyncio loop) and by its live
    descendants (``engine``: the engine-core process and what it started), read through psutil (a vLLM dependency,
    present wherever a server runs). {} where psutil is missing or the process is gone."""
    try:
        import psutil
    except ImportError:
        return {}
    try:
        proc = psutil.Process(pid)
        own = proc.cpu_times()
        kids = proc.children(recursive=True)
    except psutil.Error:
        return {}
    engine = 0.0
    for c in kids:
        try:
            t = c.cpu_times()
        except psutil.Error:  # exited between the listing and the read
            continue
        engine += t.user + t.system
    return {"front_end": own.user + own.system, "engine": engine}


def cpu_used(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds per part between two :func:`cpu_seconds` readings (parts read both times only)."""
    return {k: round(after[k] - before[k], 4) for k in before if k in after}


def child_env() -> dict:
    env = dict(os.environ)
    for k, v in CPU_ENV.items():
        env.setdefault(k, v)
    env.setdefault("VLLM_CACHE_ROOT", str(Path(".cache/vllm").resolve()))
    return env


def start(cmd: list[str], log: Path, env: dict | None = None) -> subprocess.Popen:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as fh:
        fh.write(f"\n# {utc_now()} $ {shlex.join(cmd)}\n".encode())
        fh.flush()
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**child_env(), **(env or {})}, preexec_fn=_pdeathsig)


def stop_group(proc: subprocess.Popen | None, grace_s: float = 20.0) -> None:
    """SIGTERM to the process group, SIGKILL to what is left after ``grace_s``; reaps the leader."""
    if proc is None:
        return
    pgid = proc.pid  # setsid: the group id is the leader's pid
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None and not _group_alive(pgid):
                break
            time.sleep(0.2)
        else:
            continue
        break
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop_stale(out: Path) -> None:
    """A ``server.pid`` left by a session that could not clean up (SIGKILL): stop that group if it is still ours."""
    f = out / "server.pid"
    if not f.is_file():
        return
    try:
        pgid = int(f.read_text().split()[0])
        cmdline = Path(f"/proc/{pgid}/cmdline").read_bytes().decode(errors="replace")
    except (OSError, ValueError, IndexError):
        f.unlink(missing_ok=True)
        return
    if CLI[-1] in cmdline and "serve" in cmdline:  # still our server (a pid can be reused)
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    f.unlink(missing_ok=True)


def http_get(url: str, timeout: float = 10.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def wait_healthy(proc: subprocess.Popen, port: int, timeout_s: float, log: Path,
                 check: Callable[[], None] = lambda: None) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        check()
        if proc.poll() is not None:
            raise InputError(str(log), "server", f"vllm serve exited with code {proc.returncode} before it was healthy "
                             "(see the log)")
        try:
            if http_get(f"http://{HOST}:{port}/health", timeout=2.0)[0] == 200:
                return time.monotonic() - t0
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.5)
    raise InputError(str(log), "server", f"not healthy after {timeout_s:g} s (raise --startup-timeout)")


def scrape(port: int, path: Path) -> None:
    status, body = http_get(f"http://{HOST}:{port}/metrics", timeout=30.0)
    if status != 200:
        raise InputError(str(path), "/metrics", f"expected HTTP 200 from the server (got {status})")
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(body)
    os.replace(tmp, path)


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


class _Interrupt:
    """SIGTERM / SIGINT during a ladder: the handler only notes the signal and stops the running client; the
    ladder raises KeyboardInterrupt at its next check, so the ``finally`` stops the server (raising from inside
    the handler can land in a fork hook or a lock release, where Python ignores it)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.client: subprocess.Popen | None = None

    def handler(self, signum, frame) -> None:
        self.signum = signum
        c = self.client
        if c is not None:
            try:
                os.killpg(c.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass

    def check(self) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"signal {self.signum}")


def _is_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


@contextmanager
def interrupt_on_signals():
    """While the block runs, SIGTERM and SIGINT only note the signal on the yielded :class:`_Interrupt` (and stop its
    running client); the block's ``intr.check()`` raises ``KeyboardInterrupt`` at its next check, so its ``finally``
    stops the servers. Handlers are set in the main thread only (Python allows no other) and restored afterwards."""
    intr = _Interrupt()
    old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    main = _is_main_thread()
    if main:
        for s in old:
            signal.signal(s, intr.handler)
    try:
        yield intr
    finally:
        if main:
            for s, h in old.items():
                signal.signal(s, h)
