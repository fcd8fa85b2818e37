"""Migration 0009 (issue 15, point 7): every unique key, conflict target and foreign key of a tenant table
includes the tenant; ids are not settable by memoria_app; the access upsert takes its ids from memories
under row-level security; foreign keys are no existence oracle. Tested on an empty schema and under data,
up and down (0009 did not exist at 914387e: every test here fails there)."""

from __future__ import annotations

import re

import psycopg
import pytest

from memoria_pg import HashEmbedder, MemorySystem
from memoria_pg.db import APP_ROLE, load_sql, migrate, sql_dir

TENANTS = ("acme", "globex")
ID_TABLES = ("memories", "entities", "memory_attributes", "query_traces")


def keys(dsn: str) -> dict[str, str]:
    """Every primary, unique and foreign key of the memoria schema (partitions' too), by table and name."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT conrelid::regclass::text || ' ' || conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE connamespace = 'memoria'::regnamespace AND contype IN ('p', 'u', 'f')"
        ).fetchall()
    return dict(rows)


def privileges(dsn: str) -> dict[str, str]:
    """The access lists of the memoria tables and of their columns."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT c.oid::regclass::text, c.relacl::text FROM pg_class c "
            "WHERE c.relnamespace = 'memoria'::regnamespace AND c.relkind IN ('r', 'p') "
            "UNION ALL SELECT a.attrelid::regclass::text || '.' || a.attname, a.attacl::text FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid WHERE c.relnamespace = 'memoria'::regnamespace "
            "AND c.relkind IN ('r', 'p') AND a.attacl IS NOT NULL"
        ).fetchall()
    return dict(rows)


def as_app(conn: psycopg.Connection, tenant: str) -> None:
    conn.execute(f"SET ROLE {APP_ROLE}")
    conn.execute("SELECT set_config('memoria.tenant', %s, false)", (tenant,))


def test_0009_puts_the_tenant_in_every_key_and_its_downgrade_restores_0008s(empty_dsn):
    migrate.upgrade(empty_dsn, "0008")
    keys_0008, privileges_0008 = keys(empty_dsn), privileges(empty_dsn)
    migrate.upgrade(empty_dsn, "0009")
    after = keys(empty_dsn)
    assert after["memoria.memories memories_pkey"] == "PRIMARY KEY (tenant, id, memory_type)"
    assert after["memoria.memories_fact memories_fact_pkey"] == "PRIMARY KEY (tenant, id, memory_type)"
    assert after["memoria.memory_access memory_access_pkey"] == "PRIMARY KEY (tenant, memory_id)"
    assert after["memoria.memory_entities memory_entities_entity_id_fkey"] == (
        "FOREIGN KEY (tenant, entity_id) REFERENCES memoria.entities(tenant, id) ON DELETE CASCADE"
    )
    assert set(after) == set(keys_0008)  # the same constraints, by name
    with psycopg.connect(empty_dsn) as conn:
        app_may_set_id = conn.execute(
            "SELECT table_name FROM unnest(%s::text[]) AS t(table_name) "
            "WHERE has_column_privilege(%s, 'memoria.' || table_name, 'id', 'INSERT') "
            "   OR has_column_privilege(%s, 'memoria.' || table_name, 'id', 'UPDATE')",
            (list(ID_TABLES), APP_ROLE, APP_ROLE),
        ).fetchall()
    assert app_may_set_id == []
    migrate.downgrade(empty_dsn, "0008")
    assert keys(empty_dsn) == keys_0008
    assert privileges(empty_dsn) == privileges_0008
    migrate.upgrade(empty_dsn)
    assert keys(empty_dsn)["memoria.entities entities_pkey"] == "PRIMARY KEY (tenant, id)"


