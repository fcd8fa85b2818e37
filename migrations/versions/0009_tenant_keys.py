"""Keys with the tenant: every unique key, conflict target and foreign key of a tenant table includes the
tenant, and memoria_app can no longer choose ids.

Keys that left the tenant out let one tenant's rows collide with another's under row-level security
(the unique check sees every row, the policy does not): one memory_access row with another tenant's
memory id made that tenant's ranked queries fail for good (their access upsert hit a row the policy
hides), and memory_entities / entity_edges rows, or a memory with a chosen id, did the same through raw
SQL as memoria_app. Foreign keys to entities(id) and query_traces(id) answered, for any id, whether some
tenant has it (referential checks bypass row-level security). Now:

    memories                 PRIMARY KEY (tenant, id, memory_type)         was (id, memory_type)
    entities                 PRIMARY KEY (tenant, id)                      was (id)
    memory_entities          PRIMARY KEY (tenant, entity_id, memory_id)    was (entity_id, memory_id)
                             FOREIGN KEY (tenant, entity_id) -> entities (tenant, id)
    entity_edges             PRIMARY KEY (tenant, src_id, dst_id)          was (src_id, dst_id)
                             FOREIGN KEYS (tenant, src_id), (tenant, dst_id) -> entities (tenant, id)
    memory_attributes        PRIMARY KEY (tenant, id)                      was (id)
    query_traces             PRIMARY KEY (tenant, id)                      was (id)
    query_trace_candidates   PRIMARY KEY (tenant, trace_id, rank)          was (trace_id, rank)
                             FOREIGN KEY (tenant, trace_id) -> query_traces (tenant, id)
    memory_access            PRIMARY KEY (tenant, memory_id)               was (memory_id)

(memories' (tenant, memory_type, dedup_key), entities' (tenant, norm_name) and the BM25 statistics' keys
had the tenant already.) A foreign key now finds only the inserting tenant's row, so inserting another
tenant's id fails exactly as an id nobody has. The constraints keep their names and ON DELETE CASCADE;
the ingest's conflict targets (sql/ingest/insert_entities.sql) and the access upsert
(sql/record_access.sql, which now takes its ids from memories, under row-level security) name the new
keys, so each upsert is still served by a unique index.

Ids. memoria_app held INSERT and UPDATE on whole tables, so it could choose memories.id, entities.id,
memory_attributes.id and query_traces.id (an id another tenant would draw from the sequence next). It now
holds them on every column but `id` (and the generated columns, which nobody writes): ids come from
their sequences only. A later migration that adds a column memoria_app writes to one of these tables
grants it on that column. (Identity columns would not do: OVERRIDING SYSTEM VALUE needs only INSERT.)

Rows that pointed at another tenant's row (a memory_access row for a memory that is not its tenant's, a
mention or an edge whose entity is another tenant's, a trace candidate of another tenant's trace) can
only have come from raw SQL; they are deleted, since the new foreign keys could not hold with them
(row-level security is relaxed for the table owner for that, within this migration's transaction).

Cost: every primary key is rebuilt (memories' on every shard) and the foreign keys are validated, under
locks that block writes: a few seconds per million memories on 2 cores; run it in a quiet period. The
downgrade restores 0008's keys, foreign keys and table privileges exactly (the deleted rows are not
restored).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

APP_ROLE = "memoria_app"

# table -> (primary key before, after); the constraint keeps its name <table>_pkey.
PRIMARY_KEYS = {
    "memories": ("id, memory_type", "tenant, id, memory_type"),
    "entities": ("id", "tenant, id"),
    "memory_entities": ("entity_id, memory_id", "tenant, entity_id, memory_id"),
    "entity_edges": ("src_id, dst_id", "tenant, src_id, dst_id"),
    "memory_attributes": ("id", "tenant, id"),
    "query_traces": ("id", "tenant, id"),
    "query_trace_candidates": ("trace_id, rank", "tenant, trace_id, rank"),
    "memory_access": ("memory_id", "tenant, memory_id"),
}
# (table, constraint, columns before, after, referenced table, its columns before, after)
FOREIGN_KEYS = (
    ("memory_entities", "memory_entities_entity_id_fkey", "entity_id", "tenant, entity_id",
     "entities", "id", "tenant, id"),
    ("entity_edges", "entity_edges_src_id_fkey", "src_id", "tenant, src_id", "entities", "id", "tenant, id"),
    ("entity_edges", "entity_edges_dst_id_fkey", "dst_id", "tenant, dst_id", "entities", "id", "tenant, id"),
    ("query_trace_candidates", "query_trace_candidates_trace_id_fkey", "trace_id", "tenant, trace_id",
     "query_traces", "id", "tenant, id"),
)  # fmt: skip
# Tables whose id memoria_app must not choose: it gets INSERT and UPDATE on their other columns.
ID_TABLES = ("memories", "entities", "memory_attributes", "query_traces")

# Rows that point at another tenant's row (raw SQL as memoria_app could write them before this revision).
CROSS_TENANT_ROWS = """
DELETE FROM memoria.memory_access a
WHERE NOT EXISTS (SELECT 1 FROM memoria.memories m WHERE m.id = a.memory_id AND m.tenant = a.tenant);
DELETE FROM memoria.memory_entities me
WHERE NOT EXISTS (SELECT 1 FROM memoria.entities e WHERE e.id = me.entity_id AND e.tenant = me.tenant);
DELETE FROM memoria.entity_edges ed
WHERE NOT EXISTS (SELECT 1 FROM memoria.entities e WHERE e.id = ed.src_id AND e.tenant = ed.tenant)
   OR NOT EXISTS (SELECT 1 FROM memoria.entities e WHERE e.id = ed.dst_id AND e.tenant = ed.tenant);
