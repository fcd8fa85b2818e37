"""The shards' shared HNSW index goes: only the large tenants' own indexes (0015) remain.

`memories_embedding_hnsw` (0001, m = 8 since 0005) holds every tenant's vectors, and every memory
stored paid its insert (a graph search, then up to 2m neighbour lists rewritten, each its own WAL
record), although since 0004 a tenant with at most vector_exact_max_rows memories in a type is
searched there exactly and never reads it, and since 0015 a tenant above the bound searches the graph
of its own vectors that `memoria-pg db vector-indexes` builds. Its remaining readers were V3's one
statement (on a generic plan, which cannot take a tenant's own index) for large tenants, and a large
tenant without its own graph (grown past the bound since the last sync, a deployment that never
syncs, vector_exact_max_rows 0). Such a tenant's HNSW statement now runs as an exact search (the
planner's only path: the covering index of 0004, then a sort), with no recall loss, until the sync
gives it its own graph; V3 searches a large tenant with the vector worker. `memoria-pg db upgrade` runs that sync right after this
migration, and `memoria-pg serve` and `memoria-pg ingest` keep it up to date (README, "Scale and
latency").

Dropping the partitioned index drops every partition's, present and future (add_memory_type). The
downgrade builds it again on every partition (unless an administrator already did, under this name),
which takes a while on a large database and blocks writes meanwhile (an in-memory build per shard
within maintenance_work_mem). An administrator who wants a shared graph back without downgrading (say,
many tenants just above the bound and no sync) can create it the same way; the planner may then take
it, by cost, for a large tenant without its own (README, "Scale and latency").

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

HNSW = "memories_embedding_hnsw"


def upgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS memoria.{HNSW}")


def downgrade() -> None:
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {HNSW} ON memoria.memories USING hnsw (embedding vector_cosine_ops) "
        "WITH (m = 8, ef_construction = 64)"
    )
