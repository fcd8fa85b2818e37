"""The scheduler: runs the submitted workers concurrently on the pool under the completion policy.

A worker that gets no pooled connection in time (the pool timeout, capped by the deadline) ends
`failed` with PoolTimeout, like any other worker failure: a failed worker never fails the query, and
a failed vector leaves the policy unsatisfied. The query itself raises PoolTimeout only when one of
its own statements (entity lookup, relevance pool, final CTE) cannot get a connection.
"""

from __future__ import annotations

import concurrent.futures as cf
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psycopg

from .db import Database
from .types import SourceHit

SUBMITTED, COMPLETED, PENDING, FAILED = "submitted", "completed", "pending", "failed"
CANCEL_GRACE_S = 0.2  # how long to wait for cancelled statements to leave the server


@dataclass(frozen=True)
class CompletionPolicy:
    """All submitted sources must finish; `required` ones (vector) must complete; deadline is a ceiling."""

    name: str = "all_submitted_required_vector"
    required: tuple[str, ...] = ("vector",)

    def done(self, states: Mapping[str, str]) -> bool:
        return all(state in (COMPLETED, FAILED) for state in states.values())

    def satisfied(self, states: Mapping[str, str]) -> bool:
        return self.done(states) and all(
            states[name] == COMPLETED for name in self.required if name in states)


@dataclass
class SchedulerResult:
    hits: dict[str, list[SourceHit]]  # completed sources only
    states: dict[str, str]
    errors: dict[str, str]
    worker_ms: dict[str, float]
    finish_reason: str  # all_completed | completed_with_failures | deadline
    policy_satisfied: bool
    wait_ms: float
    policy: str

    def sources(self, state: str) -> list[str]:
        return [name for name, s in self.states.items() if s == state]


WorkerFn = Callable[[psycopg.Connection], list[SourceHit]]


class Scheduler:
    def __init__(self, db: Database, *, max_workers: int = 8, policy: CompletionPolicy | None = None) -> None:
        self.db = db
        self.policy = policy or CompletionPolicy()
        self._executor = cf.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="memoria-worker")

    def run(self, tasks: Mapping[str, WorkerFn], *, tenant: str, deadline_ms: int) -> SchedulerResult:
        states = {name: SUBMITTED for name in tasks}
        hits: dict[str, list[SourceHit]] = {}
        errors: dict[str, str] = {}
        worker_ms: dict[str, float] = {}
        conns: dict[str, psycopg.Connection] = {}
        lock = threading.Lock()
        stopped = threading.Event()
        start = time.perf_counter()

        def execute(name: str, fn: WorkerFn) -> None:
            t0 = time.perf_counter()
            try:
                # Waiting for a connection counts against the deadline: past it nobody reads the
                # result, and a thread blocked on an exhausted pool would delay the next queries.
                wait = min(self.db.timeout, max(0.0, deadline_ms / 1000.0 - (t0 - start)))
                with self.db.connection(timeout=wait) as conn:
                    with lock:
                        if stopped.is_set():
                            return
                        conns[name] = conn
                    try:
                        with conn.transaction():
                            # The tenant, and the server-side ceiling in case the client-side cancel
                            # is lost, in one round trip.
                            conn.execute("SELECT set_config('memoria.tenant', %s, true), "
                                         "set_config('statement_timeout', %s, true)",
                                         (tenant, str(deadline_ms + 1000)))
                            result = fn(conn)
                    finally:
                        with lock:
                            conns.pop(name, None)
                with lock:
                    if not stopped.is_set():
                        hits[name] = result
                        states[name] = COMPLETED
                        worker_ms[name] = (time.perf_counter() - t0) * 1000
            except Exception as exc:  # a failed worker never fails the query
                with lock:
                    if not stopped.is_set():
                        states[name] = FAILED
                        errors[name] = f"{type(exc).__name__}: {exc}".strip()
                        worker_ms[name] = (time.perf_counter() - t0) * 1000

        futures = {self._executor.submit(execute, name, fn): name for name, fn in tasks.items()}
        cf.wait(futures, timeout=deadline_ms / 1000.0, return_when=cf.ALL_COMPLETED)
        with lock:
            stopped.set()
            for name, state in states.items():
                if state == SUBMITTED:
                    states[name] = PENDING
            to_cancel = list(conns.values())
            final_states = dict(states)
            final_hits = {k: v for k, v in hits.items() if final_states.get(k) == COMPLETED}
        wait_ms = (time.perf_counter() - start) * 1000
        for conn in to_cancel:
            _cancel(conn)
        if to_cancel:
            cf.wait([f for f, n in futures.items() if final_states[n] == PENDING], timeout=CANCEL_GRACE_S)
        if any(s == PENDING for s in final_states.values()):
            reason = "deadline"
        elif any(s == FAILED for s in final_states.values()):
            reason = "completed_with_failures"
        else:
            reason = "all_completed"
        return SchedulerResult(final_hits, final_states, dict(errors), dict(worker_ms), reason,
                               self.policy.satisfied(final_states), wait_ms, self.policy.name)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


def _cancel(conn: psycopg.Connection) -> None:
    try:
        if hasattr(conn, "cancel_safe"):
            conn.cancel_safe(timeout=2.0)
        else:
            conn.cancel()
    except Exception:  # the statement may have finished in between; nothing to cancel
        pass


def run_sequential(tasks: Mapping[str, WorkerFn], db: Database, tenant: str) -> dict[str, list[SourceHit]]:
    """The same workers one after another on one connection (benchmarks compare against this)."""
    out: dict[str, list[SourceHit]] = {}
    with db.transaction(tenant) as conn:
        for name, fn in tasks.items():
            out[name] = fn(conn)
    return out
