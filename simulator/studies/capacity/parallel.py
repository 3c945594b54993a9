"""Where the capacity work runs: this process, local worker processes or a Ray cluster.

One :class:`Workers` can serve a whole command: the report's capacity search and its load curves share the same
processes, which keep their scenario, request-plan and single-request-latency caches between stages. Results never
depend on where, or in which order, tasks ran: every task is a function of its arguments only (seeds come from the
points, never from Python's ``hash`` or the worker), results come back in the tasks' order, and
:func:`interval_rounds` decides from whole rounds only. The order in which tasks start (costliest first, from the
time the configuration's last replications took) only decides when a result arrives.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import numpy as np

from simulator.studies.capacity.search import (IntervalSpec, Point, reps_task, at_capacity, capacity_interval, evaluate,
                                       interval_fields, search_capacity, t_interval)
from simulator.studies.capacity.table import paired_better
from simulator.errors import InputError


class Workers:
    """A pool of ``workers`` local processes (default: ``os.cpu_count()``; 1: this process), or Ray at
    ``ray_address``; started on first use, closed by :meth:`close` (or ``with``)."""

    def __init__(self, workers: int | None = None, ray_address: str | None = None):
        self.n = workers or os.cpu_count() or 1
        self._pool = None
        self._ray = None
        if ray_address:
            try:
                import ray  # noqa: PLC0415
            except ImportError:
                raise InputError(None, "--ray-address", "ray is not installed (pip install 'ray[default]')") from None
            ray.init(address=ray_address, ignore_reinit_error=True)
            self._ray = ray

    def __enter__(self) -> "Workers":
        return self

    def __exit__(self, et, ev, tb) -> None:
        self.close(abort=et is not None)

    def close(self, abort: bool = False) -> None:
        """Shut the local processes down: after their tasks (default), or -- ``abort``, on an interrupt or an error
        -- at once: queued tasks cancelled, running ones stopped (SIGTERM, then SIGKILL after a second)."""
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if not abort:
            pool.shutdown()
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        stop_processes(procs)

    def map(self, fn, args: list[tuple], on_done=None, cost=None) -> list:
        """``[fn(*a) for a in args]``; ``on_done(j, result)`` as task j finishes; ``cost(j)``: a guess of task j's
        cost, the costliest started first (no straggler starts last). Interrupted (Ctrl-C, SIGTERM turned into an
        exception by the command line) or failed, it stops every worker before the exception goes on: no task
        outlives the call that wanted it."""
        try:
            return self._map(fn, args, on_done, cost)
        except BaseException:
            self.close(abort=True)
            raise

    def _map(self, fn, args: list[tuple], on_done=None, cost=None) -> list:
        out: list = [None] * len(args)
        order = sorted(range(len(args)), key=lambda j: -cost(j)) if cost else list(range(len(args)))
        if self._ray is not None:
            remote = self._ray.remote(fn)
            refs = {remote.remote(*args[j]): j for j in order}
            pending = list(refs)
            try:
                while pending:
                    done, pending = self._ray.wait(pending, num_returns=1)
                    j = refs[done[0]]
                    out[j] = self._ray.get(done[0])
                    if on_done:
                        on_done(j, out[j])
            except BaseException:
                for ref in pending:
                    self._ray.cancel(ref, force=True)
                raise
            return out
        if self.n <= 1 or (self._pool is None and len(args) <= 1):
            for j in order:
                out[j] = fn(*args[j])
                if on_done:
                    on_done(j, out[j])
            return out
        from concurrent.futures import ProcessPoolExecutor, as_completed

        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self.n, initializer=worker_signals)
        futs = {self._pool.submit(fn, *args[j]): j for j in order}
        for f in as_completed(futs):
            j = futs[f]
            out[j] = f.result()
            if on_done:
                on_done(j, out[j])
        return out


def worker_signals() -> None:
    """A worker process's signals (its pool's initializer): Ctrl-C reaches the whole foreground process group, but only
    the parent acts on it (it stops the workers: :meth:`Workers.close`), so a worker ignores SIGINT; SIGTERM kills it
    (the default, whatever handler the parent had when it forked); and on Linux it gets SIGTERM when its parent
    dies, so even a parent killed outright (SIGKILL) leaves no worker computing."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # not Linux: the parent's close() is the only stop
        return
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)


