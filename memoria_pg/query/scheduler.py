"""The scheduler: runs the submitted workers concurrently on the pool under the completion policy.

A worker that gets no pooled connection in time (the pool timeout, capped by the deadline) ends
`failed` with PoolTimeout, like any other worker failure: a failed worker never fails the query, and
a failed vector leaves the policy unsatisfied. The query itself raises PoolTimeout only when one of
its own statements (entity lookup, relevance pool, final CTE) cannot get a connection.

A cancel reaches only the statement it was meant for: at the deadline the run decides, under its
lock, which workers' statements to cancel; such a worker keeps its connection checked out until the
cancel request has been answered by the server (which has then signalled the backend: a signal that
finds it idle is dropped, one that finds the worker's statement or transaction still running ends
it), so no other caller can be running a statement on that connection when the cancel arrives. A
cancel that failed or was not answered in time may still arrive: that connection is closed, never
returned to the pool.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import psycopg

from ..core.types import SourceHit
from ..db import Database
from ..db.budget import current_budget
from ..db.database import CLOSED, set_tenant
from ..db.pipeline import answered, tenant_block
from ..db.replicas import server_failure
from ..errors import ServerError

T = TypeVar("T")
SUBMITTED, COMPLETED, PENDING, FAILED = "submitted", "completed", "pending", "failed"
CANCEL_GRACE_S = 0.2  # how long to wait for cancelled statements to leave the server
CANCEL_TIMEOUT_S = 2.0  # how long a cancel request may take to be answered
CANCEL_WAIT_S = CANCEL_TIMEOUT_S + 1.0  # how long a worker waits for its cancel before closing its connection


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
    broken: list[str] = field(default_factory=list)  # workers whose server or connection failed

    def sources(self, state: str) -> list[str]:
        return [name for name, s in self.states.items() if s == state]


WorkerFn = Callable[[psycopg.Connection], list[SourceHit]]


@dataclass(frozen=True)
class Task:
    """A worker bound to its query (QueryPipeline.tasks): called with the connection like any WorkerFn,
    and whether its statements run on cached generic plans in their transaction (Worker.generic_plans;
    a plain WorkerFn keeps the pool's custom plans)."""

    run: WorkerFn
    generic_plans: bool = False

    def __call__(self, conn: psycopg.Connection) -> list[SourceHit]:
        return self.run(conn)


@dataclass(frozen=True)
class Parts:
    """One worker's statements split to run at the same time, each part a task on its own pooled
    connection (the vector search of a large tenant's memory types, Worker.parts): still one source
    for the completion policy and in the diagnostics. It completed when every part did (`merge` makes
    its hits from theirs, in part order), failed when one failed and none is still running, and is
    pending while one is; its time is its slowest part's, its errors the parts' together."""

    runs: tuple[WorkerFn, ...]
    merge: Callable[[list[list[SourceHit]]], list[SourceHit]]

    def __call__(self, conn: psycopg.Connection) -> list[SourceHit]:
        """The parts one after another on one connection, merged: the task as a plain WorkerFn (what
        run_sequential and the benchmarks' per-worker passes call)."""
        return self.merge([run(conn) for run in self.runs])

    def names(self, name: str) -> list[str]:
        """The parts' names within the run: `name#1`, `name#2`..."""
        return [f"{name}#{k}" for k in range(1, len(self.runs) + 1)]


class Scheduler:
    def __init__(self, db: Database, *, max_workers: int = 8, policy: CompletionPolicy | None = None) -> None:
        self.db = db
        self.policy = policy or CompletionPolicy()
        self._executor = cf.ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="memoria-worker")

    def run(
        self, tasks: Mapping[str, WorkerFn | Parts], *, tenant: str, deadline_ms: int, db: Database | None = None
    ) -> SchedulerResult:
        """Run every task on its own pooled connection (of `db`, default the scheduler's: a query on a
        standby passes that standby's); return at the deadline or when all ended.

        Inside a query's budget (db/budget.py) the deadline is at most what remains of it, and so is
        each statement's server-side ceiling (else the deadline plus a second); a budget already spent
        is QueryTimeout."""
        return self.start(tasks, tenant=tenant, deadline_ms=deadline_ms, db=db).finish()

    def start(
        self, tasks: Mapping[str, WorkerFn | Parts], *, tenant: str, deadline_ms: int, db: Database | None = None
    ) -> Running:
        """`run` in two steps: the tasks start now, more may be added (`Running.add`, e.g. the vector
        worker once the query is embedded), and `Running.finish` waits under the completion policy. The
        deadline counts from the last `add` (or from here): a task added early may run longer."""
        running = Running(self, db or self.db, tenant, deadline_ms)
        running.add(tasks, restart=False)
        return running

    def submit(self, fn: Callable[..., T], /, *args: Any) -> cf.Future[T]:
        """Run `fn(*args)` on the scheduler's threads in the caller's context (its read target, its
        budget): the query's own work beside its statements, such as its embedding beside its
        processing (QueryPipeline.retrieval_overlapped)."""
        try:
            return self._executor.submit(contextvars.copy_context().run, fn, *args)
        except RuntimeError:  # the executor was shut down: its MemorySystem was closed
            raise ServerError(CLOSED) from None

    def run_sequential(self, tasks: Mapping[str, WorkerFn | Parts], tenant: str) -> dict[str, list[SourceHit]]:
        """The same workers one after another on one connection (benchmarks compare against this); a
        split task's parts one after another too (Parts.__call__)."""
        out: dict[str, list[SourceHit]] = {}
        with self.db.transaction(tenant, implicit=True) as conn:
            for name, fn in tasks.items():
                out[name] = fn(conn)
        return out

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class Running:
    """One scheduler run in progress (Scheduler.start): its tasks run on pooled connections while the
    caller does other work; `finish` ends it under the completion policy."""

    def __init__(self, scheduler: Scheduler, db: Database, tenant: str, deadline_ms: int) -> None:
        self.scheduler, self.policy, self.deadline_ms = scheduler, scheduler.policy, deadline_ms
        self.run = _Run(db, tenant, deadline_ms, deadline_ms + 1000)
        self.tasks: dict[str, WorkerFn | Parts] = {}
        self.futures: dict[cf.Future[None], str] = {}  # each task's (or part's) future: the task's name
        # Each task's (or part's) outcome recorded: its hits (or its failure) are known, though its
        # connection may still be ending its block (_Run.execute). `finish` waits for these.
        self.recorded: list[cf.Future[None]] = []
        self.finished = False
        self._clock(deadline_ms)

    def _clock(self, deadline_ms: int) -> None:
        # Inside a query's budget the deadline and every statement's ceiling are at most what remains
        # of it (QueryTimeout when nothing does); the deadline counts from now.
        ceiling_ms = deadline_ms + 1000
        budget = current_budget()
        if budget is not None:
            left = budget.require_ms()
            deadline_ms, ceiling_ms = min(deadline_ms, left), min(ceiling_ms, left)
        with self.run.lock:
            self.run.deadline_at = time.perf_counter() + deadline_ms / 1000.0
            self.run.ceiling_ms = ceiling_ms

    def add(self, tasks: Mapping[str, WorkerFn | Parts], *, restart: bool = True) -> None:
        """Start more tasks (names not used yet in this run); the deadline restarts from now (even when
        the run had no task yet: the time since `start` was the caller's)."""
        if self.finished:
            raise RuntimeError("this scheduler run has finished")
        if restart:
            self._clock(self.deadline_ms)
        for name, fn in tasks.items():
            if name in self.tasks:
                raise ValueError(f"task {name!r} was already started in this run")
            self.tasks[name] = fn
            runs = zip(fn.names(name), fn.runs) if isinstance(fn, Parts) else [(name, fn)]
            for part, run in runs:
                recorded: cf.Future[None] = cf.Future()
                self.recorded.append(recorded)
                self.futures[self.scheduler._executor.submit(self.run.execute, part, run, recorded)] = name

    def abandon(self) -> None:
        """End the run now (the caller failed before finishing it): statements still running are
        cancelled, nothing is recorded."""
        with self.run.lock:
            self.run.deadline_at = time.perf_counter()
        self.finish()

    def finish(self) -> SchedulerResult:
        """Wait for the tasks until the deadline; the completed ones' hits, every task's state; the
        statements still running are cancelled (module docstring)."""
        self.finished = True
        run = self.run
        cf.wait(self.recorded, timeout=max(0.0, run.deadline_at - time.perf_counter()), return_when=cf.ALL_COMPLETED)
        states, hits, to_cancel = run.stop(self.tasks)
        wait_ms = (time.perf_counter() - run.start) * 1000
        run.cancel(to_cancel)
        if to_cancel:
            cf.wait([f for f, n in self.futures.items() if states[n] == PENDING], timeout=CANCEL_GRACE_S)
        return SchedulerResult(
            hits,
            states,
            dict(run.errors),
            dict(run.worker_ms),
            _finish_reason(states),
            self.policy.satisfied(states),
            wait_ms,
            self.policy.name,
            list(run.broken),
        )


