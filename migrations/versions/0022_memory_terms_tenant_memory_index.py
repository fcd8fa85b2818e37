"""memory_terms_memory indexes (tenant, memory_id), not memory_id alone.

The final CTE's lexical feedback (sql/final_candidates.sql, issue #14) reads the postings of its first
candidates one memory at a time, by tenant and memory id. With the index on memory_id alone, a
planner without statistics for the table (a database loaded moments ago, before autovacuum's first
ANALYZE) combined it with the tenant prefix of memory_terms_impact in a BitmapAnd, or made the probes
one hash join over the tenant's every posting: 17 ms for the final CTE of a LoCoMo query instead of 3,
and for a large tenant far worse, and a cached generic plan keeps that until the next ANALYZE. An index
on both columns is the one the probe's conditions name, with or without statistics. Deletes and
rewrites, which find a memory's postings by tenant and id, use it as they used the old one.

Created on the partitioned parent, so every shard, present and future, gets it. CREATE INDEX blocks
writes to memory_terms while it builds (about a minute per 10M postings on two cores): on a large
database run the upgrade in a quiet period. The downgrade restores the index on memory_id.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-06
"""

from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Dropping a partitioned index drops the index of every partition with it.
    op.execute("DROP INDEX memoria.memory_terms_memory")
    op.execute("CREATE INDEX memory_terms_memory ON memoria.memory_terms (tenant, memory_id)")


def downgrade() -> None:
    op.execute("DROP INDEX memoria.memory_terms_memory")
    op.execute("CREATE INDEX memory_terms_memory ON memoria.memory_terms (memory_id)")