def stop_processes(procs, grace_s: float = 1.0) -> None:
    """Stop ``multiprocessing`` processes now: SIGTERM, up to ``grace_s`` for all of them to end, then SIGKILL."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + grace_s
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(1.0)


def _timed_reps(point: Point, ks: list[int], prior: list[float], rel_tol: float) -> tuple[list[dict], float]:
    """Worker: :func:`reps_task` and the CPU seconds it took (a scheduling hint only)."""
    t = time.process_time()
    rows = reps_task(point, ks, prior, rel_tol)
    return rows, time.process_time() - t


def interval_rounds(points: list[Point], spec: IntervalSpec, workers: int | None = None,
                    ray_address: str | None = None, progress=None, stop_below_best: bool = True,
                    pool: Workers | None = None, eligible: list[bool] | None = None,
                    shown_only: bool = False) -> list[dict]:
    """Capacity intervals of many configurations in rounds: every
    configuration gets ``spec.min_reps`` replications, then one more per round while its interval is wider
    than ``spec.target`` -- unless (``stop_below_best``) a configuration whose per-GPU capacity is
    significantly higher (paired, :func:`paired_better`, the ranking's own test) already exists: its rank cannot
    become 1 and more replications would not change the recommendation, so it stops (``stopped`` "below the
    best"; ``converged`` False, its interval as it is). ``eligible`` (default: all): which configurations can be
    recommended (the accuracy floor); with ``stop_below_best`` the leader is the best of those, and with
    ``shown_only`` too (the report, which searches such configurations only to plot them) one that cannot be
    recommended gets the first round only (``stopped`` "cannot be recommended"): more replications of it would not
    change the recommendation. Replication k of a configuration is the same search as in
    :func:`capacity_interval` (seed k, warm start from the mean so far), so a configuration that is not
    stopped early gets the same figures; results do not depend on the workers (the decisions use whole
    rounds). Rows as :func:`run_point`'s. ``pool``: the workers to use (default: new ones from ``workers`` /
    ``ray_address``)."""
    points = list(points)
    n = len(points)
    caps: list[list[float]] = [[] for _ in range(n)]
    rows: list[list[dict]] = [[] for _ in range(n)]
    stopped = [""] * n
    done = [False] * n
    eligible = [True] * n if eligible is None else list(eligible)
    per_rep = [_cost_hint(p) for p in points]  # CPU s per replication: a guess, then measured
    total = n * spec.max_reps
    finished = 0
    tasks = [(i, list(range(spec.min_reps))) for i in range(n)]
    own = pool is None
    pool = pool or Workers(workers, ray_address)
    try:
        while tasks:
            def on_done(j: int, res: tuple) -> None:
                nonlocal finished
                finished += len(res[0])
                if progress:
                    progress(finished, total, {"label": points[tasks[j][0]].cfg.label})

            results = pool.map(_timed_reps, [(points[i], ks, caps[i], spec.rel_tol) for i, ks in tasks], on_done,
                               cost=lambda j: per_rep[tasks[j][0]] * len(tasks[j][1]))
            for (i, ks), (res, cpu) in zip(tasks, results):
                rows[i] += res
                caps[i] += [r["max_qps"] for r in res]
                per_rep[i] = cpu / len(ks)
                if points[i].single_latency_s is None and res:  # the other workers need not compute it again
                    points[i] = replace(points[i], single_latency_s=res[0]["single_request_latency_s"])
            _decide(points, caps, spec, stop_below_best, done, stopped, eligible, shown_only)
            # the ETA's total: what is done, plus at most max_reps of those still running
            total = finished + sum(spec.max_reps - len(caps[i]) for i in range(n) if not done[i])
            tasks = [(i, [len(caps[i])]) for i in range(n) if not done[i]]
    finally:
        if own:
            pool.close()
    return [_interval_row(p, caps[i], rows[i], stopped[i], spec) for i, p in enumerate(points)]


def _decide(points: list[Point], caps: list[list[float]], spec: IntervalSpec, stop_below_best: bool,
            done: list[bool], stopped: list[str], eligible: list[bool], shown_only: bool = False) -> None:
    """After a round: a configuration is done when its interval is narrow enough (or it sustains nothing, or has
    ``max_reps``), or (``stop_below_best``) stopped when an eligible one with significantly higher per-GPU capacity
    exists or (``shown_only``) it cannot be recommended."""
    n = len(points)
    for i in range(n):
        if done[i]:
            continue
        m, half = t_interval(caps[i])
        if m == 0.0 or half <= spec.target * m or len(caps[i]) >= spec.max_reps:
            done[i] = True
        elif stop_below_best and shown_only and not eligible[i]:
            done[i], stopped[i] = True, "cannot be recommended"
    live = [i for i in range(n) if eligible[i] and caps[i] and np.mean(caps[i]) > 0]
    if live and stop_below_best:
        lead = max(live, key=lambda i: (np.mean(caps[i]) / points[i].gpus, -i))
        for i in range(n):
            if not done[i] and i != lead and paired_better(tuple(caps[lead]), tuple(caps[i]), points[lead].gpus,
                                                           points[i].gpus):
                done[i], stopped[i] = True, "below the best"


def _interval_row(p: Point, caps: list[float], rows: list[dict], stopped: str, spec: IntervalSpec) -> dict:
    """One configuration's row: the replication nearest the mean capacity, with the interval and its counts."""
    m = float(np.mean(caps))
    rep = rows[int(np.argmin([abs(c - m) for c in caps]))]
    return {**_config(p), **rep, **interval_fields(caps, spec), "replications": len(caps),
            "requests_per_run": p.load.requests, "stopped": stopped,
            "capacities": tuple(float(c) for c in caps),
            "evaluations": sum(r["evaluations"] for r in rows),
            "bracketed": all(r.get("bracketed", True) for r in rows), **at_capacity(rows)}


def _config(point: Point) -> dict:
    c = point.cfg
    return {"hardware": point.hardware, "tp": point.tp, "pp": point.pp, "dp": point.dp, "system": c.system, "gamma": c.gamma,
            "gamma_policy": c.gamma_policy, "threshold": c.threshold, "first_n": c.first_n, "label": c.label}


def run_point(point: Point) -> dict:
    """Worker entry point (top level so processes and Ray can import it)."""
    if point.rate is None and point.users is None and point.replay is None:
        out = capacity_interval(point, point.interval) if point.interval is not None else search_capacity(point)
    else:
        out = evaluate(point, point.rate, point.users, point.replay)
        out["rate_qps"] = point.rate
        out["users"] = point.users
        out["replay"] = point.replay
    return {**_config(point), **out}


def run_points(points: list[Point], workers: int | None = None, ray_address: str | None = None,
               progress=None, pool: Workers | None = None) -> list[dict]:
    """Map :func:`run_point` over points: serially (workers=1), on local processes, or on Ray; results in the
    points' order. ``progress(done, total, row)`` is called as each point finishes (for an ETA)."""
    count = 0

    def on_done(j: int, row: dict) -> None:
        nonlocal count
        count += 1
        if progress:
            progress(count, len(points), row)

    own = pool is None
    pool = pool or Workers(workers, ray_address)
    try:
        return pool.map(run_point, [(p,) for p in points], on_done, cost=lambda j: _cost_hint(points[j]))
    finally:
        if own:
            pool.close()


def _cost_hint(point: Point) -> float:
    """Relative cost of a point's simulations: calls per request grow with the system's steps, and a drafting
    engine evaluates its draft passes too (a guess used only to order work; never changes a result)."""
    return {"specreason": 3.0, "specreason-decode": 3.0}.get(point.cfg.system, 2.0 if point.cfg.drafts else 1.0)
