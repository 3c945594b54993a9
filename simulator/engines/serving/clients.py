"""Who sends a replica its requests (SimPy processes): an open-loop arrival stream (optionally with at most N requests
in flight), closed-loop users (one request after another, with exponential think times), or sessions of several
turns (each turn sent a think time after the previous answer; sessions arrive open loop or are run one after another
by closed-loop users).

A process submits request ``rid`` with ``replica.submit(rid, plans[rid])``; a closed-loop one waits for the event
it registers in ``replica.done_events[rid]``."""

from __future__ import annotations

import numpy as np
import simpy

from simulator.engines.serving.arrivals import CappedArrivals, ClosedLoopUsers


def start_clients(env, rep, arrivals, plans: list, n_requests: int, arr_rng: np.random.Generator, stop=None,
                  sessions: list[list[int]] | None = None, think_s=None) -> int:
    """Start the processes that send ``rep`` its requests; returns the number of requests they will send (open
    loop: those the arrival process brings; sessions: their turns). ``stop``: an early stop, open loop only."""
    if sessions is not None:
        if stop is not None or isinstance(arrivals, CappedArrivals):
            raise ValueError("sessions run without an early stop or a cap on requests in flight")
        return _start_sessions(env, rep, arrivals, plans, arr_rng, sessions, think_s)
    if isinstance(arrivals, ClosedLoopUsers):
        counter = [0]
        for _ in range(arrivals.processes(n_requests)):
            env.process(_user(env, rep, plans, n_requests, counter, arrivals.think_time_s, arr_rng))
        return n_requests
    times = arrivals.times(n_requests, arr_rng)
    n_requests = len(times)
    if isinstance(arrivals, CappedArrivals):
        if stop is not None:
            raise ValueError("a capped open loop runs without an early stop")
        slots = simpy.Resource(env, capacity=arrivals.max_concurrency)  # FIFO: the client's semaphore
        for rid, t in enumerate(times):
            env.process(_capped(env, rep, plans, rid, float(t), slots))
        return n_requests
    env.process(_open_loop(env, rep, plans, times))
    if stop is not None:
        rep.stop = stop.start(n_requests, rep.t_call)
    return n_requests


def _capped(env, rep, plans: list, rid: int, t: float, slots):
    """Request ``rid`` arrives at ``t`` and is sent once it holds one of the loop's slots, until answered."""
    if t > env.now:
        yield env.timeout(t - env.now)
    with slots.request() as slot:
        yield slot
        ev = env.event()
        rep.done_events[rid] = ev
        rep.submit(rid, plans[rid])
        yield ev


def _open_loop(env, rep, plans: list, times: np.ndarray):
    for rid, t in enumerate(times):
        if t > env.now:
            yield env.timeout(t - env.now)
        rep.submit(rid, plans[rid])


def _user(env, rep, plans: list, n_requests: int, next_rid: list[int], think_s: float, arr_rng):
    while next_rid[0] < n_requests:
        rid = next_rid[0]
        next_rid[0] += 1
        ev = env.event()
        rep.done_events[rid] = ev
        rep.submit(rid, plans[rid])
        yield ev
        if think_s > 0:
            yield env.timeout(arr_rng.exponential(think_s))


def _start_sessions(env, rep, arrivals, plans: list, arr_rng, sessions: list[list[int]], think_s) -> int:
    """Sessions run one after another by closed-loop users, or each starting at an arrival time."""

    def session(rids: list[int], t: float):
        if t > env.now:
            yield env.timeout(t - env.now)
        for k, rid in enumerate(rids):
            if k and think_s[rid] > 0:
                yield env.timeout(float(think_s[rid]))
            ev = env.event()
            rep.done_events[rid] = ev
            rep.submit(rid, plans[rid])
            yield ev

    def session_user(next_s: list[int]):  # a closed-loop user runs one session after another
        while next_s[0] < len(sessions):
            i = next_s[0]
            next_s[0] += 1
            yield from session(sessions[i], env.now)

    if isinstance(arrivals, ClosedLoopUsers):
        counter = [0]
        for _ in range(arrivals.processes(len(sessions))):
            env.process(session_user(counter))
        return sum(len(x) for x in sessions)
    times = arrivals.times(len(sessions), arr_rng)
    sessions = sessions[: len(times)]
    for rids, t in zip(sessions, times):
        env.process(session(rids, float(t)))
    return sum(len(x) for x in sessions)
