"""The scheduler's completion policy on a real server: deadline, cancellation, failures, required vector."""

from __future__ import annotations

import dataclasses
import threading
import time

import numpy as np
import psycopg
import pytest

from memoria_pg.core.types import SourceHit
from memoria_pg.db import Database
from memoria_pg.query.diagnostics import Diagnostics
from memoria_pg.query.pipeline import QueryRequest
from memoria_pg.query.scheduler import CompletionPolicy, Parts, Scheduler, Task
from memoria_pg.query.workers import DEFAULT_WORKERS
from memoria_pg.query.workers.bm25 import BM25Worker
from memoria_pg.query.workers.phrase import PhraseWorker

SLEEP_SQL = "SELECT pg_sleep(5) /* memoria scheduler test */"


@pytest.fixture
def scheduler(system):
    s = Scheduler(system.db, max_workers=4)
    yield s
    s.close()


def one_hit(source: str):
    def task(conn: psycopg.Connection) -> list[SourceHit]:
        conn.execute("SELECT 1")
        return [SourceHit(memory_id=1, source=source, rank=1, score=0.5)]

    return task


def sleeper(conn: psycopg.Connection) -> list[SourceHit]:
    conn.execute(SLEEP_SQL)
    return [SourceHit(memory_id=2, source="slow", rank=1, score=1.0)]


def broken(conn: psycopg.Connection) -> list[SourceHit]:
    raise RuntimeError("worker exploded")


def active_sleepers(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() "
            "AND query LIKE '%%pg_sleep(5) /* memoria scheduler test%%'"
        ).fetchone()[0]


