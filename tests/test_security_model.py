"""The claims of SECURITY.md that the other security tests do not already check: what the app role
is and is not allowed, that every checkout runs as it, and that the tenant is transaction-local. The
AGE graph, closed to the app role, is tests/test_security_graph.py."""

from __future__ import annotations

import psycopg
import pytest

from memoria_pg.config import Config
from memoria_pg.core.embedding import HashEmbedder
from memoria_pg.core.types import SourceHit
from memoria_pg.db import APP_ROLE
from memoria_pg.query.scheduler import Scheduler
from memoria_pg.system import MemorySystem


@pytest.fixture
def two_tenants(system: MemorySystem) -> MemorySystem:
    system.store("Alice met Bob in Paris.", tenant="A")
    system.store("Carol met Dan in Rome.", tenant="B")
    return system


def test_the_app_role_cannot_log_in_bypass_rls_or_own_anything(dsn):
    with psycopg.connect(dsn) as conn:
        attrs = conn.execute(
            "SELECT rolsuper, rolbypassrls, rolcanlogin, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = %s",
            (APP_ROLE,),
        ).fetchone()
        owned = conn.execute("SELECT count(*) FROM pg_class WHERE relowner = %s::regrole", (APP_ROLE,)).fetchone()[0]
    assert attrs == (False, False, False, False, False)
    assert owned == 0  # an owner could ALTER TABLE ... DISABLE ROW LEVEL SECURITY


def test_every_table_with_a_tenant_is_row_level_secured_or_not_granted(dsn):
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.oid::regclass::text, c.relispartition, c.relrowsecurity, c.relforcerowsecurity, "
            "has_table_privilege(%(role)s, c.oid, 'SELECT, INSERT, UPDATE, DELETE') "
            "FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant' "
            "WHERE c.relnamespace = 'memoria'::regnamespace AND c.relkind IN ('r', 'p')",
            {"role": APP_ROLE},
        ).fetchall()
    assert len(rows) > 10
    for table, partition, rls, forced, granted in rows:
        if partition:  # reached only through its parent, whose policy applies
            assert not granted, table
        else:
            assert rls and forced, table


def test_the_app_role_cannot_change_schema_sequences_or_types(two_tenants: MemorySystem):
    for statement in (
        "SELECT setval('memoria.memories_id_seq', 1)",
        "INSERT INTO memoria.memory_types (name) VALUES ('x')",
        "ALTER TABLE memoria.memories DISABLE ROW LEVEL SECURITY",
        "DROP POLICY tenant_isolation ON memoria.memories",
        "CREATE TABLE memoria.extra (a int)",
        "SELECT memoria.add_memory_type('extra')",
        "TRUNCATE memoria.memories",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), two_tenants.db.transaction("A") as conn:
            conn.execute(statement)


def test_every_checkout_runs_as_the_app_role_even_after_a_reset_role(config: Config):
    with MemorySystem(config.replace(pool_min_size=1, pool_max_size=1), embedder=HashEmbedder()) as system:
        with system.db.connection() as conn:
            conn.execute("RESET ROLE")  # code holding a connection can do this: it is trusted
            assert conn.execute("SELECT current_user = session_user").fetchone()[0]
        with system.db.connection() as conn:  # the same (only) connection, handed out again
            assert conn.execute("SELECT current_user").fetchone()[0] == APP_ROLE


def test_the_tenant_lasts_one_transaction(config: Config):
    with MemorySystem(config.replace(pool_min_size=1, pool_max_size=1), embedder=HashEmbedder()) as system:
        system.store("Alice met Bob in Paris.", tenant="A")
        with system.db.transaction("A") as conn:
            assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 1
        with system.db.connection() as conn:  # the same connection, after the commit
            assert conn.execute("SELECT current_setting('memoria.tenant', true)").fetchone()[0] in ("", None)
            assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 0


def test_tenant_transactions_and_workers_run_as_the_app_role_after_a_reset_role(config: Config):
    # transaction() and the scheduler's workers check out without a SET ROLE round trip: their first
    # statement sets the role with the tenant (set_tenant, Scheduler._statement).
    with MemorySystem(config.replace(pool_min_size=1, pool_max_size=1), embedder=HashEmbedder()) as system:
        system.store("Alice met Bob in Paris.", tenant="A")
        system.store("Carol met Dan in Rome.", tenant="B")
        with system.db.connection() as conn:
            conn.execute("RESET ROLE")  # the login user: it bypasses row-level security
            assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 2
        with system.db.transaction("A") as conn:  # the same (only) connection, handed out again
            assert conn.execute("SELECT current_user").fetchone()[0] == APP_ROLE
            assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 1
        with system.db.connection(app_role=False) as conn:
            conn.execute("RESET ROLE")
        seen: list[tuple[str, int]] = []

        def whoami(conn: psycopg.Connection) -> list[SourceHit]:
            row = conn.execute("SELECT current_user, (SELECT count(*) FROM memoria.memories)").fetchone()
            seen.append((row[0], row[1]))
            return []

        scheduler = Scheduler(system.db, max_workers=1)
        try:
            result = scheduler.run({"vector": whoami}, tenant="B", deadline_ms=10_000)
        finally:
            scheduler.close()
        assert result.finish_reason == "all_completed"
        assert seen == [(APP_ROLE, 1)]  # the app role, so row-level security shows tenant B's one memory