def test_every_key_of_a_table_the_app_role_writes_includes_the_tenant(dsn):
    """At head, whatever later migrations added: unique keys, primary keys and foreign keys (both ends)."""
    with psycopg.connect(dsn) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT c.oid::regclass::text FROM pg_class c "
                "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'tenant' "
                "WHERE c.relnamespace = 'memoria'::regnamespace AND c.relkind IN ('r', 'p') AND NOT c.relispartition "
                "AND (has_table_privilege(%(role)s, c.oid, 'INSERT, UPDATE') "
                "     OR has_any_column_privilege(%(role)s, c.oid, 'INSERT, UPDATE'))",
                {"role": APP_ROLE},
            )
        ]
        without = conn.execute(
            "SELECT conrelid::regclass::text, conname FROM pg_constraint c "
            "WHERE conrelid = ANY(%s::regclass[]) AND contype IN ('p', 'u', 'f', 'x') "
            "AND NOT (SELECT attnum FROM pg_attribute WHERE attrelid = c.conrelid AND attname = 'tenant') = ANY(conkey) "
            "UNION ALL SELECT conrelid::regclass::text, conname FROM pg_constraint c "
            "WHERE conrelid = ANY(%s::regclass[]) AND contype = 'f' "
            "AND NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c.confrelid AND attname = 'tenant' "
            "                AND attnum = ANY(c.confkey))",
            (tables, tables),
        ).fetchall()
        unique_indexes = conn.execute(  # unique indexes that are not constraints, too
            "SELECT i.indexrelid::regclass::text FROM pg_index i "
            "WHERE i.indrelid = ANY(%s::regclass[]) AND i.indisunique "
            "AND NOT (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = 'tenant') "
            "        = ANY((i.indkey::int2[])[0:i.indnkeyatts - 1])",
            (tables,),
        ).fetchall()
    assert {"memoria.memories", "memoria.entities", "memoria.memory_access"} <= set(tables)
    assert without == [] and unique_indexes == []


def test_every_conflict_target_names_the_tenant():
    targets = []
    for path in sql_dir().rglob("*.sql"):
        text = re.sub(r"--[^\n]*", "", path.read_text())
        for match in re.finditer(r"ON\s+CONFLICT\s*(\([^)]*\))?", text, re.IGNORECASE):
            targets.append((path.name, match.group(1)))
    assert len(targets) >= 5
    assert [t for t in targets if t[1] is None or "tenant" not in t[1]] == []


@pytest.fixture
def two_tenants(config):
    with MemorySystem(config, embedder=HashEmbedder()) as system:
        for tenant in TENANTS:
            system.store_many(
                [
                    {"content": f"Maya Novak met Jonas Berg in Lisbon ({tenant}).", "tenant": tenant},
                    {"content": f"Maya Novak's favourite colour is teal ({tenant}).", "tenant": tenant},
                ]
            )
            system.query("Maya Novak Jonas Berg", tenant=tenant, trace=True)  # access counts and a trace
            system.store(f"A note about gardening ({tenant}).", tenant=tenant)  # never returned yet
        yield system


def first_id(dsn: str, table: str, tenant: str, column: str = "id") -> int:
    with psycopg.connect(dsn) as conn:
        return conn.execute(f"SELECT min({column}) FROM memoria.{table} WHERE tenant = %s", (tenant,)).fetchone()[0]


@pytest.mark.parametrize(
    "statement",
    [
        "INSERT INTO memoria.memories (id, tenant, memory_type, dedup_key, content, embedding, doc_len) "
        "VALUES (%(id)s, 'acme', 'general', 'k', 'x', array_fill(1, ARRAY[384])::vector, 1)",
        "UPDATE memoria.memories SET id = %(id)s + 1000000",
        "INSERT INTO memoria.entities (id, tenant, name, norm_name) VALUES (%(id)s + 1000000, 'acme', 'X', 'x')",
        "UPDATE memoria.entities SET id = id + 1000000",
        "INSERT INTO memoria.memory_attributes (id, tenant, memory_id, memory_type, subject, attribute, value) "
        "VALUES (%(id)s + 1000000, 'acme', 1, 'general', 's', 'a', 'v')",
        "INSERT INTO memoria.query_traces (id, tenant, query, diagnostics) VALUES (%(id)s + 1000000, 'acme', 'q', '{}')",
        "UPDATE memoria.query_traces SET id = id + 1000000",
    ],
)
def test_ids_are_not_settable_by_the_app_role(two_tenants, dsn, statement):
    memory_id = first_id(dsn, "memories", "globex")  # another tenant's id: a collision would be an oracle
    with psycopg.connect(dsn) as conn:
        as_app(conn, "acme")
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="permission denied"):
            conn.execute(statement, {"id": memory_id})


