"""Queries on a hot standby (db/replicas.py): routing, read-your-writes, and the faults of a standby
that lags, is down or is killed during a query. They need a real standby of the test server:
MEMORIA_TEST_STANDBY_DSN (scripts/standby.sh start prints it; scripts/test.sh sets it). Without it
they are skipped, or fail when MEMORIA_REQUIRE_STANDBY=1 (CI).

Replica lag is made deterministic with pg_wal_replay_pause() on the standby (the fixture `paused`
resumes replay afterwards, whatever happens)."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from memoria_pg import DEFAULT_WORKERS, Config, ConfigError, MemorySystem
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.db.replicas import ReadRouter, WritePositions, lsn_text, server_failure, server_label
from memoria_pg.query.workers.vector import VectorWorker

STANDBY_ENV = "MEMORIA_TEST_STANDBY_DSN"
HOUR_MS = 3_600_000  # a lag bound no paused standby reaches in a test: only read-your-writes decides


def _with_db(dsn: str, dbname: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = dbname
    return psycopg.conninfo.make_conninfo(**params)


@pytest.fixture(scope="session")
def standby_admin_dsn() -> str:
    dsn = os.environ.get(STANDBY_ENV)
    if not dsn:
        reason = f"no standby: set {STANDBY_ENV} (scripts/standby.sh start prints it; scripts/test.sh sets it)"
        if os.environ.get("MEMORIA_REQUIRE_STANDBY") == "1":
            pytest.fail(f"{reason}; MEMORIA_REQUIRE_STANDBY=1 makes this a failure", pytrace=False)
        pytest.skip(reason)
    return dsn


def wait_caught_up(primary_dsn: str, standby_dsn: str, timeout: float = 30.0) -> None:
    """Until the standby has replayed the primary's WAL position of now: its insert position, which is
    past the commit records of asynchronous commits (a ranked query's access statistics) not yet written."""
    with psycopg.connect(primary_dsn, autocommit=True) as conn:
        lsn = conn.execute("SELECT pg_current_wal_insert_lsn()").fetchone()[0]
    with psycopg.connect(standby_dsn, autocommit=True) as conn:
        until = time.monotonic() + timeout
        while not conn.execute("SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,)).fetchone()[0]:
            assert time.monotonic() < until, "the standby did not catch up with the primary"
            time.sleep(0.01)


@pytest.fixture
def replica_dsn(dsn: str, admin_dsn: str, standby_admin_dsn: str) -> str:
    """The test's database on the standby, once the standby has replayed its creation."""
    with psycopg.connect(standby_admin_dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_wal_replay_resume()")  # a test killed while paused must not stall the rest
    wait_caught_up(admin_dsn, standby_admin_dsn)
    return _with_db(standby_admin_dsn, psycopg.conninfo.conninfo_to_dict(dsn)["dbname"])


@pytest.fixture
def paused(standby_admin_dsn: str) -> Iterator[Any]:
    """pause(): the standby stops replaying (until the test ends, or resume())."""
    conn = psycopg.connect(standby_admin_dsn, autocommit=True)

    def pause() -> None:
        conn.execute("SELECT pg_wal_replay_pause()")
        until = time.monotonic() + 10
        while conn.execute("SELECT pg_get_wal_replay_pause_state()").fetchone()[0] != "paused":
            assert time.monotonic() < until
            time.sleep(0.005)

    def resume() -> None:
        conn.execute("SELECT pg_wal_replay_resume()")

    pause.resume = resume  # type: ignore[attr-defined]
    try:
        yield pause
    finally:
        resume()
        conn.close()


def replica_config(dsn: str, replica: str, **kw: Any) -> Config:
    """With the standby. The lag bound is off unless a test sets it: other sessions' WAL on this shared
    server can hold the standby a second behind, and only the lag test is about that."""
    settings: dict[str, Any] = {"pool_min_size": 1, "pool_max_size": 8, "replica_max_lag_ms": HOUR_MS, **kw}
    return Config(dsn=dsn, replica_dsns=(replica,), **settings)


def open_every_connection(system: MemorySystem) -> None:
    """The pools' minimum of connections open before a test whose deadline is shorter than opening
    one may take on a loaded machine: its workers then wait for no connection to be opened."""
    system.db.pool.wait(timeout=30)
    for replica in system.reads.replicas:
        replica.db.pool.wait(timeout=30)


@contextlib.contextmanager
def opened(config: Config, **kw: Any) -> Iterator[MemorySystem]:
    with MemorySystem(config, embedder=HashEmbedder(), **kw) as system:
        yield system


def contents(response: Any) -> list[str]:
    return [m.content for m in response.memories]


def primary_write(dsn: str) -> None:
    """A committed write on the primary that the library does not know of (another process's)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS public.elsewhere (x int)")
        conn.execute("INSERT INTO public.elsewhere VALUES (1)")


# -- routing -------------------------------------------------------------------------------------
def test_queries_read_the_standby_and_say_so(dsn, replica_dsn, admin_dsn, standby_admin_dsn, paused):
    """The reads run on the standby: with its replay paused, a memory deleted on the primary behind
    the library's back is still found (the primary would not find it), and the diagnostics name it."""
    with opened(replica_config(dsn, replica_dsn)) as system:
        system.store_many([{"content": f"Maya keeps bees number {i}", "tenant": "t"} for i in range(5)])
        wait_caught_up(admin_dsn, standby_admin_dsn)
        response = system.query("bees", tenant="t", ranking=False)
        assert response.diagnostics.server == f"replica 1 ({server_label(replica_dsn)})"
        assert response.diagnostics.server_note is None and len(response.memories) == 5
        paused()
        with psycopg.connect(dsn, autocommit=True) as conn:  # not through the library: not waited for
            conn.execute("DELETE FROM memoria.memories WHERE content = 'Maya keeps bees number 0'")
        stale = system.query("bees", tenant="t", ranking=False)
        assert stale.diagnostics.server.startswith("replica 1")
        assert "Maya keeps bees number 0" in contents(stale)


def test_ranked_queries_write_access_statistics_on_the_primary(dsn, replica_dsn, admin_dsn, standby_admin_dsn):
    with opened(replica_config(dsn, replica_dsn)) as system:
        system.store("Jonas lives in Porto", tenant="t")
        wait_caught_up(admin_dsn, standby_admin_dsn)
        response = system.query("where does Jonas live?", tenant="t")
        assert response.diagnostics.server.startswith("replica 1")
        assert response.diagnostics.access_error is None
        with psycopg.connect(dsn) as conn:
            assert conn.execute("SELECT sum(access_count) FROM memoria.memory_access").fetchone()[0] == 1


def test_row_level_security_holds_on_the_standby(dsn, replica_dsn, admin_dsn, standby_admin_dsn):
    with opened(replica_config(dsn, replica_dsn)) as system:
        system.store_many(
            [{"content": "alpha secret one", "tenant": "a"}, {"content": "alpha secret two", "tenant": "b"}]
        )
        wait_caught_up(admin_dsn, standby_admin_dsn)
        response = system.query("alpha secret", tenant="a", ranking=False)
        assert response.diagnostics.server.startswith("replica 1")
        assert contents(response) == ["alpha secret one"]
        with system.reads.replicas[0].db.transaction("a") as conn:
            assert conn.execute("SELECT current_user, count(*) FROM memoria.memories").fetchone() == ("memoria_app", 1)
            assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]


class SleepingVector(VectorWorker):
    """The vector worker, five seconds late on the standby."""

    def run(self, conn: psycopg.Connection, ctx: Any) -> Any:
        if conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
            conn.execute("SELECT pg_sleep(5)")
        return super().run(conn, ctx)


def test_the_deadline_cancels_a_statement_on_the_standby(dsn, replica_dsn, admin_dsn, standby_admin_dsn):
    registry = DEFAULT_WORKERS.replace(SleepingVector)
    config = replica_config(dsn, replica_dsn, retrieval_deadline_ms=300, pool_min_size=6)
    with opened(config, worker_registry=registry) as system:
        system.store("the lighthouse keeper", tenant="t")
        wait_caught_up(admin_dsn, standby_admin_dsn)
        open_every_connection(system)
        t0 = time.perf_counter()
        response = system.query("lighthouse keeper", tenant="t", ranking=False)
        assert time.perf_counter() - t0 < 3
        diag = response.diagnostics
        assert diag.server.startswith("replica 1") and diag.pending_sources == ["vector"]
        assert diag.retrieval_finish_reason == "deadline" and contents(response) == ["the lighthouse keeper"]
        with psycopg.connect(replica_dsn, autocommit=True) as conn:  # the cancel reached the standby
            until = time.monotonic() + 2
            while conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(5)%%' AND state = 'active'"
            ).fetchone()[0]:
                assert time.monotonic() < until, "the sleeping statement still runs on the standby"
                time.sleep(0.02)


def test_the_query_budget_holds_on_the_standby(dsn, replica_dsn, admin_dsn, standby_admin_dsn):
    """A budget spent on the standby is QueryTimeout, as on the primary (not a failure to retry)."""
    from memoria_pg.errors import QueryTimeout

    registry = DEFAULT_WORKERS.replace(SleepingVector)
    config = replica_config(dsn, replica_dsn, retrieval_deadline_ms=100_000, query_timeout_ms=400)
    with opened(config, worker_registry=registry) as system:
        system.store("the lighthouse keeper", tenant="t")
        wait_caught_up(admin_dsn, standby_admin_dsn)
        t0 = time.perf_counter()
        with pytest.raises(QueryTimeout):
            system.query("lighthouse keeper", tenant="t", ranking=False)
        assert time.perf_counter() - t0 < 3
        assert system.query("lighthouse", tenant="t", workers=["bm25"]).diagnostics.server.startswith("replica 1")


# -- read-your-writes ----------------------------------------------------------------------------
def test_a_write_is_never_missed_the_lagging_standby_is_skipped(dsn, replica_dsn, admin_dsn, standby_admin_dsn, paused):
    """The standby has not replayed the tenant's write: the query waits replica_wait_ms, then reads
    the primary and finds it (the standby would not)."""
    config = replica_config(dsn, replica_dsn, replica_wait_ms=50)
    with opened(config) as system:
        system.store("an old memory about otters", tenant="t")
        wait_caught_up(admin_dsn, standby_admin_dsn)
        assert system.query("otters", tenant="t").diagnostics.server.startswith("replica 1")
        paused()
        new_id = system.store("a new memory about otters and rivers", tenant="t")
        response = system.query("otters rivers", tenant="t", ranking=False)
        diag = response.diagnostics
        assert new_id in [m.memory_id for m in response.memories]
        assert diag.server == "primary" and "had not replayed the tenant's last write" in diag.server_note
        assert diag.routing_ms >= 50 and diag.read_your_writes_lsn is not None
        other = system.query("otters", tenant="someone-else", ranking=False)  # wrote nothing: the standby
        assert other.diagnostics.server.startswith("replica 1") and other.diagnostics.routing_ms < 50
        with system.reads.replicas[0].db.transaction("t") as conn:  # the standby indeed lacks it
            assert conn.execute("SELECT count(*) FROM memoria.memories WHERE id = %s", (new_id,)).fetchone()[0] == 0
        paused.resume()
        wait_caught_up(admin_dsn, standby_admin_dsn)
        again = system.query("otters rivers", tenant="t", ranking=False)
        assert again.diagnostics.server.startswith("replica 1") and new_id in [m.memory_id for m in again.memories]


def test_the_query_waits_for_the_standby_to_replay_the_write(dsn, replica_dsn, admin_dsn, standby_admin_dsn, paused):
    config = replica_config(dsn, replica_dsn, replica_wait_ms=5000)
    with opened(config) as system:
        paused()
        system.delete([system.store("a memory to forget about herons", tenant="t")], tenant="t")
        threading.Timer(0.3, paused.resume).start()
        t0 = time.perf_counter()
        response = system.query("herons", tenant="t", ranking=False)
        assert 0.25 < time.perf_counter() - t0 < 5
        assert response.diagnostics.server.startswith("replica 1") and "waited" in response.diagnostics.server_note
        assert response.memories == []  # the delete is seen too


def test_every_write_operation_is_waited_for(dsn, replica_dsn, admin_dsn, standby_admin_dsn, paused):
    config = replica_config(dsn, replica_dsn, replica_wait_ms=0)
    with opened(config) as system:
        memory_id = system.store("a note about kestrels", tenant="t")
        system.store("a kestrel seen once", tenant="t", metadata={"forget": "me"})  # forget writes something
        writes = {
            "update": lambda: system.update(memory_id, tenant="t", importance=0.9),
            "invalidate": lambda: system.invalidate(memory_id, tenant="t"),
            "restore": lambda: system.restore(memory_id, tenant="t"),
            "store_many": lambda: system.store_many([{"content": "kestrels hover", "tenant": "t"}]),
            "forget": lambda: system.forget(tenant="t", where={"forget": "me"}),
            "delete": lambda: system.delete([memory_id], tenant="t"),
            "erase_tenant": lambda: system.erase_tenant("t"),
        }
        for name, write in writes.items():
            wait_caught_up(admin_dsn, standby_admin_dsn)
            assert system.query("kestrels", tenant="t").diagnostics.server.startswith("replica 1"), name
            paused()
            write()
            assert system.query("kestrels", tenant="t").diagnostics.server == "primary", name
            paused.resume()


def test_the_access_statistics_commit_asynchronously_and_are_still_waited_for(
    dsn, replica_dsn, admin_dsn, standby_admin_dsn, paused
):
    """A ranked query's access upsert commits with synchronous_commit off (its commit record may not
    be written when the next query starts): its write position is the WAL insert position, so the
    tenant's next query still waits for the standby to have it, or reads the primary."""
    with opened(replica_config(dsn, replica_dsn, replica_wait_ms=0)) as system:
        memory_id = system.store("Jonas keeps a red kayak", tenant="t")
        wait_caught_up(admin_dsn, standby_admin_dsn)
        assert system.query("kayak", tenant="t", ranking=False).diagnostics.server.startswith("replica 1")
        paused()
        ranked = system.query("kayak", tenant="t")  # reads the standby, writes the counts on the primary
        assert ranked.diagnostics.server.startswith("replica 1") and ranked.diagnostics.access_error is None
        after = system.query("kayak", tenant="t", ranking=False)
        assert after.diagnostics.server == "primary"  # the standby has not replayed the counts
        assert after.candidates[0].memory_id == memory_id and after.candidates[0].access_count == 1
        paused.resume()


def test_write_positions_are_per_tenant_and_forgetting_raises_the_floor(monkeypatch):
    from memoria_pg.db import replicas

    monkeypatch.setattr(replicas, "MAX_TENANTS", 2)
    writes = WritePositions()
    writes.record(["a"], 10)
    writes.record(["b"], 20)
    assert (writes.required("a"), writes.required("b"), writes.required("c")) == (10, 20, 0)
    writes.record(["c"], 30)  # "a" is forgotten: every tenant now needs what it needed
    assert (writes.required("a"), writes.required("b"), writes.required("z")) == (10, 20, 10)
    writes.record(None, 40)
    assert writes.required("c") == 40 and lsn_text(2**32 + 255) == "1/FF"


# -- faults --------------------------------------------------------------------------------------
def test_a_standby_lagging_past_the_bound_is_not_used(dsn, replica_dsn, admin_dsn, standby_admin_dsn, paused):
    with opened(replica_config(dsn, replica_dsn, replica_max_lag_ms=200)) as system:
        system.store("a memory about swifts", tenant="t")
        wait_caught_up(admin_dsn, standby_admin_dsn)
        assert system.query("swifts", tenant="t").diagnostics.server.startswith("replica 1")
        paused()
        primary_write(dsn)  # another process writes: the standby receives it and does not replay it
        time.sleep(0.4)
        response = system.query("swifts", tenant="someone-else", ranking=False)
        assert response.diagnostics.server == "primary" and "replica_max_lag_ms 200" in response.diagnostics.server_note


def test_a_standby_that_is_down_sends_queries_to_the_primary(dsn):
    down = _with_db("postgresql://postgres@127.0.0.1:1/postgres", "memoria")
    t0 = time.perf_counter()
    config = Config(dsn=dsn, pool_min_size=1, pool_max_size=4, replica_dsns=(down,), replica_retry_s=60)
    with opened(config) as system:  # opening does not wait for the standby
        assert time.perf_counter() - t0 < 5
        system.store("a memory about wrens", tenant="t")
        first = system.query("wrens", tenant="t")
        assert contents(first) == ["a memory about wrens"]
        assert first.diagnostics.server == "primary" and "cannot connect" in first.diagnostics.server_note
        second = system.query("wrens", tenant="t")  # left out for replica_retry_s: no new attempt
        assert second.diagnostics.server == "primary" and second.diagnostics.routing_ms < 50
        assert "cannot connect" in second.diagnostics.server_note


def test_queries_take_turns_and_skip_a_down_standby(dsn, replica_dsn, admin_dsn, standby_admin_dsn):
    """Two standbys (the same server twice): equal in flight, so in turn; with one of them down, the
    other answers, not the primary."""
    with opened(replica_config(dsn, replica_dsn).replace(replica_dsns=(replica_dsn, replica_dsn))) as system:
        system.store("a memory about larks", tenant="t")
        wait_caught_up(admin_dsn, standby_admin_dsn)
        # Retrieval-only: a ranked query's access counts are a write of the tenant, and the next query
        # would then wait for the standby to replay them (replica_wait_ms), under load past the wait.
        servers = [system.query("larks", tenant="t", ranking=False).diagnostics.server.split(" (")[0] for _ in range(4)]
        assert sorted(servers) == ["replica 1", "replica 1", "replica 2", "replica 2"]
        assert servers[0] != servers[1] and servers[1] != servers[2]
    down = _with_db("postgresql://postgres@127.0.0.1:1/postgres", "memoria")
    with opened(replica_config(dsn, replica_dsn).replace(replica_dsns=(down, replica_dsn))) as system:
        for _ in range(3):
            response = system.query("larks", tenant="t", ranking=False)
            assert response.diagnostics.server.startswith("replica 2") and contents(response) == [
                "a memory about larks"
            ]


def test_the_standby_with_fewest_queries_in_flight_is_chosen():
    from memoria_pg.db.replicas import Replica

    router = ReadRouter(object(), ())  # type: ignore[arg-type]  # the order alone: no server involved
    a, b, c = (Replica(name, db=object()) for name in "abc")  # type: ignore[arg-type]
    router.replicas = [a, b, c]
    a.in_flight, b.in_flight, c.in_flight = 2, 1, 1
    firsts = {router._candidates(())[0].name for _ in range(6)}
    assert firsts == {"b", "c"} and router._candidates(())[-1] is a
    b.down_until = time.monotonic() + 60
    assert [r.name for r in router._candidates((c,))] == ["a"]


class KilledVector(VectorWorker):
    """The vector worker whose standby backend is terminated (from another connection) as it starts."""

    kills: list[int] = []
    standby_dsn = ""

    def run(self, conn: psycopg.Connection, ctx: Any) -> Any:
        if conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]:
            with psycopg.connect(self.standby_dsn, autocommit=True) as admin:
                admin.execute("SELECT pg_terminate_backend(%s, 2000)", (conn.info.backend_pid,))
            self.kills.append(conn.info.backend_pid)
        return super().run(conn, ctx)


