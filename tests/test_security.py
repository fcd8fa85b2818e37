"""Tenant isolation is enforced by the database (row-level security as memoria_app), and values with
SQL/Cypher metacharacters only ever travel as parameters."""

from __future__ import annotations

import psycopg
import pytest

from memoria_pg.core.types import SourceHit
from memoria_pg.errors import InputError
from memoria_pg.query.candidates import build_candidates
from memoria_pg.query.workers import DEFAULT_WORKERS
from memoria_pg.system import MemorySystem
from tests.tenant_tables import tenant_tables

NASTY = [
    "O'Brien",
    'say "hi"',
    "$$; DROP TABLE memoria.memories; --",
    "back\\slash",
    "{braces}",
    "semi;colon",
    "MATCH (n) DETACH DELETE n",
    "Zoë 東京 🚀",
    "%s %(x)s",
    "tab\there",
]


@pytest.fixture
def two_tenants(system: MemorySystem) -> MemorySystem:
    system.store_many(
        [
            {"content": "Alice's favourite colour is blue.", "tenant": "A", "metadata": {"speaker": "Alice"}},
            {"content": "Alice met Bob in Paris.", "tenant": "A"},
            {"content": "Alice's favourite colour is red.", "tenant": "B", "metadata": {"speaker": "Alice"}},
            {"content": "Alice met Bob in Paris last spring.", "tenant": "B"},
            {"content": "Secret plans of tenant B about Paris.", "tenant": "B"},
        ]
    )
    system.query("Alice Paris", tenant="B", trace=True)
    return system


def _b_ids(system: MemorySystem) -> list[tuple[int, str]]:
    with psycopg.connect(system.dsn) as conn:  # the login user (superuser) sees everything
        return conn.execute("SELECT id, memory_type FROM memoria.memories WHERE tenant = 'B'").fetchall()


def _app_readable(system: MemorySystem) -> tuple[list[str], list[str]]:
    """Every tenant table (from the catalog, tests/tenant_tables.py), split into those the library's
    role may read and those it may not (the service's API keys, the vector index registry)."""
    with psycopg.connect(system.dsn) as conn:
        tables = tenant_tables(conn)
        readable = {
            t
            for t in tables
            if conn.execute("SELECT has_table_privilege('memoria_app', %s, 'SELECT')", (f"memoria.{t}",)).fetchone()[0]
        }
    return sorted(readable), sorted(set(tables) - readable)


def test_raw_sql_as_app_role_sees_only_its_tenant(two_tenants: MemorySystem):
    readable, unreadable = _app_readable(two_tenants)
    assert "memory_history" in readable
    with two_tenants.db.transaction("A") as conn:
        assert conn.execute("SELECT current_user").fetchone()[0] == "memoria_app"
        for table in readable:
            tenants = {r[0] for r in conn.execute(f"SELECT DISTINCT tenant FROM memoria.{table}")}
            assert tenants <= {"A"}, table
        assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 2
        assert conn.execute("SELECT count(*) FROM memoria.memory_history").fetchone()[0] == 2  # their `stored`
    for table in unreadable:
        with pytest.raises(psycopg.errors.InsufficientPrivilege), two_tenants.db.transaction("A") as conn:
            conn.execute(f"SELECT count(*) FROM memoria.{table}")


def test_no_tenant_set_sees_nothing(two_tenants: MemorySystem):
    readable, _ = _app_readable(two_tenants)
    with two_tenants.db.connection() as conn:
        for table in readable:
            assert conn.execute(f"SELECT count(*) FROM memoria.{table}").fetchone()[0] == 0, table


