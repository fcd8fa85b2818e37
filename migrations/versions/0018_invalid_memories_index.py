"""A partial index of the memories that stopped holding (valid_to set): the first-rows final CTE counts them out.

    memoria.memories_invalid  (tenant, id) INCLUDE (memory_type, valid_to) WHERE valid_to IS NOT NULL

A retrieval-only query that returns top_k memories and no candidate list (query(..., candidates=False))
reads only the rows it can return (query/candidates.py, _TOP_EDITS). Until now it read the row of every
candidate (up to 200): the rows it leaves out must be counted (the response's candidate count, and
whether the rows read are the first of the whole list) and a candidate no longer valid at the query
time is neither returned nor counted, which only its row could tell. With this index the statement
finds the candidates that stopped holding (invalidated, superseded, or valid only until a past time)
among its candidate ids in one probe per shard of an index that holds those memories only, leaves them
out of the ordered list, and reads the rows of the first top_k others: 10 rows instead of 200. A row
read is a random heap access; at 1M memories, where the heap no longer fits the buffer cache, the 200
of them were most of the statement's time.

Small: it holds the memories whose valid_to is set, not the others (on a memory store without
lifecycle changes, none). Writes that set valid_to (invalidate, supersede, update's end of the old
version) add an entry; the rest pay nothing. Created on the partitioned parent, so every shard,
present and future, has it; CREATE INDEX blocks writes while it reads the table (seconds per million
memories): on a large database run the upgrade in a quiet period. The downgrade drops it; the library
of before this revision never reads it.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

INDEX = "memories_invalid"


def upgrade() -> None:
    op.execute(
        f"CREATE INDEX {INDEX} ON memoria.memories (tenant, id) INCLUDE (memory_type, valid_to) "
        "WHERE valid_to IS NOT NULL"
    )


def downgrade() -> None:
    # Dropping a partitioned index drops the index of every partition with it.
    op.execute(f"DROP INDEX memoria.{INDEX}")