def test_a_standby_killed_during_the_query_sends_it_to_the_primary(dsn, replica_dsn, admin_dsn, standby_admin_dsn):
    KilledVector.standby_dsn, KilledVector.kills = standby_admin_dsn, []
    config = replica_config(dsn, replica_dsn, replica_retry_s=60)
    with opened(config, worker_registry=DEFAULT_WORKERS.replace(KilledVector)) as system:
        system.store_many([{"content": f"the harbour seal number {i}", "tenant": "t"} for i in range(3)])
        wait_caught_up(admin_dsn, standby_admin_dsn)
        response = system.query("harbour seal", tenant="t")
        diag = response.diagnostics
        assert len(KilledVector.kills) == 1 and diag.server == "primary" and diag.policy_satisfied
        assert "failed during the query" in diag.server_note and "vector" in diag.completed_sources
        assert len(response.memories) == 3 and diag.access_error is None
        assert system.query("harbour seal", tenant="t").diagnostics.server == "primary"  # left out


def test_server_failures_are_told_from_statement_errors():
    assert server_failure(psycopg.OperationalError("server closed the connection unexpectedly"))
    assert not server_failure(psycopg.errors.QueryCanceled("canceling statement due to user request"))
    assert server_failure(psycopg.errors.SerializationFailure("canceling statement due to conflict with recovery"))
    assert not server_failure(psycopg.errors.SerializationFailure("could not serialize access"))
    assert not server_failure(psycopg.errors.UndefinedTable("no such table"))
    assert not server_failure(ValueError("x"))