def test_app_role_cannot_write_another_tenants_rows(two_tenants: MemorySystem):
    with pytest.raises(psycopg.errors.InsufficientPrivilege), two_tenants.db.transaction("A") as conn:
        conn.execute("INSERT INTO memoria.entities (tenant, name, norm_name) VALUES ('B', 'x', 'x')")
    with two_tenants.db.transaction("A") as conn:
        assert conn.execute("UPDATE memoria.memories SET importance = 1 WHERE tenant = 'B'").rowcount == 0
        assert conn.execute("DELETE FROM memoria.memories WHERE tenant = 'B'").rowcount == 0
    assert len(_b_ids(two_tenants)) == 3


def test_partitions_cannot_be_read_directly_by_the_app_role(two_tenants: MemorySystem):
    with pytest.raises(psycopg.errors.InsufficientPrivilege), two_tenants.db.transaction("A") as conn:
        conn.execute("SELECT * FROM memoria.memories_general")


@pytest.mark.parametrize(
    "workers", [["vector"], ["bm25"], ["bm25", "fusion"], ["graph"], ["phrase"], ["attribute"], None]
)
def test_every_worker_returns_only_the_callers_memories(two_tenants: MemorySystem, workers):
    b_ids = {i for i, _ in _b_ids(two_tenants)}
    response = two_tenants.query(
        'what is Alice\'s favourite colour "Bob in Paris" secret plans',
        tenant="A",
        workers=workers,
        ranking=False,
        top_k=50,
    )
    found = {c.memory_id for c in response.candidates}
    assert found and not (found & b_ids)
    assert all(c.tenant == "A" for c in response.candidates)


def test_final_cte_ignores_ids_of_another_tenant(two_tenants: MemorySystem):
    hits = {
        "vector": [
            SourceHit(memory_id=i, source="vector", rank=n + 1, score=0.1, memory_type=t)
            for n, (i, t) in enumerate(_b_ids(two_tenants))
        ]
    }
    with two_tenants.db.transaction("A") as conn:
        assert build_candidates(conn, hits, DEFAULT_WORKERS, cap=200, rrf_k=60, depth=20) == []
    with two_tenants.db.transaction("B") as conn:
        assert len(build_candidates(conn, hits, DEFAULT_WORKERS, cap=200, rrf_k=60, depth=20)) == 3


def test_traces_are_isolated(two_tenants: MemorySystem):
    with two_tenants.db.transaction("A") as conn:
        assert conn.execute("SELECT count(*) FROM memoria.query_traces").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM memoria.query_trace_candidates").fetchone()[0] == 0
    with two_tenants.db.transaction("B") as conn:
        assert conn.execute("SELECT count(*) FROM memoria.query_trace_candidates").fetchone()[0] > 0


@pytest.mark.parametrize("value", NASTY)
def test_metacharacters_round_trip_in_every_field(system: MemorySystem, value: str):
    tenant = f"tenant {value}"
    ids = system.store_many(
        [
            {
                "content": f"{value} said the meeting with {value} is on Friday.",
                "tenant": tenant,
                "entities": [value, "Friday meeting"],
                "attributes": [[value, "favourite colour", value]],
                "metadata": {"speaker": value, value: value},
            }
        ]
    ).ids
    assert ids[0] is not None
    response = system.query(f'what is {value}\'s favourite colour "{value}"', tenant=tenant, ranking=False)
    assert ids[0] in {c.memory_id for c in response.candidates}
    assert response.diagnostics.failed_sources == []
    row = response.candidates[0]
    assert row.tenant == tenant and row.metadata[value] == value
    with psycopg.connect(system.dsn) as conn:
        assert conn.execute("SELECT count(*) FROM memoria.memories").fetchone()[0] == 1


@pytest.mark.parametrize("memory_type", ["general; DROP TABLE x", "Bad", "general'", "x" * 60])
def test_memory_types_are_validated_identifiers(system: MemorySystem, memory_type: str):
    with pytest.raises(InputError, match="unknown memory_type"):
        system.store("text", tenant="t", memory_type=memory_type)
    with pytest.raises(InputError, match="unknown memory_type"):
        system.query("text", tenant="t", memory_type=memory_type)
