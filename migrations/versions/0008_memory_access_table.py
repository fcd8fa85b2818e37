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

# The function of revision 0001 with the column list of the table as it is after this revision.
ADD_MEMORY_TYPE = r"""
CREATE OR REPLACE FUNCTION memoria.add_memory_type(type_name text) RETURNS boolean
LANGUAGE plpgsql AS $fn$
DECLARE
    mem_cols text := %(columns)s;
BEGIN
    IF type_name IS NULL OR type_name !~ '^[a-z][a-z0-9_]{0,40}$' THEN
        RAISE EXCEPTION 'invalid memory type %%: use lower-case letters, digits and underscores', type_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM memoria.memory_types WHERE name = type_name) THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TEMP TABLE _moved_memories ON COMMIT DROP AS SELECT %%s FROM memoria.memories_default WHERE memory_type = %%L', mem_cols, type_name);
    EXECUTE format('CREATE TEMP TABLE _moved_terms ON COMMIT DROP AS SELECT * FROM memoria.memory_terms_default WHERE memory_type = %%L', type_name);
    DELETE FROM memoria.memories_default WHERE memory_type = type_name;
    DELETE FROM memoria.memory_terms_default WHERE memory_type = type_name;
    EXECUTE format('CREATE TABLE memoria.%%I PARTITION OF memoria.memories FOR VALUES IN (%%L)',
                   'memories_' || type_name, type_name);
    EXECUTE format('CREATE TABLE memoria.%%I PARTITION OF memoria.memory_terms FOR VALUES IN (%%L)',
                   'memory_terms_' || type_name, type_name);
    EXECUTE format('INSERT INTO memoria.memories (%%s) SELECT %%s FROM _moved_memories', mem_cols, mem_cols);
    INSERT INTO memoria.memory_terms SELECT * FROM _moved_terms;
    DROP TABLE _moved_memories;
    DROP TABLE _moved_terms;
    INSERT INTO memoria.memory_types (name) VALUES (type_name);
    RETURN true;
END
$fn$;
"""

COLUMNS = ("'id, tenant, memory_type, external_id, dedup_key, content, context, metadata, importance,'"
           "\n                     ' pinned, created_at, last_accessed_at, access_count, embedding, doc_len'")
COLUMNS_0001 = ("'id, tenant, memory_type, external_id, dedup_key, content, metadata, importance,'"
                "\n                     ' pinned, created_at, last_accessed_at, access_count, embedding, doc_len'")


def upgrade() -> None:
    op.execute(ACCESS_TABLE)
    op.execute(ADD_MEMORY_TYPE % {"columns": COLUMNS})


def downgrade() -> None:
    op.execute(RESTORE_COLUMNS)
    op.execute(ADD_MEMORY_TYPE % {"columns": COLUMNS_0001})