def test_settings_are_checked():
    with pytest.raises(ConfigError, match="replica_dsns needs dsn"):
        Config(replica_dsns=("postgresql://h/db",))
    with pytest.raises(ConfigError, match="replica_wait_ms"):
        Config(dsn="postgresql://h/db", replica_wait_ms=-1)
    env = {"MEMORIA_DSN": "postgresql://p/db", "MEMORIA_REPLICA_DSNS": "postgresql://r1/db,postgresql://r2/db"}
    assert Config.from_env(env).replica_dsns == ("postgresql://r1/db", "postgresql://r2/db")
    assert server_label("postgresql://u:secret@r1:6432/db") == "r1:6432"


def test_without_standbys_nothing_changes(system):
    assert isinstance(system.reads, ReadRouter) and not system.reads.enabled
    system.store("a memory about moles", tenant="t")
    diag = system.query("moles", tenant="t").diagnostics
    assert diag.server == "primary" and diag.server_note is None and diag.read_your_writes_lsn is None


def test_the_config_command_masks_the_standbys_passwords():
    from tests.test_cli import invoke

    env = {"MEMORIA_REPLICA_DSNS": "postgresql://app:s3cret@standby1/mem,postgresql://app:other@standby2/mem"}
    for args in (
        ("--dsn", "postgresql://app@primary/mem", "config"),
        ("--dsn", "postgresql://p/mem", "config", "--json"),
    ):
        result = invoke(*args, env=env)
        assert result.exit_code == 0, result.output
        assert "s3cret" not in result.stdout and "other@" not in result.stdout and "app:***@standby2" in result.stdout
