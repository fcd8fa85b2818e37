"""Co-occurrence within a window: an entity pairs with the entities mentioned near it, not with all.

Until now every pair of entities a memory mentions got a co-occurrence (an entity_edges upsert in each
direction): k entities, k(k-1) upserts. A conversation turn names one or two entities; a scientific
abstract names a dozen and some name forty (SciFact: 12.6 entities and 185 directed pairs per memory on
average), and those upserts were 14 of the 17 ms of server CPU an abstract cost to ingest
(results/ingest/, benchmarks/ingest_real.py). A pair of entities forty names apart in an abstract says
little about either; two names in the same phrase say much.

    memoria.memory_entities.ordinal smallint
        the entity's place among the memory's distinct entities in text order (the speaker first);
        NULL for mentions stored before this revision
    memoria.co_occurs(a smallint, b smallint) -> boolean
        whether two mentions of one memory count as a co-occurrence: their ordinals are at most
        COOCCURRENCE_WINDOW (3) apart, or either is NULL (a memory stored before this revision keeps
        every pair, as it was counted)

sql/ingest/insert_entities.sql stores the ordinal and counts the pairs memoria.co_occurs accepts;
memoria.remove_derived (0012's, re-created here) subtracts exactly those. A memory of up to
COOCCURRENCE_WINDOW + 1 entities keeps every pair, as before; beyond that each entity has at most
2 * COOCCURRENCE_WINDOW partners, so the upkeep grows linearly in the memory's entities. Existing edges
are not recounted (their memories keep every pair until they are updated or deleted).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

COOCCURRENCE_WINDOW = 3
# A SQL-standard body: bound when created (no search_path at run time) and inlined into the queries
# that call it (a SET clause would prevent that; it is evaluated once per pair of mentions).
CO_OCCURS = f"""
CREATE FUNCTION memoria.co_occurs(a smallint, b smallint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN a IS NULL OR b IS NULL OR abs(a - b) <= {COOCCURRENCE_WINDOW};
COMMENT ON FUNCTION memoria.co_occurs(smallint, smallint) IS
    'whether two mentions of one memory (their ordinals) count as a co-occurrence (migration 0013)';
"""
OLD_PAIRS = "ON b.memory_id = a.memory_id AND b.entity_id <> a.entity_id AND b.tenant = v_tenant"
NEW_PAIRS = (
    "ON b.memory_id = a.memory_id AND b.entity_id <> a.entity_id AND b.tenant = v_tenant\n"
    "           AND memoria.co_occurs(a.ordinal, b.ordinal)"
)
SIGNATURE = "memoria.remove_derived(bigint[], boolean, text[], text[])"


def _migration_0012() -> ModuleType:
    path = Path(__file__).with_name("0012_removal_single_valued_keys.py")
    spec = importlib.util.spec_from_file_location("memoria_migration_0012", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _remove_derived(windowed: bool) -> str:
    """0012's four-argument remove_derived as a CREATE OR REPLACE, counting pairs through co_occurs."""
    text = _migration_0012()._four_arguments()
    assert text.count("CREATE FUNCTION memoria.remove_derived(") == 1, "0012's remove_derived changed"
    text = text.replace("CREATE FUNCTION memoria.remove_derived(", "CREATE OR REPLACE FUNCTION memoria.remove_derived(")
    if windowed:
        assert text.count(OLD_PAIRS) == 1, "0010's pair count in remove_derived changed"
        text = text.replace(OLD_PAIRS, NEW_PAIRS)
    return text


def upgrade() -> None:
    op.execute("ALTER TABLE memoria.memory_entities ADD COLUMN ordinal smallint")
    op.execute(
        "COMMENT ON COLUMN memoria.memory_entities.ordinal IS "
        "'the entity''s place among the memory''s distinct entities in text order (NULL: stored before 0013)'"
    )
    op.execute(CO_OCCURS)
    op.execute("GRANT EXECUTE ON FUNCTION memoria.co_occurs(smallint, smallint) TO memoria_app")
    op.execute(_remove_derived(windowed=True))  # keeps 0012's grants; CREATE OR REPLACE resets its settings
    op.execute(f"ALTER FUNCTION {SIGNATURE} SET plan_cache_mode = force_generic_plan")


def downgrade() -> None:
    op.execute(_remove_derived(windowed=False))
    op.execute(f"ALTER FUNCTION {SIGNATURE} SET plan_cache_mode = force_generic_plan")
    op.execute("DROP FUNCTION memoria.co_occurs(smallint, smallint)")
    op.execute("ALTER TABLE memoria.memory_entities DROP COLUMN ordinal")
