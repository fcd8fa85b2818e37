"""A covering b-tree of each shard's vectors by tenant, for exact vector search of small tenants.

memories (tenant) INCLUDE (memory_type, id, embedding): the vector worker reads a tenant's vectors
from it with an index-only scan and computes the exact cosine distance of every one of them, when the
tenant holds at most `vector_exact_max_rows` memories in the shards the query reads. Measured at 100k
memories over 10 tenants and 6 shards (2 cores): 5.7 ms for an untyped query over a tenant's ~6,000
memories, against 14-16 ms for the HNSW scans under the tenant filter (one HNSW index per shard, most of
each graph belonging to other tenants) and 26 ms for the same exact search through the heap, where
pgvector stores the vectors out of line (TOAST): every row would cost two extra index and heap probes.
The HNSW indexes stay for tenants above the threshold.

The vectors are stored a second time (about 1.6 kB per memory). Created on the partitioned parent, so
every shard, present and future (add_memory_type), gets one. CREATE INDEX blocks writes while it builds
(a few seconds per 100k memories on 2 cores): on a large database run the upgrade in a quiet period.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

INDEX = "memories_tenant_embedding"


def upgrade() -> None:
    op.execute(f"CREATE INDEX {INDEX} ON memoria.memories (tenant) INCLUDE (memory_type, id, embedding)")


def downgrade() -> None:
    # Dropping a partitioned index drops the index of every partition with it.
    op.execute(f"DROP INDEX memoria.{INDEX}")