def test_an_insert_without_an_id_still_works_for_the_app_role(two_tenants, dsn):
    with psycopg.connect(dsn) as conn:
        as_app(conn, "acme")
        entity = conn.execute(
            "INSERT INTO memoria.entities (tenant, name, norm_name) VALUES ('acme', 'Zed', 'zed') RETURNING id"
        ).fetchone()[0]
        conn.execute("UPDATE memoria.entities SET name = 'Zed!' WHERE id = %s", (entity,))
        conn.rollback()


@pytest.mark.parametrize(
    "statement, table, column",
    [
        (
            "INSERT INTO memoria.memory_entities (tenant, entity_id, memory_id, memory_type) "
            "VALUES ('acme', %(id)s, %(own_memory)s, 'general')",
            "entities",
            "id",
        ),
        (
            "INSERT INTO memoria.entity_edges (tenant, src_id, dst_id) VALUES ('acme', %(own_entity)s, %(id)s)",
            "entities",
            "id",
        ),
        (
            "INSERT INTO memoria.query_trace_candidates (trace_id, tenant, rank, memory_id, memory_type, sources, scores) "
            "VALUES (%(id)s, 'acme', 99, %(own_memory)s, 'general', '{}', '{}')",
            "query_traces",
            "id",
        ),
    ],
)
def test_a_foreign_key_gives_no_existence_oracle(two_tenants, dsn, statement, table, column):
    """Another tenant's id fails exactly as an id that nobody has (referential checks bypass row-level
    security: before 0009 the first succeeded and the second failed)."""
    params = {"own_memory": first_id(dsn, "memories", "acme"), "own_entity": first_id(dsn, "entities", "acme")}
    errors = []
    for other in (first_id(dsn, table, "globex", column), 10**12):
        with psycopg.connect(dsn) as conn:
            as_app(conn, "acme")
            with pytest.raises(psycopg.errors.ForeignKeyViolation) as info:
                conn.execute(statement, {**params, "id": other})
            errors.append(info.value.diag.message_primary)
    assert errors[0] == errors[1]


def test_another_tenants_memory_ids_cannot_break_its_ranked_queries(two_tenants, dsn):
    """Issue 15's case: an access row for another tenant's memory made that tenant's ranked queries fail
    for good. The library's upsert takes its ids from memories (another tenant's count nothing), and a
    row written by hand is keyed by its own tenant."""
    theirs = first_id(dsn, "memories", "globex")
    with two_tenants.db.transaction("acme") as conn:
        conn.execute(load_sql("record_access"), {"ids": [theirs]})
        assert (
            conn.execute("SELECT count(*) FROM memoria.memory_access WHERE memory_id = %s", (theirs,)).fetchone()[0]
            == 0
        )
        conn.execute(
            "INSERT INTO memoria.memory_access (memory_id, tenant, access_count) VALUES (%s, 'acme', 1)", (theirs,)
        )
    for _ in range(2):
        response = two_tenants.query("Maya Novak Jonas Berg", tenant="globex")
        assert theirs in [m.memory_id for m in response.memories]
    assert two_tenants.settle(5)  # the access writes end after their queries (write-behind)
    with psycopg.connect(dsn) as conn:
        counts = dict(
            conn.execute("SELECT tenant, access_count FROM memoria.memory_access WHERE memory_id = %s", (theirs,))
        )
    assert counts["acme"] == 1 and counts["globex"] >= 3


# -- under data --------------------------------------------------------------------------------------


