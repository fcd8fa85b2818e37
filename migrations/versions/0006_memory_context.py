"""The context a memory was stored with (MemoryRecord.context), kept beside its content.

A memory's context (the turns before it in a conversation, a document's title...) is indexed with
it: its terms are in the memory's BM25 postings and it is part of the embedding. Keeping the text
lets whoever inspects a candidate in SQL see why a term not in `content` matched, and lets postings
be rebuilt from the table alone. NULL for memories stored without one (and for every memory stored
before this revision). Adding a nullable column without a default rewrites nothing.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE memoria.memories ADD COLUMN context text")
    op.execute("COMMENT ON COLUMN memoria.memories.context IS "
               "'text that situates the memory; indexed with it (BM25 terms at a lower weight, embedding), not part of content'")


def downgrade() -> None:
    op.execute("ALTER TABLE memoria.memories DROP COLUMN context")
