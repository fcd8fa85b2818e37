"""Indexes for metadata filters, deletes and the attribute worker.

GIN (jsonb_path_ops) on memories.metadata; b-trees on memory_terms.memory_id, entity_edges.dst_id
and memory_attributes (tenant, lower(subject)).

- `metadata @> '{"source": "email"}'` (and jsonpath `@?`/`@@`) filters use the GIN index
  (jsonb_path_ops: smaller and faster than the default opclass for containment, no key-exists `?`).
- Deleting or re-indexing a memory finds its BM25 postings by memory_id instead of scanning its
  shard's postings; deleting an entity finds the edges that point at it (the ON DELETE CASCADE of
  entity_edges.dst_id) instead of scanning every edge.
- The attribute worker looks subjects up by equality: under row-level security only leakproof
  operators (such as text equality) may be index conditions, so the trigram indexes of 0001 cannot
  serve it and it scanned every tenant's attributes.

All are created on the partitioned parents, so every shard, present and future (add_memory_type),
gets them. CREATE INDEX takes a lock that blocks writes while it builds: on a large database run the
upgrade in a quiet period.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

INDEXES = {
    "memories_metadata_gin": "memoria.memories USING gin (metadata jsonb_path_ops)",
    "memory_terms_memory": "memoria.memory_terms (memory_id)",
    "entity_edges_dst": "memoria.entity_edges (dst_id)",
    "memory_attributes_tenant_subject": "memoria.memory_attributes (tenant, lower(subject))",
}


def upgrade() -> None:
    for name, target in INDEXES.items():
        op.execute(f"CREATE INDEX {name} ON {target}")


def downgrade() -> None:
    for name in reversed(list(INDEXES)):
        # Dropping a partitioned index drops the index of every partition with it.
        op.execute(f"DROP INDEX memoria.{name}")
