"""Per-tenant HNSW indexes over half-precision vectors: memoria.vector_indexes records them too.

    CREATE INDEX CONCURRENTLY memories_vh_<hash> ON memoria.memories_<type>
        USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops) WITH (m = 16, ef_construction = 64)
        WHERE tenant = '<tenant>'

A large tenant's own HNSW index (0015) is built by `memoria-pg db vector-indexes` (and by `db upgrade`
right after migrating, `serve`, `ingest` and the library's IndexKeeper), never in a migration. From this
release on it indexes the vectors cast to halfvec: half the size (what must stay in memory), fewer
bytes read per search, the same recall (README, "Why these defaults"). The memories keep their vectors
in full precision, and the distances the worker returns are those. This revision only lets the registry
name the new form (memories_vh_<hash>, a hash of the memory type and the tenant that the query's lookup
computes in SQL); the next sync builds each recorded index of the old form (memories_vec_<hash>) again
in the new one and drops the old. Meanwhile the query path searches the old index as before: its lookup
tells the vector worker which types have a valid index of the new form, and only those are searched
with it (sql/workers/vector_half.sql; the others with sql/workers/vector.sql, which the old index serves).

The downgrade drops the indexes of the new form (the library before this revision cannot use them; its
sync builds full-precision ones again) and their rows, then restores the registry's check.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

CHECK = "vector_indexes_index_name_check"

DROP_HALF = r"""
DO $do$
DECLARE
    name text;
BEGIN
    FOR name IN SELECT index_name FROM memoria.vector_indexes WHERE index_name LIKE 'memories\_vh\_%' LOOP
        EXECUTE pg_catalog.format('DROP INDEX IF EXISTS memoria.%I', name);
    END LOOP;
    DELETE FROM memoria.vector_indexes WHERE index_name LIKE 'memories\_vh\_%';
END
$do$;
"""


def upgrade() -> None:
    op.execute(f"ALTER TABLE memoria.vector_indexes DROP CONSTRAINT {CHECK}")
    op.execute(
        f"ALTER TABLE memoria.vector_indexes ADD CONSTRAINT {CHECK} "
        "CHECK (index_name ~ '^memories_(vec|vh)_[0-9a-f]{24}$')"
    )


def downgrade() -> None:
    # The migrating user reads and deletes every tenant's rows through index_admin (0015).
    op.execute(DROP_HALF)
    op.execute(f"ALTER TABLE memoria.vector_indexes DROP CONSTRAINT {CHECK}")
    op.execute(
        f"ALTER TABLE memoria.vector_indexes ADD CONSTRAINT {CHECK} CHECK (index_name ~ '^memories_vec_[0-9a-f]{{24}}$')"
    )
