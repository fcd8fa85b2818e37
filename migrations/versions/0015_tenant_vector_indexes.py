"""Per-tenant HNSW indexes for large tenants: the registry memoria.vector_indexes and who may keep it.

    memoria.vector_indexes (tenant, memory_type, index_name, rows_at_build, built_at)

The vector worker searches a tenant's memories of a type exactly up to vector_exact_max_rows and with
HNSW above. The one HNSW index of a shard holds every tenant's vectors, so a large tenant's search
walks a graph of which it owns one row in ten (at 1M memories, 10 tenants): the iterative scan wades
through other tenants' vectors and recall against exact search falls to ~0.6. A partial HNSW index
per (tenant, memory type), `... USING hnsw (embedding vector_cosine_ops) WHERE tenant = '<tenant>'`,
built on the shard's partition, is a graph of that tenant's vectors alone; the vector worker's HNSW
statement names the tenant as a value, so its custom plan proves the predicate and takes it.

Those indexes are built and dropped by `memoria-pg db vector-indexes` (memoria_pg/db/vector_indexes.py:
CREATE INDEX CONCURRENTLY on the partition, never in a migration, never on the query path); this table
records them, one row per index, keyed by the tenant like every tenant table. Row-level security as
in 0001. memoria_index_admin, a NOLOGIN NOBYPASSRLS role created here and granted to the user that runs
the migrations (as 0011 does for memoria_key_admin), reads every tenant's document counts
(memoria.bm25_docs, to find the large tenants) and keeps this table for every tenant: policies
index_admin, which apply to its members. memoria_app gets nothing here.

Downgrade drops every index the table records, then the table; the role is kept (other databases of
the server may use it).

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

INDEX_ADMIN = "memoria_index_admin"

TABLE = r"""
CREATE TABLE memoria.vector_indexes (
    tenant text NOT NULL,
    memory_type text NOT NULL,
    index_name text NOT NULL CHECK (index_name ~ '^memories_vec_[0-9a-f]{24}$'),
    rows_at_build bigint NOT NULL,
    built_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant, memory_type)
);
COMMENT ON TABLE memoria.vector_indexes IS
    'Per-tenant partial HNSW indexes (memoria-pg db vector-indexes), one per large (tenant, memory type)';
ALTER TABLE memoria.vector_indexes ENABLE ROW LEVEL SECURITY;
ALTER TABLE memoria.vector_indexes FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memoria.vector_indexes
    USING (tenant = current_setting('memoria.tenant', true))
    WITH CHECK (tenant = current_setting('memoria.tenant', true));
"""

INDEX_ADMIN_ROLE = r"""
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'memoria_index_admin') THEN
        CREATE ROLE memoria_index_admin NOLOGIN NOBYPASSRLS;
    END IF;
    IF NOT pg_catalog.pg_has_role(current_user, 'memoria_index_admin', 'USAGE') THEN
        EXECUTE pg_catalog.format('GRANT memoria_index_admin TO %I', current_user);
    END IF;
END
$do$;
GRANT USAGE ON SCHEMA memoria TO memoria_index_admin;
GRANT SELECT ON memoria.bm25_docs TO memoria_index_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON memoria.vector_indexes TO memoria_index_admin;
CREATE POLICY index_admin ON memoria.bm25_docs FOR SELECT TO memoria_index_admin USING (true);
CREATE POLICY index_admin ON memoria.vector_indexes TO memoria_index_admin USING (true) WITH CHECK (true);
"""

DROP_RECORDED = r"""
DO $do$
DECLARE
    name text;
BEGIN
    FOR name IN SELECT index_name FROM memoria.vector_indexes LOOP
        EXECUTE pg_catalog.format('DROP INDEX IF EXISTS memoria.%I', name);
    END LOOP;
END
$do$;
"""


def upgrade() -> None:
    op.execute(TABLE)
    op.execute(INDEX_ADMIN_ROLE)


def downgrade() -> None:
    # The migrating user reads every row through index_admin (it is a member of the role).
    op.execute(DROP_RECORDED)
    op.execute("DROP POLICY IF EXISTS index_admin ON memoria.bm25_docs")
    op.execute(f"REVOKE ALL ON memoria.bm25_docs FROM {INDEX_ADMIN}")
    op.execute("DROP TABLE memoria.vector_indexes")
    op.execute(f"REVOKE ALL ON SCHEMA memoria FROM {INDEX_ADMIN}")
