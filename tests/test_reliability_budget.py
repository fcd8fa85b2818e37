"""Issue 15, point 8: one budget for a query's statements, enforced by the server on each of them.

Each of the query's own statements is blocked in turn by a lock another connection holds (a worker's
pg_sleep would not reach them): the entity lookup (memoria.entities), the relevance pool
(memoria.memories, which the lookup does not read), the final CTE (memoria.memory_access, which no
worker reads). Each is QueryTimeout, the driver's QueryCanceled chained, well before the 20 s
statement_timeout. The access statistics are best effort: a lock on memory_access or a spent budget
is reported in the diagnostics (when the query waits for that write, access_statistics_wait) or the
log (when it does not, the default), and the query answers.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence

import numpy as np
import psycopg
import pytest

from memoria_pg import Config, ConfigError, HashEmbedder, MemorySystem, PoolTimeout, QueryTimeout
from memoria_pg.core.types import SourceHit
from memoria_pg.db.budget import query_budget
from memoria_pg.query.scheduler import Scheduler

BUDGET_MS = 400
FAST_S = 3.0  # a blocked statement must end the query this soon (the statement_timeout is 20 s)


@pytest.fixture
def budget_config(dsn: str) -> Config:
    # The query waits for its access-statistics write, so that its failures are in the diagnostics
    # (access_statistics_wait); the default, which does not wait, is tested at the end. The pool is
    # full from the start (see `stored`): on a loaded CI machine a connection once took longer than
    # the budget to open, and a query then ended on PoolTimeout (a budget too, but not what is tested).
    return Config(
        dsn=dsn, pool_min_size=4, pool_max_size=4, statement_timeout_ms=20_000, query_timeout_ms=BUDGET_MS,
        access_statistics_wait=True,
    )  # fmt: skip


@pytest.fixture
def stored(budget_config: Config) -> Iterator[MemorySystem]:
    with MemorySystem(budget_config, embedder=HashEmbedder()) as system:
        system.db.pool.wait(timeout=30)  # what is tested is blocked statements, not opening connections
        system.store("Alice lives in Paris and likes green tea", tenant="t", memory_type="preference", pinned=True)
        system.store("Bob works at Acme in Berlin", tenant="t")
        yield system


@pytest.fixture
def locker(dsn: str) -> Iterator[psycopg.Connection]:
    """Another connection (the superuser's), whose transaction holds the locks a test takes."""
    conn = psycopg.connect(dsn)
    yield conn
    conn.rollback()
    conn.close()


def timed_query(system: MemorySystem, text: str, **kwargs: object) -> tuple[BaseException | None, float]:
    started = time.monotonic()
    try:
        system.query(text, tenant="t", **kwargs)  # type: ignore[arg-type]
    except BaseException as exc:  # what the tests are about
        return exc, time.monotonic() - started
    return None, time.monotonic() - started


def assert_query_timeout(error: BaseException | None, elapsed: float) -> None:
    assert isinstance(error, QueryTimeout), repr(error)
    assert isinstance(error.__cause__, psycopg.errors.QueryCanceled)
    assert f"budget of {BUDGET_MS} ms" in str(error)
    assert elapsed < FAST_S


def test_a_blocked_entity_lookup_is_a_query_timeout(stored: MemorySystem, locker: psycopg.Connection) -> None:
    locker.execute("LOCK TABLE memoria.entities IN ACCESS EXCLUSIVE MODE")
    assert_query_timeout(*timed_query(stored, "where does Alice live"))


def test_a_blocked_relevance_pool_is_a_query_timeout(stored: MemorySystem, locker: psycopg.Connection) -> None:
    locker.execute("LOCK TABLE memoria.memories IN ACCESS EXCLUSIVE MODE")
    error, elapsed = timed_query(stored, "green tea", memory_type="preference")  # a typed query: the pool runs
    assert_query_timeout(error, elapsed)


def test_a_blocked_final_cte_is_a_query_timeout(stored: MemorySystem, locker: psycopg.Connection) -> None:
    locker.execute("LOCK TABLE memoria.memory_access IN ACCESS EXCLUSIVE MODE")
    assert_query_timeout(*timed_query(stored, "Bob Acme Berlin"))


def test_no_connection_within_the_budget_is_a_query_timeout(dsn: str) -> None:
    config = Config(dsn=dsn, pool_min_size=1, pool_max_size=1, pool_timeout=30.0, query_timeout_ms=BUDGET_MS)
    with MemorySystem(config, embedder=HashEmbedder()) as system, system.db.connection():  # the only one
        error, elapsed = timed_query(system, "anything at all")
    assert isinstance(error, QueryTimeout), repr(error)
    assert isinstance(error.__cause__, PoolTimeout)
    assert elapsed < FAST_S


def test_workers_run_under_what_remains_of_the_budget(stored: MemorySystem) -> None:
    seen: list[str] = []

    def setting(conn: psycopg.Connection) -> list[SourceHit]:
        seen.append(conn.execute("SELECT current_setting('statement_timeout')").fetchone()[0])
        conn.execute("SELECT pg_sleep(5)")
        return []

    scheduler = Scheduler(stored.db, max_workers=2)
    try:
        started = time.monotonic()
        with query_budget(300):
            result = scheduler.run({"vector": setting}, tenant="t", deadline_ms=2000)
        elapsed = time.monotonic() - started
    finally:
        scheduler.close()
    assert result.states == {"vector": "pending"}  # the deadline became the budget's 300 ms
    assert elapsed < 1.5
    assert seen and int(seen[0].removesuffix("ms")) <= 300


def test_a_locked_access_table_is_reported_and_the_query_answers(
    stored: MemorySystem, locker: psycopg.Connection
) -> None:
    locker.execute("LOCK TABLE memoria.memory_access IN SHARE MODE")  # reads pass, the upsert waits
    started = time.monotonic()
    response = stored.query("Bob Acme Berlin", tenant="t")
    assert time.monotonic() - started < FAST_S
    assert response.memories
    error = response.diagnostics.access_error
    assert error is not None and error.startswith("LockNotAvailable")
    assert response.diagnostics.as_dict()["access_error"] == error
    locker.rollback()
    again = stored.query("Bob Acme Berlin", tenant="t")
    assert again.diagnostics.access_error is None
    with psycopg.connect(stored.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memoria.memory_access").fetchone()[0] > 0


def test_a_row_lock_on_access_statistics_is_reported(stored: MemorySystem, locker: psycopg.Connection) -> None:
    stored.query("Bob Acme Berlin", tenant="t")  # the rows exist
    locker.execute("SELECT * FROM memoria.memory_access FOR UPDATE")
    response = stored.query("Bob Acme Berlin", tenant="t")
    assert response.memories
    assert (response.diagnostics.access_error or "").startswith("LockNotAvailable")


def test_a_budget_spent_before_the_access_upsert_is_reported(
    stored: MemorySystem, monkeypatch: pytest.MonkeyPatch
) -> None:
    rank = stored.pipeline.rank

    def slow_rank(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(BUDGET_MS / 1000 + 0.1)  # the statements are done; the budget runs out here
        return rank(*args, **kwargs)

    monkeypatch.setattr(stored.pipeline, "rank", slow_rank)
    response = stored.query("Bob Acme Berlin", tenant="t")
    assert response.memories
    assert (response.diagnostics.access_error or "").startswith("QueryTimeout")


class SlowEmbedder(HashEmbedder):
    """Computing a vector takes longer than the whole budget (as loading a model may)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        time.sleep(BUDGET_MS / 1000 + 0.2)
        return super().embed(texts)


def test_the_embedding_is_not_counted(budget_config: Config) -> None:
    with MemorySystem(budget_config, embedder=SlowEmbedder()) as system:
        system.store("Carol sings in a choir", tenant="t", embedding=HashEmbedder().embed(["x"])[0])
        response = system.query("who sings", tenant="t")
    assert response.memories and response.diagnostics.access_error is None


def test_the_budget_is_a_setting() -> None:
    assert Config().query_timeout_ms == 10_000
    assert Config.from_env({"MEMORIA_QUERY_TIMEOUT_MS": "1500"}).query_timeout_ms == 1500
    with pytest.raises(ConfigError, match="query_timeout_ms"):
        Config(query_timeout_ms=0)


def test_queries_beside_a_held_lock_do_not_wait_for_each_other(
    stored: MemorySystem, locker: psycopg.Connection
) -> None:
    """Several blocked queries at once each end at their own budget, not one after the other."""
    locker.execute("LOCK TABLE memoria.entities IN ACCESS EXCLUSIVE MODE")
    outcomes: list[tuple[BaseException | None, float]] = []
    threads = [threading.Thread(target=lambda: outcomes.append(timed_query(stored, "where does Alice live")))]
    threads += [threading.Thread(target=lambda: outcomes.append(timed_query(stored, "what does Bob like")))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(outcomes) == 2
    for error, elapsed in outcomes:
        assert_query_timeout(error, elapsed)


def test_a_write_behind_access_failure_is_logged_and_the_query_does_not_wait(
    budget_config: Config, locker: psycopg.Connection, caplog: pytest.LogCaptureFixture
) -> None:
    """By default a ranked query does not wait for its access-statistics write: with the table locked
    the query answers at once and reports nothing, the write fails after it (its lock timeout) and
    says so in the log; once the lock is gone the next query's write is recorded."""
    with MemorySystem(budget_config.replace(access_statistics_wait=False), embedder=HashEmbedder()) as system:
        system.store("Bob works at Acme in Berlin", tenant="t")
        locker.execute("LOCK TABLE memoria.memory_access IN SHARE MODE")  # reads pass, the upsert waits
        with caplog.at_level(logging.WARNING, logger="memoria_pg.query.pipeline"):
            response = system.query("Bob Acme Berlin", tenant="t")
            assert response.memories and response.diagnostics.access_error is None
            assert system.settle(5)
        (record,) = [r for r in caplog.records if "access statistics" in r.getMessage()]
        assert "LockNotAvailable" in record.getMessage()
        locker.rollback()
        system.query("Bob Acme Berlin", tenant="t")
        assert system.settle(5)
        with psycopg.connect(system.dsn) as conn:
            assert conn.execute("SELECT sum(access_count) FROM memoria.memory_access").fetchone()[0] == 1


def test_with_too_many_blocks_ending_in_the_background_the_query_waits_for_its_access_write(
    budget_config: Config, locker: psycopg.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes slowed by lock waits must not pin the pool: with WRITE_BEHIND_MAX blocks already ending in
    the background (here 0), a ranked query waits for its access write, and reports its failure."""
    from memoria_pg.query import pipeline

    monkeypatch.setattr(pipeline, "WRITE_BEHIND_MAX", 0)
    with MemorySystem(budget_config.replace(access_statistics_wait=False), embedder=HashEmbedder()) as system:
        system.store("Bob works at Acme in Berlin", tenant="t")
        locker.execute("LOCK TABLE memoria.memory_access IN SHARE MODE")
        response = system.query("Bob Acme Berlin", tenant="t")
        assert response.memories
        assert (response.diagnostics.access_error or "").startswith("LockNotAvailable")
