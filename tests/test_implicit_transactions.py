"""A query's reads run in the transaction PostgreSQL opens for a pipeline's statements up to its Sync
(db/pipeline.tenant_block): no BEGIN or COMMIT round trip, the tenant's settings hold for every
statement of the block and end with it, and a failure leaves a clean connection."""

from __future__ import annotations

import dataclasses

import psycopg
import pytest

from memoria_pg.db import Database
from memoria_pg.db.budget import query_budget
from memoria_pg.db.pipeline import SUPPORTED
from memoria_pg.errors import QueryTimeout

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="libpq without pipeline mode: the explicit transaction is used")

SETTINGS = "SELECT current_setting('memoria.tenant', true), current_setting('role'), now(), pg_backend_pid()"


@pytest.fixture
def one_connection(system):
    """A pool of one connection on the test database: what a block leaves behind, the next borrower gets."""
    db = Database(system.config.dsn, min_size=1, max_size=1)
    yield db
    db.close()


def test_the_settings_hold_for_every_statement_of_the_block_and_end_with_it(one_connection, system):
    system.store("alpha memory of tenant a", tenant="a")
    system.store("beta memory of tenant b", tenant="b")
    with one_connection.transaction("a", implicit=True) as conn:
        first = conn.execute(SETTINGS).fetchone()
        counted = conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0]
        second = conn.execute(SETTINGS).fetchone()
        assert conn.info.pipeline_status == psycopg.pq.PipelineStatus.ON
    assert first[0] == second[0] == "a" and first[1] == "memoria_app"
    assert first[2] == second[2], "both statements ran in one transaction (the same now())"
    assert counted == 1, "row-level security saw the block's tenant"
    with one_connection.connection() as conn:
        after = conn.execute(SETTINGS).fetchone()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert after[3] == first[3], "the same pooled connection"
    assert not after[0], "the tenant ended with the block"
    assert after[2] != first[2], "the block's transaction ended"


def test_a_failed_statement_ends_the_block_and_leaves_a_clean_connection(one_connection):
    with pytest.raises(psycopg.errors.InvalidTextRepresentation):
        with one_connection.transaction("a", implicit=True) as conn:
            conn.execute("SELECT 'not a number'::int").fetchall()
    with one_connection.connection() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert not conn.execute(SETTINGS).fetchone()[0]


def test_the_statement_timeout_of_the_block_applies_to_its_statements(one_connection):
    with pytest.raises(QueryTimeout), query_budget(200):
        with one_connection.transaction("a", implicit=True) as conn:
            conn.execute("SELECT pg_sleep(3)").fetchall()
    with one_connection.connection() as conn:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_a_query_opens_no_explicit_transaction(system, monkeypatch, tmp_path):
    system.store_many(
        [{"content": f"Alice met Bob in Paris on day {i}", "tenant": "t"} for i in range(20)], return_ids=False
    )
    # A system whose pooled connections each write libpq's protocol trace to a file of their own;
    # it only queries (the writes above ran on another pool).
    folder = tmp_path
    original = Database._configure
    files = []

    def configure(self, conn):
        original(self, conn)
        handle = open(folder / f"{len(files)}.trace", "w")  # noqa: SIM115 (open for the connection's life)
        files.append(handle)
        conn.pgconn.trace(handle.fileno())
        conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)

    monkeypatch.setattr(Database, "_configure", configure)
    from memoria_pg.core.embedding import HashEmbedder
    from memoria_pg.system import MemorySystem

    try:
        with MemorySystem(dataclasses.replace(system.config, pool_min_size=6), embedder=HashEmbedder()) as traced:
            for v4 in (True, False):
                response = traced.query("Where did Alice meet Bob?", tenant="t", v4=v4, ranking=False, candidates=False)
                assert response.memories
    finally:
        for handle in files:
            handle.close()
    protocol = "\n".join(path.read_text() for path in folder.glob("*.trace"))
    assert protocol.count("set_config('memoria.tenant'") >= 4  # the V4 lookup, workers and final CTE; V3
    assert "\tSync" in protocol
    sent = [line for line in protocol.splitlines() if line.startswith("F")]
    assert not [line for line in sent if '"BEGIN"' in line or '"COMMIT"' in line]


def test_a_statement_prepared_in_a_failed_block_is_not_left_named_on_the_connection(one_connection):
    """psycopg prepares a statement at its sixth execution and, in a pipeline, names it prepared when it
    sends the Parse. Here the sixth Parse is skipped by the server (an earlier statement of the block
    failed): the next blocks on the pool's connection must still run the statement, not fail with
    "prepared statement ... does not exist" on every later use. The connection is kept (no reconnection
    per failed block: a query that hits its deadline ends with a cancelled statement): psycopg forgets
    its prepared statements, as on a rollback, and deallocates them on the server."""
    read = "SELECT count(*) FROM memoria.bm25_docs WHERE tenant = current_setting('memoria.tenant') -- prepared"
    for _ in range(5):
        with one_connection.transaction("a", implicit=True) as conn:
            conn.execute(read).fetchall()
            backend = conn.info.backend_pid
    with pytest.raises(psycopg.errors.DivisionByZero):
        with one_connection.transaction("a", implicit=True) as conn:
            conn.execute("SELECT 1 / 0")
            conn.execute(read)  # its Parse (the sixth execution) is skipped after the error
    for _ in range(8):  # past psycopg's threshold again: prepared anew, and used
        with one_connection.transaction("a", implicit=True) as conn:
            assert conn.execute(read).fetchone() == (0,)
            assert conn.info.backend_pid == backend
            named = [r[0] for r in conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()]
    assert named.count(read) == 1  # prepared anew, once
