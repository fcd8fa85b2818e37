"""The partial index of memories whose validity is bounded also holds those that begin to hold after they were stored.

    memoria.memories_bounded  (tenant, id) INCLUDE (memory_type, valid_from, valid_to)
        WHERE valid_to IS NOT NULL OR valid_from > created_at

replaces 0018's memoria.memories_invalid (WHERE valid_to IS NOT NULL). A memory stored with a validity
start in the future ("Maya moves to Porto in March", valid_from = March) does not hold yet: a query as
of now must leave it out, as an `as_of` query before its start already did. The full final CTE reads
each candidate's row and checks it there; the first-rows form (query(..., candidates=False)) reads only
the rows it returns and learns which candidates do not hold now from this index, which until now held
only the memories that stopped holding. A memory that does not hold yet began after it was stored
(created_at is never in the future), so `valid_from > created_at` covers it; the query checks the start
against now(). Like 0018's, the index is small: on a memory store without lifecycle changes or future
starts it is empty.

CREATE INDEX on the partitioned parent blocks writes while it reads the table (seconds per million
memories): on a large database run the upgrade in a quiet period. The downgrade restores 0018's index.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-03
"""

from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE INDEX memories_bounded ON memoria.memories (tenant, id) INCLUDE (memory_type, valid_from, valid_to) "
        "WHERE valid_to IS NOT NULL OR valid_from > created_at"
    )
    op.execute("DROP INDEX memoria.memories_invalid")  # a partitioned index: every shard's goes with it


def downgrade() -> None:
    op.execute(
        "CREATE INDEX memories_invalid ON memoria.memories (tenant, id) INCLUDE (memory_type, valid_to) "
        "WHERE valid_to IS NOT NULL"
    )
    op.execute("DROP INDEX memoria.memories_bounded")
