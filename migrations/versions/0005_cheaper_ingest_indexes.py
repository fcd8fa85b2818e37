"""Cheaper index maintenance on ingest: HNSW rebuilt with m = 8 (was 16), the unread tsvector GIN dropped.

- `memories_embedding_hnsw` is rebuilt WITH (m = 8, ef_construction = 64). An HNSW insert searches the
  graph and then rewrites the neighbour lists of up to 2m neighbours, each its own WAL record: with
  m = 16 that was most of an ingest's server time. Measured over 100k synthetic memories in six shards
  (2 cores, server CPU per inserted vector, batches of 500): m = 16 / ef_construction = 64 1.13 ms,
  m = 16 / 32 0.82 ms, m = 8 / 64 0.63 ms, m = 8 / 32 0.45 ms; recall@10 of the vector worker's
  statement under a 10% tenant filter (ef_search 100, iterative scan) against the exact order:
  0.798, 0.735, 0.781, 0.684. m = 8 with ef_construction kept at 64 keeps nearly all the recall for
  45% less CPU. Since 0004, tenants with up to vector_exact_max_rows memories in a shard are searched
  exactly and never read the HNSW index; it serves the large ones.
- `memories_tsv_gin` is dropped: no statement of the library can use it. The library runs as
  memoria_app under row-level security, where only leakproof operators may be index conditions and
  tsvector `@@` is not one; the phrase worker finds its candidates through the BM25 postings
  (memory_terms) and checks `tsv @@ phraseto_tsquery(...)` on those rows only. The generated `tsv`
  column stays (the phrase worker reads it). An administrator who runs full-text queries as a superuser
  can create the index again: CREATE INDEX ON memoria.memories USING gin (tsv).

Both are changed on the partitioned parent, so every shard, present and future (add_memory_type),
follows. Rebuilding the HNSW indexes of a populated database takes a while (an in-memory build per
shard within maintenance_work_mem, much faster than the inserts that made them) and blocks writes
meanwhile: on a large database run the upgrade in a quiet period. The downgrade restores 0001's
indexes (m = 16, ef_construction = 64, and the GIN), again by a rebuild.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

HNSW = "memories_embedding_hnsw"
TSV_GIN = "memories_tsv_gin"


def _hnsw(m: int, ef_construction: int) -> None:
    # Dropping a partitioned index drops the index of every partition with it.
    op.execute(f"DROP INDEX memoria.{HNSW}")
    op.execute(f"CREATE INDEX {HNSW} ON memoria.memories USING hnsw (embedding vector_cosine_ops) "
               f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})")


def upgrade() -> None:
    op.execute(f"DROP INDEX memoria.{TSV_GIN}")
    _hnsw(8, 64)


def downgrade() -> None:
    _hnsw(16, 64)
    op.execute(f"CREATE INDEX {TSV_GIN} ON memoria.memories USING gin (tsv)")
