"""A read block whose statements have all answered ends (its Sync, the connection's return to the pool)
after its caller goes on: Database.transaction(..., background_end=True) for the query's own reads, and
the scheduler for its workers, which count as completed once their results are in. A body that raises or
leaves a result unread ends in place, as before; Database.close waits for the ends still running.

The ends are held at a gate the test opens, so what is asserted is an order of events, not a time."""

from __future__ import annotations

import contextlib
import threading
import time

import psycopg
import pytest

from memoria_pg.core.types import SourceHit
from memoria_pg.db import Database, database
from memoria_pg.db.pipeline import SUPPORTED
from memoria_pg.errors import PoolTimeout
from memoria_pg.query import scheduler as scheduler_module
from memoria_pg.query.scheduler import Scheduler

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="libpq without pipeline mode: the explicit transaction is used")

GATE_S = 10.0  # how long a held end waits for the gate (the test opens it long before)


@pytest.fixture
def one_connection(system):
    """A pool of one connection: while a block has not ended, nobody else can borrow it."""
    db = Database(system.config.dsn, min_size=1, max_size=1)
    yield db
    db.close()


class Gate:
    """Holds each block end until `open`; records the ends that ran."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.ended = threading.Event()
        self.calls = 0
        self.finished = 0

    def hold(self, end):
        def held(*args, **kwargs):
            self.calls += 1
            self.gate.wait(GATE_S)
            try:
                return end(*args, **kwargs)
            finally:
                self.finished += 1
                self.ended.set()

        return held

    def open(self) -> None:
        self.gate.set()


@pytest.fixture
def held_ends(monkeypatch):
    gate = Gate()
    monkeypatch.setattr(database, "_end_block", gate.hold(database._end_block))
    yield gate
    gate.open()


def test_a_read_block_ends_after_its_caller_went_on(one_connection, held_ends):
    with one_connection.transaction("a", implicit=True, background_end=True) as conn:
        pid, tenant = conn.execute("SELECT pg_backend_pid(), current_setting('memoria.tenant')").fetchone()
    assert tenant == "a"
    assert not held_ends.ended.is_set()  # the caller is here, the block's end is held
    with pytest.raises(PoolTimeout):  # the block's connection is not back in the pool before its end
        with one_connection.connection(timeout=0.2):
            pass
    held_ends.open()
    assert held_ends.ended.wait(GATE_S)
    with one_connection.connection() as conn:
        again, setting = conn.execute("SELECT pg_backend_pid(), current_setting('memoria.tenant', true)").fetchone()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert again == pid, "the same connection, back in the pool"
    assert not setting, "the tenant ended with the block"


def test_a_block_that_left_a_result_unread_ends_in_place(one_connection, held_ends):
    with one_connection.transaction("a", implicit=True, background_end=True) as conn:
        conn.execute("SELECT 1")  # sent, never fetched: it runs at the block's Sync
    assert held_ends.calls == 0
    with one_connection.connection(timeout=2) as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_block_whose_body_raised_ends_in_place_with_the_error(one_connection, held_ends):
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        with one_connection.transaction("a", implicit=True, background_end=True) as conn:
            conn.execute("SELECT 'not a number'::int").fetchall()
    assert held_ends.calls == 0
    with one_connection.connection(timeout=2) as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert conn.execute("SELECT 2").fetchone()[0] == 2


def test_close_waits_for_the_ends_still_running(system, held_ends):
    db = Database(system.config.dsn, min_size=1, max_size=2)
    with db.transaction("a", implicit=True, background_end=True) as conn:
        conn.execute("SELECT 1").fetchall()
    assert not held_ends.ended.is_set()
    threading.Timer(0.2, held_ends.open).start()
    db.close()
    assert held_ends.ended.is_set(), "close returned before the block had ended"


def test_a_query_returns_before_its_blocks_end(system, held_ends):
    system.store("a memory about the harbour lighthouse", tenant="t")
    found = system.query("harbour lighthouse", tenant="t", ranking=False, candidates=False, top_k=3)
    assert [m.content for m in found.memories] == ["a memory about the harbour lighthouse"]
    assert not held_ends.ended.is_set()  # the query returned; none of its blocks has ended
    held_ends.open()
    deadline = time.monotonic() + GATE_S
    while held_ends.finished < 2 and time.monotonic() < deadline:  # the lookup's block and the final CTE's
        time.sleep(0.02)
    assert held_ends.finished >= 2


def test_a_worker_counts_as_completed_before_its_block_ends(system, monkeypatch):
    """The scheduler records a task whose statements answered before its block's Sync: a run does not
    wait for that end (held here until after the run returned)."""
    gate, exited = threading.Event(), threading.Event()
    real = scheduler_module.tenant_block

    @contextlib.contextmanager
    def held_block(conn, implicit):
        with real(conn, implicit) as block:
            yield block
            gate.wait(GATE_S)  # the block's end waits here, after the body
        exited.set()

    monkeypatch.setattr(scheduler_module, "tenant_block", held_block)

    def answered(conn: psycopg.Connection) -> list[SourceHit]:
        conn.execute("SELECT 1").fetchall()
        return [SourceHit(memory_id=1, source="vector", rank=1, score=0.5)]

    def unread(conn: psycopg.Connection) -> list[SourceHit]:
        conn.execute("SELECT 1")  # its answer comes with the block's end
        return [SourceHit(memory_id=2, source="bm25", rank=1, score=0.5)]

    s = Scheduler(system.db, max_workers=2)
    try:
        result = s.run({"vector": answered}, tenant="t", deadline_ms=5000)
        assert result.states == {"vector": "completed"} and not exited.is_set()
        gate.set()
        assert exited.wait(GATE_S)
        exited.clear()
        result = s.run({"bm25": unread}, tenant="t", deadline_ms=5000)
        assert result.states == {"bm25": "completed"} and exited.is_set(), "recorded only once its block ended"
    finally:
        gate.set()
        s.close()