DELETE FROM memoria.query_trace_candidates c
WHERE NOT EXISTS (SELECT 1 FROM memoria.query_traces t WHERE t.id = c.trace_id AND t.tenant = c.tenant);
"""
CLEANED = ("memory_access", "memory_entities", "entity_edges", "query_trace_candidates")


def _keys(which: int) -> None:
    """Foreign keys dropped, primary keys replaced, foreign keys added: 0008's (which=0) or 0009's (1)."""
    for table, name, *_ in FOREIGN_KEYS:
        op.execute(f"ALTER TABLE memoria.{table} DROP CONSTRAINT {name}")
    for table, columns in PRIMARY_KEYS.items():
        op.execute(
            f"ALTER TABLE memoria.{table} DROP CONSTRAINT {table}_pkey, "
            f"ADD CONSTRAINT {table}_pkey PRIMARY KEY ({columns[which]})"
        )
    for table, name, before, after, target, target_before, target_after in FOREIGN_KEYS:
        columns, referenced = (before, target_before) if which == 0 else (after, target_after)
        op.execute(
            f"ALTER TABLE memoria.{table} ADD CONSTRAINT {name} FOREIGN KEY ({columns}) "
            f"REFERENCES memoria.{target} ({referenced}) ON DELETE CASCADE"
        )


def _writable_columns(table: str) -> str:
    """The table's columns but `id` and the generated ones, in column order."""
    rows = (
        op.get_bind()
        .exec_driver_sql(
            "SELECT quote_ident(attname) FROM pg_catalog.pg_attribute "
            "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped AND attgenerated = '' "
            "AND attname <> 'id' ORDER BY attnum",
            (f"memoria.{table}",),
        )
        .fetchall()
    )
    return ", ".join(r[0] for r in rows)


def upgrade() -> None:
    # Row-level security is forced on these tables, also for their owner (a migrating user that is not
    # a superuser would see no row): relaxed for the cleanup, forced again before the commit.
    for table in CLEANED:
        op.execute(f"ALTER TABLE memoria.{table} NO FORCE ROW LEVEL SECURITY")
    op.execute(CROSS_TENANT_ROWS)
    for table in CLEANED:
        op.execute(f"ALTER TABLE memoria.{table} FORCE ROW LEVEL SECURITY")
    _keys(1)
    for table in ID_TABLES:
        columns = _writable_columns(table)
        # Revoking the table privilege first: a column grant beside it would change nothing.
        op.execute(f"REVOKE INSERT, UPDATE ON memoria.{table} FROM {APP_ROLE}")
        op.execute(f"GRANT INSERT ({columns}), UPDATE ({columns}) ON memoria.{table} TO {APP_ROLE}")


def downgrade() -> None:
    for table in ID_TABLES:
        # Revoking a table privilege revokes the column privileges of the same kind too (0001's grants).
        op.execute(f"REVOKE INSERT, UPDATE ON memoria.{table} FROM {APP_ROLE}")
        op.execute(f"GRANT INSERT, UPDATE ON memoria.{table} TO {APP_ROLE}")
    _keys(0)
