"""Issue 15, point 1: a deadline cancel reaches only the statement it was meant for.

The interleaving of the bug, forced with events: a worker is still running when the deadline stops
the run (so its connection is to be cancelled), finishes just after, while another caller waits for a
connection of the same one-connection pool. Before the fix the worker returned its connection at
once, the waiting caller started a statement on it, and the scheduler's cancel, sent a moment later,
cancelled that caller's statement instead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest

from memoria_pg.core.types import SourceHit
from memoria_pg.db import Database
from memoria_pg.query import scheduler as scheduler_module
from memoria_pg.query.scheduler import Scheduler

OTHER_SQL = "SELECT pg_sleep(0.3) /* the other caller */"


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Poll `condition` (a server or pool state, which no event reports) until true or `timeout`."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def other_statement_running(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND query = %s", (OTHER_SQL,)
        ).fetchone()
    return bool(row and row[0])


@pytest.fixture
def one_connection_db(dsn: str) -> Iterator[Database]:
    db = Database(dsn, min_size=1, max_size=1, timeout=10.0)
    yield db
    db.close()


def test_a_worker_finishing_after_the_deadline_keeps_its_connection_until_its_cancel(
    one_connection_db: Database, dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = one_connection_db
    scheduler = Scheduler(db, max_workers=2)
    worker_has_connection, stopped = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def worker(conn: psycopg.Connection) -> list[SourceHit]:
        conn.execute("SELECT 1")
        worker_has_connection.set()
        stopped.wait(10)  # still running at the deadline; finishes right after the stop
        return [SourceHit(memory_id=1, source="vector", rank=1, score=0.1)]

    real_stop = scheduler_module._Run.stop

    def stop(self, tasks):  # type: ignore[no-untyped-def]
        # The other caller is queued for the pool's only connection before the deadline decision.
        seen["caller_waiting"] = wait_until(lambda: db.pool.get_stats().get("requests_waiting", 0) >= 1, 5.0)
        result = real_stop(self, tasks)
        stopped.set()
        return result

    real_cancel = scheduler_module._cancel

    def cancel(conn: psycopg.Connection) -> bool:
        # Give the other caller every chance to be running its statement on this connection when the
        # cancel goes out (the old scheduler let it; the fixed one holds the connection until here).
        seen["other_running_at_cancel"] = wait_until(lambda: other_statement_running(dsn), 1.0)
        return real_cancel(conn)

    monkeypatch.setattr(scheduler_module._Run, "stop", stop)
    monkeypatch.setattr(scheduler_module, "_cancel", cancel)

    def other_caller() -> None:
        worker_has_connection.wait(10)
        try:
            with db.transaction("t") as conn:
                conn.execute(OTHER_SQL)
            seen["other"] = "ok"
        except Exception as exc:  # what the test is about: the other caller's statement cancelled
            seen["other"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=other_caller)
    thread.start()
    try:
        result = scheduler.run({"vector": worker}, tenant="t", deadline_ms=200)
    finally:
        stopped.set()
        thread.join(20)
        scheduler.close()

    assert seen["caller_waiting"] is True
    assert result.states == {"vector": "pending"}  # finished after the deadline: not recorded
    assert seen["other"] == "ok"  # the other caller's statement was not cancelled
    assert seen["other_running_at_cancel"] is False  # nobody else had the connection when it was cancelled
    with db.transaction("t") as conn:  # the pool's connection is healthy afterwards
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_a_connection_whose_cancel_failed_is_not_returned_to_the_pool(
    one_connection_db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancel that failed (or was not answered in time) may still arrive: its connection is closed."""
    db = one_connection_db
    scheduler = Scheduler(db, max_workers=2)
    with db.connection() as conn:
        first_pid = conn.info.backend_pid
    stopped = threading.Event()

    def worker(conn: psycopg.Connection) -> list[SourceHit]:
        conn.execute("SELECT 1")
        stopped.wait(10)
        return []

    real_stop = scheduler_module._Run.stop

    def stop(self, tasks):  # type: ignore[no-untyped-def]
        result = real_stop(self, tasks)
        stopped.set()
        return result

    monkeypatch.setattr(scheduler_module._Run, "stop", stop)
    monkeypatch.setattr(scheduler_module, "_cancel", lambda conn: False)
    try:
        result = scheduler.run({"vector": worker}, tenant="t", deadline_ms=100)
        assert result.states == {"vector": "pending"}
        with db.connection(timeout=10) as conn:  # a new connection replaced the closed one
            assert conn.info.backend_pid != first_pid
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        stopped.set()
        scheduler.close()