def test_deadline_leaves_slow_task_pending_and_cancels_it(system, scheduler, dsn):
    scheduler.run({"vector": one_hit("vector"), "bm25": one_hit("bm25")}, tenant="t", deadline_ms=5000)  # warm pool
    started = time.monotonic()
    result = scheduler.run({"vector": one_hit("vector"), "slow": sleeper}, tenant="t", deadline_ms=300)
    elapsed = time.monotonic() - started

    assert result.states == {"vector": "completed", "slow": "pending"}
    assert result.finish_reason == "deadline"
    assert list(result.hits) == ["vector"]
    assert result.sources("pending") == ["slow"]
    assert not result.policy_satisfied
    assert elapsed < 3.0  # the 5 s statement did not hold the query

    deadline = time.monotonic() + 2.0
    while active_sleepers(dsn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert active_sleepers(dsn) == 0

    with system.db.transaction("t") as conn:  # the cancelled connection came back healthy
        assert conn.execute("SELECT current_setting('memoria.tenant')").fetchone()[0] == "t"
    again = scheduler.run({name: one_hit(name) for name in ("vector", "bm25", "graph")}, tenant="t", deadline_ms=2000)
    assert again.finish_reason == "all_completed"


def test_failed_task_does_not_stop_the_others(scheduler):
    result = scheduler.run(
        {"vector": one_hit("vector"), "bm25": broken, "phrase": one_hit("phrase")}, tenant="t", deadline_ms=2000
    )
    assert result.states == {"vector": "completed", "bm25": "failed", "phrase": "completed"}
    assert result.finish_reason == "completed_with_failures"
    assert result.policy_satisfied  # vector completed; a failed auxiliary source is tolerated
    assert set(result.hits) == {"vector", "phrase"}
    assert "RuntimeError: worker exploded" in result.errors["bm25"]


def test_sql_error_fails_the_task_and_its_connection_is_reusable(system, scheduler):
    def division(conn):
        conn.execute("SELECT 1 / 0")
        return []

    result = scheduler.run({"vector": one_hit("vector"), "bm25": division}, tenant="t", deadline_ms=2000)
    assert result.states["bm25"] == "failed"
    assert "DivisionByZero" in result.errors["bm25"]
    for _ in range(system.db.pool.max_size):
        with system.db.transaction("t") as conn:
            assert conn.execute("SELECT 1").fetchone()[0] == 1


def test_failing_vector_leaves_the_policy_unsatisfied(scheduler):
    result = scheduler.run({"vector": broken, "bm25": one_hit("bm25")}, tenant="t", deadline_ms=2000)
    assert result.states == {"vector": "failed", "bm25": "completed"}
    assert not result.policy_satisfied
    assert list(result.hits) == ["bm25"]


def test_all_completing_is_all_completed(scheduler):
    names = ("vector", "bm25", "fusion", "graph")
    result = scheduler.run({n: one_hit(n) for n in names}, tenant="t", deadline_ms=2000)
    assert result.finish_reason == "all_completed"
    assert result.policy_satisfied
    assert result.sources("completed") == list(names)
    assert set(result.worker_ms) == set(names)
    assert result.policy == CompletionPolicy().name


def test_tasks_run_as_the_app_role_under_the_tenant(scheduler):
    seen = {}

    def whoami(conn):
        seen.update(
            zip(
                ("user", "tenant", "timeout"),
                conn.execute(
                    "SELECT current_user, current_setting('memoria.tenant'), current_setting('statement_timeout')"
                ).fetchone(),
            )
        )
        return []

    scheduler.run({"vector": whoami}, tenant="acme", deadline_ms=700)
    assert seen == {"user": "memoria_app", "tenant": "acme", "timeout": "1700ms"}


def test_tasks_run_concurrently(scheduler):
    # Both tasks wait at one barrier: it only opens when they run at the same time.
    barrier = threading.Barrier(2, timeout=5)

    def meet(conn):
        conn.execute("SELECT 1")
        barrier.wait()
        return []

    result = scheduler.run({"vector": meet, "bm25": meet}, tenant="t", deadline_ms=8000)
    assert result.states == {"vector": "completed", "bm25": "completed"}


# -- through the query pipeline ----------------------------------------------------------------------


class SleepyPhrase(PhraseWorker):
    def statements(self, ctx):
        return [(SLEEP_SQL, {})]


class BrokenBM25(BM25Worker):
    def statements(self, ctx):
        return [("SELECT memory_id FROM memoria.no_such_table", {})]


def test_pipeline_reports_pending_and_failed_sources(config, dsn):
    from memoria_pg.core.embedding import HashEmbedder
    from memoria_pg.system import MemorySystem

    registry = DEFAULT_WORKERS.replace(SleepyPhrase, BrokenBM25)
    with MemorySystem(
        config.replace(retrieval_deadline_ms=300, pool_min_size=6), embedder=HashEmbedder(), worker_registry=registry
    ) as system:
        stored = system.store('We toured "Old Town" on foot', tenant="t")
        # The connections open first: the deadline is for the statements, not for opening connections
        # on a loaded machine (the query holds up to five at once: its processing's, ending in the
        # background, and one per worker).
        system.db.pool.wait(timeout=30)
        started = time.monotonic()
        response = system.query('walking in "Old Town"', tenant="t", workers=["vector", "bm25", "phrase"])
        elapsed = time.monotonic() - started

    d = response.diagnostics
    assert elapsed < 3.0
    assert d.submitted_sources == ["vector", "bm25", "phrase"]
    assert d.completed_sources == ["vector"] and d.failed_sources == ["bm25"] and d.pending_sources == ["phrase"]
    assert (d.completed_task_count, d.failed_task_count, d.pending_task_count) == (1, 1, 1)
    assert d.retrieval_finish_reason == "deadline" and d.policy_satisfied is False
    assert "no_such_table" in d.worker_errors["bm25"]
    assert [m.memory_id for m in response.memories] == [stored]
    assert response.memories[0].sources == ["vector"]
    deadline = time.monotonic() + 2.0
    while active_sleepers(dsn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert active_sleepers(dsn) == 0


def test_each_worker_runs_with_its_plan_mode_and_the_connection_keeps_custom_plans(system, scheduler):
    """bm25, phrase, graph (SQL) and attribute run on generic plans, and vector when all its
    statements are the exact search (a small tenant, as here; its HNSW form keeps custom plans); the
    mode is the transaction's, so the pooled connection is back to the pool's force_custom_plan
    afterwards."""
    modes: dict[str, str] = {}

    def reading(name: str):
        def task(conn: psycopg.Connection) -> list[SourceHit]:
            modes[name] = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0]
            return []

        return task

    tasks = {
        "generic": Task(reading("generic"), generic_plans=True),
        "custom": Task(reading("custom")),
        "plain": reading("plain"),  # a bare callable: the pool's mode
    }
    scheduler.run(tasks, tenant="t", deadline_ms=5000)
    assert modes == {"generic": "force_generic_plan", "custom": "force_custom_plan", "plain": "force_custom_plan"}
    with system.db.connection() as conn:
        assert conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0] == "force_custom_plan"

    pipeline = system.pipeline
    request = QueryRequest(text="Who is Alice Smith?", tenant="t", top_k=5)
    query, rows = pipeline.process(request, Diagnostics())
    query, route, _ = pipeline.route(query, None, Diagnostics())
    ctx = pipeline.context(query, route, np.zeros(system.config.embedding_dim, dtype=np.float32), rows)
    bound = pipeline.tasks(list(system.pipeline.registry.names), ctx)
    assert {name: task.generic_plans for name, task in bound.items()} == {
        "vector": True,
        "bm25": True,
        "graph": system.pipeline.graph_backend == "sql",
        "phrase": True,
        "attribute": True,
        "fusion": False,  # it holds the vector worker's statement
        "temporal": True,
    }
    hnsw = dataclasses.replace(ctx, config=system.config.replace(vector_exact_max_rows=0))
    assert not pipeline.tasks(["vector"], hnsw)["vector"].generic_plans
    assert not pipeline.tasks(["vector"], dataclasses.replace(ctx, tenant_rows=None))["vector"].generic_plans


