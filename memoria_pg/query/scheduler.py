"""The scheduler: runs the submitted workers concurrently on the pool under the completion policy.

A worker that gets no pooled connection in time (the pool timeout, capped by the deadline) ends
`failed` with PoolTimeout, like any other worker failure: a failed worker never fails the query, and
a failed vector leaves the policy unsatisfied. The query itself raises PoolTimeout only when one of
its own statements (entity lookup, relevance pool, final CTE) cannot get a connection.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import psycopg

from ..core.types import SourceHit
from ..db import Database

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
        return self.done(states) and all(states[name] == COMPLETED for name in self.required if name in states)


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
        """Run every task on its own pooled connection; return at the deadline or when all ended."""
        run = _Run(self.db, tenant, deadline_ms)
        futures = {self._executor.submit(run.execute, name, fn): name for name, fn in tasks.items()}
        cf.wait(futures, timeout=deadline_ms / 1000.0, return_when=cf.ALL_COMPLETED)
        states, hits, to_cancel = run.stop(tasks)
        wait_ms = (time.perf_counter() - run.start) * 1000
        for conn in to_cancel:
            _cancel(conn)
        if to_cancel:
            cf.wait([f for f, n in futures.items() if states[n] == PENDING], timeout=CANCEL_GRACE_S)
        return SchedulerResult(
            hits,
            states,
            dict(run.errors),
            dict(run.worker_ms),
            _finish_reason(states),
            self.policy.satisfied(states),
            wait_ms,
            self.policy.name,
        )

    def run_sequential(self, tasks: Mapping[str, WorkerFn], tenant: str) -> dict[str, list[SourceHit]]:
        """The same workers one after another on one connection (benchmarks compare against this)."""
        out: dict[str, list[SourceHit]] = {}
        with self.db.transaction(tenant) as conn:
            for name, fn in tasks.items():
                out[name] = fn(conn)
        return out

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class _Run:
    """The shared state of one `Scheduler.run`: what each worker thread records under the lock
    until the run stops (at the deadline or when all ended); nothing is recorded after that."""

    def __init__(self, db: Database, tenant: str, deadline_ms: int) -> None:
        self.db, self.tenant, self.deadline_ms = db, tenant, deadline_ms
        self.states: dict[str, str] = {}
        self.hits: dict[str, list[SourceHit]] = {}
        self.errors: dict[str, str] = {}
        self.worker_ms: dict[str, float] = {}
        self.conns: dict[str, psycopg.Connection] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.start = time.perf_counter()

    def execute(self, name: str, fn: WorkerFn) -> None:
        t0 = time.perf_counter()
        try:
            result = self._statement(name, fn, t0)
            if result is None:
                return
            with self.lock:
                if not self.stopped.is_set():
                    self.hits[name] = result
                    self.states[name] = COMPLETED
                    self.worker_ms[name] = (time.perf_counter() - t0) * 1000
        except Exception as exc:  # a failed worker never fails the query
            with self.lock:
                if not self.stopped.is_set():
                    self.states[name] = FAILED
                    self.errors[name] = f"{type(exc).__name__}: {exc}".strip()
                    self.worker_ms[name] = (time.perf_counter() - t0) * 1000

    def _statement(self, name: str, fn: WorkerFn, t0: float) -> list[SourceHit] | None:
        # Waiting for a connection counts against the deadline: past it nobody reads the result,
        # and a thread blocked on an exhausted pool would delay the next queries.
        wait = min(self.db.timeout, max(0.0, self.deadline_ms / 1000.0 - (t0 - self.start)))
        with self.db.connection(timeout=wait) as conn:
            with self.lock:
                if self.stopped.is_set():
                    return None
                self.conns[name] = conn
            try:
                with conn.transaction():
                    # The tenant, and the server-side ceiling in case the client-side cancel is
                    # lost, in one round trip.
                    conn.execute(
                        "SELECT set_config('memoria.tenant', %s, true), set_config('statement_timeout', %s, true)",
                        (self.tenant, str(self.deadline_ms + 1000)),
                    )
                    return fn(conn)
            finally:
                with self.lock:
                    self.conns.pop(name, None)

    def stop(
        self, tasks: Mapping[str, WorkerFn]
    ) -> tuple[dict[str, str], dict[str, list[SourceHit]], list[psycopg.Connection]]:
        """Stop recording: the final states (unfinished ones pending), the completed sources' hits,
        and the connections still running a statement."""
        with self.lock:
            self.stopped.set()
            states = {name: self.states.get(name, PENDING) for name in tasks}
            hits = {k: v for k, v in self.hits.items() if states.get(k) == COMPLETED}
            return states, hits, list(self.conns.values())


def _finish_reason(states: Mapping[str, str]) -> str:
    if any(s == PENDING for s in states.values()):
        return "deadline"
    if any(s == FAILED for s in states.values()):
        return "completed_with_failures"
    return "all_completed"


def _cancel(conn: psycopg.Connection) -> None:
    with contextlib.suppress(Exception):  # the statement may have finished in between: nothing to cancel
        conn.cancel_safe(timeout=2.0)
