"""Access statistics in their own table, beside `memories`; add_memory_type keeps a memory's context.

Ranked queries count an access on every memory they return. Kept as columns of `memories`, each
count was an UPDATE of the memory's row: a new row version in the shard, its page no longer
all-visible, so the vector worker's exact search (an index-only scan of the covering index
memories (tenant) INCLUDE (memory_type, id, embedding), revision 0004) had to visit the heap for it
until VACUUM ran - measured at 100k memories: p95 8.8 -> 34.8 ms after 20,000 ranked queries. And a
VACUUM of a shard has to scan its HNSW index, the most expensive index to vacuum. Now
`memoria.memory_access` (memory_id, tenant, access_count, last_accessed_at) takes the upserts: a
narrow table that no search reads, under the same row-level security as every tenant table. The
final CTE joins it (a memory never returned has no row: count 0, never accessed).

The counts already stored are copied over. The columns memories.access_count and last_accessed_at
stay, no longer maintained (commented so), for a library of an older version that still runs
against the upgraded database during a rolling deploy; a later revision drops them. This library
needs this revision: below it a query raises SchemaError asking for `memoria-pg db upgrade`.

`memoria.add_memory_type` copied memories out of the default
partition column by column and its list had no `context` (revision 0006): a memory of a type added
later lost its context. Its new definition lists the columns as they are now.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""
import importlib.util
from pathlib import Path

from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

ACCESS_TABLE = """
CREATE TABLE memoria.memory_access (
    memory_id bigint PRIMARY KEY,
    tenant text NOT NULL,
    access_count integer NOT NULL DEFAULT 0,
    last_accessed_at timestamptz
);
COMMENT ON TABLE memoria.memory_access IS
    'how often ranked queries returned each memory (memories.id), and when last; no row = never';
INSERT INTO memoria.memory_access (memory_id, tenant, access_count, last_accessed_at)
SELECT id, tenant, access_count, last_accessed_at FROM memoria.memories
WHERE access_count > 0 OR last_accessed_at IS NOT NULL;
ALTER TABLE memoria.memory_access ENABLE ROW LEVEL SECURITY;
ALTER TABLE memoria.memory_access FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memoria.memory_access
    USING (tenant = current_setting('memoria.tenant', true))
    WITH CHECK (tenant = current_setting('memoria.tenant', true));
GRANT SELECT, INSERT, UPDATE, DELETE ON memoria.memory_access TO memoria_app;
COMMENT ON COLUMN memoria.memories.access_count IS 'not maintained since revision 0008: see memoria.memory_access';
COMMENT ON COLUMN memoria.memories.last_accessed_at IS 'not maintained since revision 0008: see memoria.memory_access';
"""

RESTORE_COLUMNS = """
UPDATE memoria.memories m SET access_count = a.access_count, last_accessed_at = a.last_accessed_at
FROM memoria.memory_access a
WHERE m.id = a.memory_id
  AND (m.access_count, m.last_accessed_at) IS DISTINCT FROM (a.access_count, a.last_accessed_at);
COMMENT ON COLUMN memoria.memories.access_count IS NULL;
COMMENT ON COLUMN memoria.memories.last_accessed_at IS NULL;
DROP TABLE memoria.memory_access;
"""

OLD_COLUMNS = "' pinned, created_at, last_accessed_at, access_count, embedding, doc_len'"
NEW_COLUMNS = "' pinned, created_at, last_accessed_at, access_count, embedding, doc_len, context'"


def _add_memory_type_0001() -> str:
    """0001's CREATE FUNCTION memoria.add_memory_type, as a CREATE OR REPLACE (its text is read from
    0001, so the downgrade restores exactly what 0001 created)."""
    path = Path(__file__).with_name("0001_initial_schema.py")
    spec = importlib.util.spec_from_file_location("memoria_migration_0001", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    schema = module.SCHEMA
    start = schema.index("CREATE FUNCTION memoria.add_memory_type")
    end = schema.index("$fn$;", start) + len("$fn$;")
    function = schema[start:end].replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION", 1)
    assert OLD_COLUMNS in function, "0001's add_memory_type column list changed"
    return function


def upgrade() -> None:
    op.execute(ACCESS_TABLE)
    op.execute(_add_memory_type_0001().replace(OLD_COLUMNS, NEW_COLUMNS))


def downgrade() -> None:
    op.execute(RESTORE_COLUMNS)
    op.execute(_add_memory_type_0001())