def test_the_deadline_counts_from_the_last_add(scheduler):
    """A run started empty (no worker could start before the query was embedded) and given its tasks
    after longer than its deadline still gives them the whole deadline: the time between was the
    caller's (the embedding's), not the workers'."""
    running = scheduler.start({}, tenant="t", deadline_ms=300)
    time.sleep(0.5)  # longer than the deadline
    running.add({"vector": one_hit("vector")})
    result = running.finish()
    assert result.states == {"vector": "completed"} and result.policy_satisfied
    early = scheduler.start({"bm25": one_hit("bm25")}, tenant="t", deadline_ms=300)
    time.sleep(0.5)
    early.add({"vector": one_hit("vector")})
    assert early.finish().states == {"bm25": "completed", "vector": "completed"}
    with pytest.raises(ValueError, match="already started"):
        scheduler.start({"vector": one_hit("vector")}, tenant="t", deadline_ms=300).add({"vector": one_hit("vector")})


def test_a_plan_mode_a_previous_borrower_left_does_not_reach_the_next_worker(system):
    """The plan mode is every tenant transaction's own (set_tenant, which the workers run too): a
    borrower that changed the session's mode (e.g. `memory.run(fn)` with a plain SET) hands the next
    worker and the next tenant transaction the pool's custom plans, not its generic ones."""
    db = Database(system.config.dsn, min_size=1, max_size=1)
    scheduler = Scheduler(db, max_workers=1)
    try:
        with db.connection() as conn:
            conn.execute("SET plan_cache_mode = force_generic_plan")
        seen: list[str] = []

        def read(conn: psycopg.Connection) -> list[SourceHit]:
            seen.append(conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0])
            return []

        scheduler.run({"custom": Task(read), "generic": Task(read, generic_plans=True)}, tenant="t", deadline_ms=5000)
        with db.transaction("t", implicit=True) as conn:
            seen.append(conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0])
        with db.connection() as conn:
            left = conn.execute("SELECT current_setting('plan_cache_mode')").fetchone()[0]
        assert seen == ["force_custom_plan", "force_generic_plan", "force_custom_plan"]
        assert left == "force_generic_plan", "the session's own mode is untouched: only each transaction's is set"
    finally:
        scheduler.close()
        db.close()


# -- a worker split into parts (scheduler.Parts: the vector search of a large tenant) ------------------


def merged(parts):
    return sorted((h for hits in parts for h in hits), key=lambda h: h.memory_id)


def test_parts_run_at_once_and_are_one_source(scheduler):
    barrier = threading.Barrier(2, timeout=5)  # opens only when both parts run at the same time

    def part(memory_id):
        def run(conn):
            conn.execute("SELECT 1")
            barrier.wait()
            return [SourceHit(memory_id=memory_id, source="vector", rank=1, score=0.1 * memory_id)]

        return run

    split = Parts((part(2), part(1)), merged)
    result = scheduler.run({"vector": split, "bm25": one_hit("bm25")}, tenant="t", deadline_ms=8000)
    assert result.states == {"vector": "completed", "bm25": "completed"}
    assert result.finish_reason == "all_completed" and result.policy_satisfied
    assert [h.memory_id for h in result.hits["vector"]] == [1, 2]  # merge saw both parts' hits
    assert set(result.worker_ms) == {"vector", "bm25"} and not result.errors


def test_run_sequential_runs_a_split_tasks_parts_in_turn_and_merges_them(scheduler):
    """The benchmarks' sequential baseline takes the tasks a query submits, split ones included (the 1M
    scale benchmark's vector worker is split)."""

    def part(memory_id):
        return lambda conn: [SourceHit(memory_id=memory_id, source="vector", rank=1, score=0.1)]

    split = Parts((part(2), part(1)), merged)
    out = scheduler.run_sequential({"vector": split, "bm25": one_hit("bm25")}, tenant="t")
    assert [h.memory_id for h in out["vector"]] == [1, 2] and [h.memory_id for h in out["bm25"]] == [1]


def test_a_failed_part_fails_its_source(scheduler):
    split = Parts((one_hit("vector"), broken), merged)
    result = scheduler.run({"vector": split, "bm25": one_hit("bm25")}, tenant="t", deadline_ms=2000)
    assert result.states == {"vector": "failed", "bm25": "completed"}
    assert not result.policy_satisfied and list(result.hits) == ["bm25"]
    assert result.errors == {"vector": "RuntimeError: worker exploded"}
    assert set(result.worker_ms) == {"vector", "bm25"}


def test_a_part_still_running_at_the_deadline_leaves_its_source_pending_and_is_cancelled(scheduler, dsn):
    scheduler.run({"vector": one_hit("vector")}, tenant="t", deadline_ms=5000)  # warm pool
    started = time.monotonic()
    result = scheduler.run({"vector": Parts((one_hit("vector"), sleeper), merged)}, tenant="t", deadline_ms=300)
    assert time.monotonic() - started < 3.0
    assert result.states == {"vector": "pending"} and result.finish_reason == "deadline"
    assert not result.hits and not result.worker_ms  # a pending source has no time, even if a part ended
    deadline = time.monotonic() + 2.0
    while active_sleepers(dsn) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert active_sleepers(dsn) == 0
