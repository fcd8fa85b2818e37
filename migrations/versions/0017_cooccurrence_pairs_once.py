"""Each co-occurring pair of entities is one edge row (src_id < dst_id), not two; the walks read both ends.

Until now memoria.entity_edges held every co-occurrence twice, (a, b) and (b, a) with the same weight,
and the AGE mirror held two RELATED edges per pair: half of the rows an ingest wrote were copies. On
SciFact abstracts (about 60 co-occurrences counted per abstract, most of them new rows: heap, primary
key and dst index entries) the entity statement cost 1.25 ms of server CPU per abstract, against 0.91
with each pair stored once; with the AGE mirror on, a whole abstract's server CPU went from 4.02 to 3.43
ms (results/ingest/, benchmarks/ingest_real.py). The table was also bigger than the memories'.

    memoria.entity_edges
        one row per unordered pair, src_id < dst_id (CHECK entity_edges_one_row_per_pair); weight as
        before (the number of co-occurrences counted for the pair)
    memoria_graph."RELATED"
        one edge per pair, from the entity with the smaller entity_id; index related_edge_end (end_id)
        for the walk's other direction
    sql/ingest/insert_entities.sql, memoria.remove_derived, memoria.graph_sync
        count, subtract and mirror each pair once (a.entity_id < b.entity_id)
    sql/workers/graph.sql, memoria.graph_walk
        an entity's neighbours are the other ends of the edges it starts and of those it ends (dst
        index entity_edges_dst, related_edge_end): the fan-out's order (weight desc, then entity id)
        and so every walk's rows are the same as before
    memoria.graph_forget, memoria.graph_rebuild
        unchanged: they mirror entity_edges row by row

The data: the reverse rows (src_id > dst_id) go; a pair stored only that way (none in a database the
library wrote) is turned around first. The downgrade writes the reverse rows (and RELATED edges) back.
On 100k memories of the benchmarks' realistic corpus (2.58M edge rows before, 1.29M after) the upgrade
took 6.8 s and the downgrade 14.2 s, writes to the table waiting meanwhile; the deleted half is free
space for the table's next rows (a VACUUM FULL would give it back to the system).
Library versions before this migration would count the pairs both ways again (the CHECK refuses their
writes): upgrade the library and the schema together.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

CHECK = "entity_edges_one_row_per_pair"
REMOVE_DERIVED = "memoria.remove_derived(bigint[], boolean, text[], text[])"
RELATED_END = "related_edge_end"

# The edits of the functions as migrations 0003, 0007 and 0013 left them; each fragment must be there once.
PAIRS_REMOVED = (
    "ON b.memory_id = a.memory_id AND b.entity_id <> a.entity_id AND b.tenant = v_tenant\n"
    "           AND memoria.co_occurs(a.ordinal, b.ordinal)",
    "ON b.memory_id = a.memory_id AND b.entity_id > a.entity_id AND b.tenant = v_tenant\n"
    "           AND memoria.co_occurs(a.ordinal, b.ordinal)",
)
PAIRS_SYNCED = (
    "ON b.memory_id = a.memory_id AND b.entity_id <> a.entity_id\n    ) p",
    "ON b.memory_id = a.memory_id AND b.entity_id > a.entity_id\n    ) p",
)
FANOUT = (
    r"""            SELECT e.end_id, nv.entity_id
            FROM memoria_graph."RELATED" e
            CROSS JOIN LATERAL (
                SELECT ag_catalog.agtype_object_field_text(v.properties, 'entity_id')::bigint AS entity_id
                FROM memoria_graph."Entity" v
                WHERE v.id OPERATOR(ag_catalog.=) e.end_id
                  AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant
                OFFSET 0
            ) nv
            WHERE e.start_id OPERATOR(ag_catalog.=) w.entity_gid
            ORDER BY ag_catalog.agtype_object_field_text(e.properties, 'weight')::integer DESC, nv.entity_id""",
    r"""            SELECT e.end_id, nv.entity_id
            FROM (
                SELECT r.end_id, r.properties FROM memoria_graph."RELATED" r
                WHERE r.start_id OPERATOR(ag_catalog.=) w.entity_gid
                UNION ALL
                SELECT r.start_id, r.properties FROM memoria_graph."RELATED" r
                WHERE r.end_id OPERATOR(ag_catalog.=) w.entity_gid
            ) e
            CROSS JOIN LATERAL (
                SELECT ag_catalog.agtype_object_field_text(v.properties, 'entity_id')::bigint AS entity_id
                FROM memoria_graph."Entity" v
                WHERE v.id OPERATOR(ag_catalog.=) e.end_id
                  AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant
                OFFSET 0
            ) nv
            ORDER BY ag_catalog.agtype_object_field_text(e.properties, 'weight')::integer DESC, nv.entity_id""",
)

# Pairs stored only the reverse way are turned around, then the reverse rows go (and back, down).
# Row-level security is forced on the table, also for its owner (a migrating user that is not a
# superuser would see no row): relaxed for the rewrite, forced again before the commit (as in 0009).
EDGES_ONCE = f"""
ALTER TABLE memoria.entity_edges NO FORCE ROW LEVEL SECURITY;
INSERT INTO memoria.entity_edges (tenant, src_id, dst_id, weight)
SELECT ed.tenant, ed.dst_id, ed.src_id, ed.weight FROM memoria.entity_edges ed WHERE ed.src_id > ed.dst_id
ON CONFLICT (tenant, src_id, dst_id) DO NOTHING;
DELETE FROM memoria.entity_edges WHERE src_id > dst_id;
ALTER TABLE memoria.entity_edges FORCE ROW LEVEL SECURITY;
ALTER TABLE memoria.entity_edges ADD CONSTRAINT {CHECK} CHECK (src_id < dst_id);
COMMENT ON TABLE memoria.entity_edges IS
    'co-occurrence of two entities in memories: one row per pair, src_id < dst_id (migration 0017)';
