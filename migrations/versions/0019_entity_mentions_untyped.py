"""The graph walk's mentions step reads an entity's most recent memories directly, not type by type.

    memoria.memory_entities  PRIMARY KEY (tenant, entity_id, memory_id) INCLUDE (memory_type)

Each entity the graph worker reaches offers its `entity_memories` (Config.graph_entity_memories, 100)
most recent memories. Since migration 0007 an untyped walk read them type by type, from the index
(entity_id, memory_type, memory_id), up to 100 per memory type, then merged the six lists and kept 100:
up to 600 index entries read and sorted per reached entity, most of a 100k graph statement's time
(17 entities x 6 types x 88 entries in one traced walk). The primary key already orders an entity's
memories by id within the tenant; with the memory type as an included column it answers the untyped
step by one backward index-only scan that stops after 100 entries. A typed walk keeps 0007's index,
now read directly for its one type. The rows and their order are the same (the 100 largest ids of the
entity's memories, of every type or of the one asked for).

No new index: the primary key is rebuilt with one more column (ALTER TABLE ... DROP CONSTRAINT, ADD
CONSTRAINT in one statement; the ingest's ON CONFLICT (tenant, entity_id, memory_id) names the same
key). The rebuild blocks writes to memory_entities while it reads the table (about 2 s for 1.2M rows on
2 cores): on a large database run the upgrade in a quiet period. With the AGE graph, memoria.graph_walk
(0007, edited by 0017) gets the same edit by CREATE OR REPLACE, which keeps its owner and grants. The
downgrade restores 0017's function and the key without the included column.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

KEY = "memory_entities_pkey"

# memoria.graph_walk's mentions step, before and after (the function's variables: r.entity_id, v_tenant,
# type_filter, entity_memories).
MENTIONS = (
    r"""        CROSS JOIN LATERAL (
            SELECT x.memory_id, x.memory_type
            FROM memoria.memory_types t
            CROSS JOIN LATERAL (
                SELECT me.memory_id, me.memory_type FROM memoria.memory_entities me
                WHERE me.entity_id = r.entity_id AND me.memory_type = t.name AND me.tenant = v_tenant
                ORDER BY me.memory_id DESC
                LIMIT entity_memories
            ) x
            WHERE type_filter IS NULL OR t.name = type_filter
            ORDER BY x.memory_id DESC
            LIMIT entity_memories
        ) m
    )""",
    r"""        CROSS JOIN LATERAL (
            SELECT me.memory_id, me.memory_type FROM memoria.memory_entities me
            WHERE me.tenant = v_tenant AND me.entity_id = r.entity_id AND type_filter IS NULL
            ORDER BY me.memory_id DESC
            LIMIT entity_memories
        ) m
        UNION ALL
        SELECT r.hops, m.memory_id, m.memory_type
        FROM reached r
        CROSS JOIN LATERAL (
            SELECT me.memory_id, me.memory_type FROM memoria.memory_entities me
            WHERE me.entity_id = r.entity_id AND me.memory_type = type_filter AND me.tenant = v_tenant
            ORDER BY me.memory_id DESC
            LIMIT entity_memories
        ) m
    )""",
)


def _migration(name: str) -> ModuleType:
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"memoria_migration_{name[:4]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _graph_walk(untyped_key: bool) -> str:
    """0017's memoria.graph_walk (a CREATE OR REPLACE), with this revision's mentions step when asked."""
    text = _migration("0017_cooccurrence_pairs_once.py")._graph_functions(once=True)[1]
    assert "CREATE OR REPLACE FUNCTION memoria.graph_walk(" in text, "0017's graph_walk changed"
    if untyped_key:
        old, new = MENTIONS
        assert text.count(old) == 1, "the mentions step of graph_walk changed"
        text = text.replace(old, new)
    return text


def _key(include_type: bool) -> str:
    include = " INCLUDE (memory_type)" if include_type else ""
    return (
        f"ALTER TABLE memoria.memory_entities DROP CONSTRAINT {KEY}, "
        f"ADD CONSTRAINT {KEY} PRIMARY KEY (tenant, entity_id, memory_id){include}"
    )


def upgrade() -> None:
    op.execute(_key(include_type=True))
    if _migration("0017_cooccurrence_pairs_once.py")._graph_exists():
        op.execute(_graph_walk(untyped_key=True))


def downgrade() -> None:
    if _migration("0017_cooccurrence_pairs_once.py")._graph_exists():
        op.execute(_graph_walk(untyped_key=False))
    op.execute(_key(include_type=False))