def snapshot(system: MemorySystem, dsn: str, tables: list[str]) -> dict:
    with psycopg.connect(dsn) as conn:
        counts = {t: conn.execute(f"SELECT count(*) FROM memoria.{t}").fetchone()[0] for t in tables}
        access = conn.execute(
            "SELECT tenant, memory_id, access_count FROM memoria.memory_access ORDER BY 1, 2"
        ).fetchall()
    answers = {
        (text, tenant): [m.memory_id for m in system.query(text, tenant=tenant, ranking=False).memories]
        for tenant in TENANTS
        for text in ("Maya Novak", "Jonas Berg Lisbon", "favourite colour teal")
    }
    return {"counts": counts, "access": access, "answers": answers}


PLAIN_TABLES = [
    "memories",
    "memory_terms",
    "bm25_terms",
    "bm25_docs",
    "entities",
    "memory_entities",
    "entity_edges",
    "memory_attributes",
    "query_traces",
    "query_trace_candidates",
    "memory_access",
]

# Rows raw SQL as memoria_app could write before 0009, each pointing at the other tenant's row.
CROSS_TENANT = [
    "INSERT INTO memoria.memory_access (memory_id, tenant, access_count) "
    "SELECT min(id), 'acme', 7 FROM memoria.memories WHERE tenant = 'globex' "
    "AND id NOT IN (SELECT memory_id FROM memoria.memory_access)",
    "INSERT INTO memoria.memory_entities (tenant, entity_id, memory_id, memory_type) "
    "SELECT 'acme', (SELECT min(id) FROM memoria.entities WHERE tenant = 'globex'), min(id), 'general' "
    "FROM memoria.memories WHERE tenant = 'acme'",
    "INSERT INTO memoria.entity_edges (tenant, src_id, dst_id, weight) "
    "SELECT 'acme', (SELECT min(id) FROM memoria.entities WHERE tenant = 'acme'), max(id), 1 "
    "FROM memoria.entities WHERE tenant = 'globex'",
    "INSERT INTO memoria.query_trace_candidates (trace_id, tenant, rank, memory_id, memory_type, sources, scores) "
    "SELECT min(id), 'acme', 99, 1, 'general', '{}', '{}' FROM memoria.query_traces WHERE tenant = 'globex'",
]


def test_0009_down_and_up_under_data_keeps_every_row_and_answer_and_removes_cross_tenant_rows(two_tenants, dsn):
    head = migrate.current(dsn)
    before = snapshot(two_tenants, dsn, PLAIN_TABLES)
    assert all(before["counts"].values()) and all(before["answers"].values())
    keys_head = keys(dsn)

    migrate.downgrade(dsn, "0008")
    with psycopg.connect(dsn) as conn:
        counts = {t: conn.execute(f"SELECT count(*) FROM memoria.{t}").fetchone()[0] for t in PLAIN_TABLES}
        # before 0017 each co-occurring pair was two rows, one per direction
        assert counts == before["counts"] | {"entity_edges": 2 * before["counts"]["entity_edges"]}
        assert keys(dsn)["memoria.memory_access memory_access_pkey"] == "PRIMARY KEY (memory_id)"
        for statement in CROSS_TENANT:  # as before 0009 the app role could (here as the admin)
            assert conn.execute(statement).rowcount == 1

    migrate.upgrade(dsn)
    assert migrate.current(dsn) == head and keys(dsn) == keys_head
    after = snapshot(two_tenants, dsn, PLAIN_TABLES)
    assert after == before  # the cross-tenant rows are gone, everything else is as it was
    # Writable and queryable as before, with the ingest's conflict targets on the new keys.
    result = two_tenants.store_many(
        [{"content": f"Maya Novak visited Jonas Berg again ({t}).", "tenant": t} for t in TENANTS]
        + [{"content": "Maya Novak met Jonas Berg in Lisbon (acme).", "tenant": "acme"}]  # a duplicate
    )
    assert result.inserted == 2 and result.duplicates == 1
    for tenant in TENANTS:
        assert two_tenants.query("Maya Novak Jonas Berg", tenant=tenant).memories
    for _ in range(2):  # the memory the cross-tenant access row pointed at: its ranked queries work
        assert "gardening" in two_tenants.query("gardening", tenant="globex").memories[0].content