"""
EDGES_TWICE = f"""
ALTER TABLE memoria.entity_edges DROP CONSTRAINT {CHECK};
ALTER TABLE memoria.entity_edges NO FORCE ROW LEVEL SECURITY;
INSERT INTO memoria.entity_edges (tenant, src_id, dst_id, weight)
SELECT ed.tenant, ed.dst_id, ed.src_id, ed.weight FROM memoria.entity_edges ed
ON CONFLICT (tenant, src_id, dst_id) DO NOTHING;
ALTER TABLE memoria.entity_edges FORCE ROW LEVEL SECURITY;
COMMENT ON TABLE memoria.entity_edges IS NULL;
"""
# The same for the mirror: an edge runs from the smaller entity_id's vertex.
_ENDS = """
FROM memoria_graph."RELATED" r
JOIN memoria_graph."Entity" s ON s.id OPERATOR(ag_catalog.=) r.start_id
JOIN memoria_graph."Entity" d ON d.id OPERATOR(ag_catalog.=) r.end_id
"""
_ENTITY_ID = "(ag_catalog.agtype_object_field_text({}.properties, 'entity_id')::bigint)"
RELATED_ONCE = f"""
INSERT INTO memoria_graph."RELATED" (start_id, end_id, properties)
SELECT r.end_id, r.start_id, r.properties {_ENDS}
WHERE {_ENTITY_ID.format("s")} > {_ENTITY_ID.format("d")}
ON CONFLICT (start_id, end_id) DO NOTHING;
DELETE FROM memoria_graph."RELATED" x USING (
    SELECT r.id {_ENDS} WHERE {_ENTITY_ID.format("s")} > {_ENTITY_ID.format("d")}
) g WHERE x.id OPERATOR(ag_catalog.=) g.id;
CREATE INDEX {RELATED_END} ON memoria_graph."RELATED" (end_id);
"""
RELATED_TWICE = f"""
DROP INDEX memoria_graph.{RELATED_END};
INSERT INTO memoria_graph."RELATED" (start_id, end_id, properties)
SELECT r.end_id, r.start_id, r.properties FROM memoria_graph."RELATED" r
ON CONFLICT (start_id, end_id) DO NOTHING;
"""


def _migration(name: str) -> ModuleType:
    path = Path(__file__).with_name(name)
    spec = importlib.util.spec_from_file_location(f"memoria_migration_{name[:4]}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _replaced(text: str, edit: tuple[str, str], once: bool) -> str:
    """`text` as a CREATE OR REPLACE, with the edit applied when `once` (the pairs counted once)."""
    old, new = edit
    if "CREATE OR REPLACE FUNCTION memoria." not in text:
        assert text.count("CREATE FUNCTION memoria.") == 1, "a function's text changed"
        text = text.replace("CREATE FUNCTION memoria.", "CREATE OR REPLACE FUNCTION memoria.")
    if once:
        assert text.count(old) == 1, f"the fragment to edit changed: {old[:60]!r}"
        text = text.replace(old, new)
    return text


def _remove_derived(once: bool) -> str:
    return _replaced(_migration("0013_cooccurrence_window.py")._remove_derived(windowed=True), PAIRS_REMOVED, once)


def _graph_functions(once: bool) -> list[str]:
    return [
        _replaced(_migration("0003_graph_definer_functions.py").GRAPH_SYNC, PAIRS_SYNCED, once),
        _replaced(_migration("0007_bounded_graph_walk_attribute_subject.py").GRAPH_WALK, FANOUT, once),
    ]


def _graph_exists() -> bool:
    return bool(_migration("0007_bounded_graph_walk_attribute_subject.py")._graph_exists())


def upgrade() -> None:
    op.execute(EDGES_ONCE)
    # CREATE OR REPLACE keeps the owner and the grants, and takes the settings of the text: 0013 set
    # remove_derived's plan mode after creating it.
    op.execute(_remove_derived(once=True))
    op.execute(f"ALTER FUNCTION {REMOVE_DERIVED} SET plan_cache_mode = force_generic_plan")
    if _graph_exists():
        op.execute(RELATED_ONCE)
        for ddl in _graph_functions(once=True):
            op.execute(ddl)


def downgrade() -> None:
    if _graph_exists():
        for ddl in _graph_functions(once=False):
            op.execute(ddl)
        op.execute(RELATED_TWICE)
    op.execute(_remove_derived(once=False))
    op.execute(f"ALTER FUNCTION {REMOVE_DERIVED} SET plan_cache_mode = force_generic_plan")
    op.execute(EDGES_TWICE)