@dataclass
class _Cancel:
    """A cancel the run decided on: `done` is set once it was sent and answered (`sent`) or failed."""

    conn: psycopg.Connection
    done: threading.Event
    sent: bool = False


class _Run:
    """The shared state of one `Scheduler.run`: what each worker thread records under the lock
    until the run stops (at the deadline or when all ended); nothing is recorded after that."""

    def __init__(self, db: Database, tenant: str, deadline_ms: int, ceiling_ms: int) -> None:
        self.db, self.tenant, self.deadline_ms, self.ceiling_ms = db, tenant, deadline_ms, ceiling_ms
        self.states: dict[str, str] = {}
        self.hits: dict[str, list[SourceHit]] = {}
        self.errors: dict[str, str] = {}
        self.worker_ms: dict[str, float] = {}
        self.broken: list[str] = []
        self.conns: dict[str, psycopg.Connection] = {}
        self.cancels: dict[str, _Cancel] = {}  # decided at the stop, under the lock
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.start = time.perf_counter()
        self.deadline_at = self.start + deadline_ms / 1000.0  # Running moves it when tasks are added

    def execute(self, name: str, fn: WorkerFn, recorded: cf.Future[None]) -> None:
        """Run one task and record its outcome, then set `recorded`. A completed task is recorded as soon
        as its statements have answered, before its block ends (_statement): an error after that (the
        connection lost at the block's Sync) changes nothing of what it found."""
        t0 = time.perf_counter()
        try:
            self._statement(name, fn, t0, recorded)
        except Exception as exc:  # a failed worker never fails the query
            if not recorded.done():
                with self.lock:
                    if not self.stopped.is_set():
                        self.states[name] = FAILED
                        self.errors[name] = f"{type(exc).__name__}: {exc}".strip()
                        if server_failure(exc):
                            self.broken.append(name)
                        self.worker_ms[name] = (time.perf_counter() - t0) * 1000
        finally:
            if not recorded.done():
                recorded.set_result(None)

    def _statement(self, name: str, fn: WorkerFn, t0: float, recorded: cf.Future[None]) -> None:
        # Waiting for a connection counts against the deadline: past it nobody reads the result,
        # and a thread blocked on an exhausted pool would delay the next queries.
        with self.lock:
            deadline_at, ceiling_ms = self.deadline_at, self.ceiling_ms
        wait = min(self.db.timeout, max(0.0, deadline_at - t0))
        with self.db.connection(timeout=wait, app_role=False) as conn:
            with self.lock:
                if self.stopped.is_set():
                    return
                self.conns[name] = conn
            try:
                # The transaction of the pipeline's statements (db/pipeline.tenant_block): no BEGIN
                # or COMMIT round trip. The tenant, the role (Database.connection's app_role), the
                # server-side ceiling in case the client-side cancel is lost, and the worker's plan
                # mode (generic or custom plans: set_tenant) go with the worker's first statement.
                with tenant_block(conn, implicit=True) as block:
                    set_tenant(
                        conn, self.tenant, generic_plans=getattr(fn, "generic_plans", False),
                        statement_timeout_ms=ceiling_ms,
                    )  # fmt: skip
                    hits = fn(conn)
                    # Every statement answered: recorded before the block ends, so the run does not
                    # wait for its Sync's round trip (a transaction of reads has nothing to commit;
                    # Database.transaction's background_end does the same for the query's own blocks).
                    # A task that left a result unread is recorded once the block has ended.
                    if answered(block):
                        self._completed(name, hits, t0, recorded)
                if not recorded.done():
                    self._completed(name, hits, t0, recorded)
            finally:
                self._release(name, conn)

    def _completed(self, name: str, hits: list[SourceHit], t0: float, recorded: cf.Future[None]) -> None:
        """A task's hits, unless the run stopped meanwhile (its connection then has no statement left to
        cancel); `recorded` is set either way."""
        with self.lock:
            if not self.stopped.is_set():
                self.hits[name] = hits
                self.states[name] = COMPLETED
                self.worker_ms[name] = (time.perf_counter() - t0) * 1000
                self.conns.pop(name, None)
        recorded.set_result(None)

    def _release(self, name: str, conn: psycopg.Connection) -> None:
        """Before the connection goes back to the pool: if the run decided to cancel its statement,
        wait until the cancel was answered; close it if the cancel failed or took too long."""
        with self.lock:
            self.conns.pop(name, None)
            cancel = self.cancels.get(name)
        if cancel is not None and not (cancel.done.wait(CANCEL_WAIT_S) and cancel.sent):
            conn.close()  # a cancel that may still arrive must not reach the pool's next borrower

    def stop(
        self, tasks: Mapping[str, WorkerFn | Parts]
    ) -> tuple[dict[str, str], dict[str, list[SourceHit]], list[str]]:
        """Stop recording: the final states (unfinished ones pending), the completed sources' hits,
        and the tasks (or parts) whose statements are still running, to be cancelled (`cancel`). A
        split task's parts become the task again (Parts), in its state, hits, errors and time."""
        with self.lock:
            self.stopped.set()
            states: dict[str, str] = {}
            hits: dict[str, list[SourceHit]] = {}
            for name, fn in tasks.items():
                if isinstance(fn, Parts):
                    states[name] = self._join(name, fn)
                else:
                    states[name] = self.states.get(name, PENDING)
                if states[name] == COMPLETED:
                    hits[name] = self.hits[name]
            self.cancels = {name: _Cancel(conn, threading.Event()) for name, conn in self.conns.items()}
            return states, hits, list(self.cancels)

    def _join(self, name: str, parts: Parts) -> str:
        """A split task's state from its parts' (Parts), its hits, time and errors recorded under its
        name (under the lock)."""
        names = parts.names(name)
        found = [self.states.get(part, PENDING) for part in names]
        state = COMPLETED if all(f == COMPLETED for f in found) else PENDING if PENDING in found else FAILED
        if state == COMPLETED:
            self.hits[name] = parts.merge([self.hits[part] for part in names])
        times = [self.worker_ms.pop(part) for part in names if part in self.worker_ms]
        if times and state != PENDING:
            self.worker_ms[name] = max(times)
        errors = [self.errors.pop(part) for part in names if part in self.errors]
        if errors:
            self.errors[name] = "; ".join(errors)
        if any(part in self.broken for part in names):
            self.broken = [b for b in self.broken if b not in names] + [name]
        return state

    def cancel(self, names: list[str]) -> None:
        """Cancel the statements `stop` listed; each worker holds its connection until then."""
        try:
            for name in names:
                cancel = self.cancels[name]
                cancel.sent = _cancel(cancel.conn)
                cancel.done.set()
        finally:
            for cancel in self.cancels.values():
                cancel.done.set()


def _finish_reason(states: Mapping[str, str]) -> str:
    if any(s == PENDING for s in states.values()):
        return "deadline"
    if any(s == FAILED for s in states.values()):
        return "completed_with_failures"
    return "all_completed"


def _cancel(conn: psycopg.Connection) -> bool:
    """Send a cancel request; True once the server answered it. libpq waits for the server to close
    the cancel connection, which it does after signalling the backend (libpq: "without this delay,
    we might issue another command only to find that our cancel zaps that command")."""
    try:
        conn.cancel_safe(timeout=CANCEL_TIMEOUT_S)
    except Exception:  # the connection broke, the request failed or timed out: it may still arrive
        return False
    return True
