"""A bounded graph walk, and an attribute subject index that row-level security lets the worker use.

Graph. The graph worker counted every memory that mentions a reached entity: an entity mentioned by tens of
thousands of memories (a hub) made one walk read all of them (at 800k memories, 137 ms per query at
the median, 327 ms at p95, most of a V4 query's CPU). The walk is now bounded by two limits, the graph
worker's parameters (Config.graph_fanout, Config.graph_entity_memories):

- fan-out: each entity of the frontier follows at most `fanout` co-occurrence edges, the strongest first
  (weight desc, then the neighbour's entity id);
- mentions: each reached entity offers at most `entity_memories` memories, the most recent first
  (memory id desc). A memory's hops is the fewest entity hops among the reached entities that offered
  it, entity_hits the number of them; rows come hops first, then entity_hits desc, then memory id desc.

The index `memory_entities_entity_type` (entity_id, memory_type, memory_id) INCLUDE (tenant) serves the
mentions step as an index-only scan read backwards with a LIMIT, per memory type (an untyped walk reads
each type of memoria.memory_types and merges them), so the work is O(limits), whatever a hub's size.
memory_entities is not partitioned: one plain CREATE INDEX (a few seconds for 1.5M rows on 2 cores;
it blocks writes meanwhile). No index on entity_edges: the fan-out sorts one entity's edges (at most the
tenant's entity count), and an index on `weight` would make every co-occurrence update of the ingest a
non-HOT update.

With the AGE graph, memoria.graph_walk (migration 0003) is replaced by the same bounded walk with two more
arguments, so sql/workers/graph_age.sql returns the rows of sql/workers/graph.sql: the seeds and the
fan-out over the label tables ((:Entity) vertices, [:RELATED] edges, ordered by their weight, then the
neighbour vertex's entity_id), the mentions from memoria.memory_entities, which the function's owner
already reads under row-level security (0003): a MENTIONS edge carries no memory id to order by (its
start vertex ids follow the order of the syncs, not the memories' ids). The owner is granted SELECT on
memoria.memory_types for the untyped merge. Same definer hygiene as 0003: owner memoria_graph_owner,
search_path pinned to pg_catalog, pg_temp, schema-qualified names, no dynamic SQL, no temporary table,
EXECUTE for memoria_app only, the generic plan forced (its shape is fixed by the probes). The new
signature is a new function: the 4-argument one is dropped. The downgrade restores 0003's function
exactly (its text is imported from 0003), with its grants and owner, and drops the index.

Attribute. The attribute worker looked subjects up with `lower(subject) = lower($subject)` on 0002's index
(tenant, lower(subject)); but under row-level security only leakproof functions may run before the
policy's check, and lower() is not leakproof, so only the tenant prefix of that index was used and every
attribute row of the tenant was read and filtered (about 14,000 rows, 12 ms at the median and 35 ms at
p95 per query at 800k memories). A stored generated column `subject_lower` = lower(subject) makes the
lookup a plain text equality (texteq is leakproof; lower() of the parameter touches no row), served by
the index (tenant, subject_lower), which replaces 0002's. Adding a stored generated column rewrites
memory_attributes (a few seconds for 190k rows; writes wait meanwhile); the ingest's INSERT names its
columns and is unchanged. The downgrade drops the column and its index and recreates 0002's index.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""
import importlib.util
from pathlib import Path

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

INDEX = "memory_entities_entity_type"
SUBJECT_INDEX = "memory_attributes_tenant_subject_lower"
OLD_SUBJECT_INDEX = "memory_attributes_tenant_subject"  # 0002's
APP_ROLE = "memoria_app"
OWNER = "memoria_graph_owner"
OLD_SIGNATURE = "memoria.graph_walk(text[], integer, text, integer)"
NEW_SIGNATURE = "memoria.graph_walk(text[], integer, text, integer, integer, integer)"

_TENANT = r"""
    IF v_tenant IS NULL OR v_tenant = '' THEN
        RAISE EXCEPTION 'memoria.tenant is not set: the graph functions act for the tenant of the transaction'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'SELECT set_config(''memoria.tenant'', <tenant>, true) in the same transaction first';
    END IF;
"""

# The rows and order of sql/workers/graph.sql. Every probe is a LATERAL subquery (behind OFFSET 0 where
# no LIMIT already keeps it apart), so the plan stays a parameterized nested loop: Entity (tenant,
# norm_name) for the seeds, RELATED (start_id, end_id) and Entity (id) for the fan-out, memory_entities
# (entity_id, memory_type, memory_id) for the mentions.
GRAPH_WALK = r"""
CREATE FUNCTION memoria.graph_walk(entity_names text[], max_depth integer, type_filter text, row_limit integer,
                                   fanout integer, entity_memories integer)
RETURNS TABLE (memory_id bigint, memory_type text, hops integer, entity_hits bigint)
LANGUAGE plpgsql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
AS $fn$
#variable_conflict use_column
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
BEGIN
""" + _TENANT + r"""
    RETURN QUERY
    WITH RECURSIVE walk(entity_gid, entity_id, hops) AS (
        SELECT v.id, ag_catalog.agtype_object_field_text(v.properties, 'entity_id')::bigint, 0
        FROM memoria_graph."Entity" v
        WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant
          AND ag_catalog.agtype_object_field_text(v.properties, 'norm_name') = ANY (entity_names)
        UNION
        SELECT n.end_id, n.entity_id, w.hops + 1
        FROM walk w
        CROSS JOIN LATERAL (
            SELECT e.end_id, nv.entity_id
            FROM memoria_graph."RELATED" e
            CROSS JOIN LATERAL (
                SELECT ag_catalog.agtype_object_field_text(v.properties, 'entity_id')::bigint AS entity_id
                FROM memoria_graph."Entity" v
                WHERE v.id OPERATOR(ag_catalog.=) e.end_id
                  AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant
                OFFSET 0
            ) nv
            WHERE e.start_id OPERATOR(ag_catalog.=) w.entity_gid
            ORDER BY ag_catalog.agtype_object_field_text(e.properties, 'weight')::integer DESC, nv.entity_id
            LIMIT fanout
        ) n
        WHERE w.hops + 1 < max_depth
    ), reached AS (
        SELECT w.entity_id, min(w.hops) AS hops FROM walk w GROUP BY w.entity_id
    ), offered AS (
        SELECT r.hops, m.memory_id, m.memory_type
        FROM reached r
        CROSS JOIN LATERAL (
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
    )
    SELECT o.memory_id, o.memory_type, min(o.hops) + 1, count(*)
    FROM offered o
    GROUP BY o.memory_id, o.memory_type
    ORDER BY min(o.hops) + 1, count(*) DESC, o.memory_id DESC
    LIMIT row_limit;
END
$fn$
"""


def _migration_0003():
    path = Path(__file__).with_name("0003_graph_definer_functions.py")
    spec = importlib.util.spec_from_file_location("memoria_migration_0003", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _graph_exists() -> bool:
    bind = op.get_bind()
    return bool(
        bind.exec_driver_sql("SELECT 1 FROM pg_namespace WHERE nspname = 'ag_catalog'").first()
        and bind.exec_driver_sql("SELECT 1 FROM ag_catalog.ag_graph WHERE name = 'memoria_graph'").first()
    )


def _hand_over(signature: str) -> None:
    """0003's grants and owner, in 0003's order: grants first, then the owner (who needs CREATE on the
    schema for the change of owner only)."""
    op.execute(f"GRANT CREATE ON SCHEMA memoria TO {OWNER}")
    op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
    op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")
    op.execute(f"ALTER FUNCTION {signature} OWNER TO {OWNER}")
    op.execute(f"REVOKE CREATE ON SCHEMA memoria FROM {OWNER}")


def upgrade() -> None:
    op.execute(f"CREATE INDEX {INDEX} ON memoria.memory_entities (entity_id, memory_type, memory_id) INCLUDE (tenant)")
    op.execute("ALTER TABLE memoria.memory_attributes "
               "ADD COLUMN subject_lower text GENERATED ALWAYS AS (lower(subject)) STORED")
    op.execute(f"CREATE INDEX {SUBJECT_INDEX} ON memoria.memory_attributes (tenant, subject_lower)")
    op.execute(f"DROP INDEX memoria.{OLD_SUBJECT_INDEX}")
    if not _graph_exists():
        return
    op.execute(f"GRANT SELECT ON memoria.memory_types TO {OWNER}")
    op.execute(f"DROP FUNCTION {OLD_SIGNATURE}")
    op.execute(GRAPH_WALK)
    _hand_over(NEW_SIGNATURE)


def downgrade() -> None:
    if _graph_exists():
        op.execute(f"DROP FUNCTION {NEW_SIGNATURE}")
        op.execute(_migration_0003().GRAPH_WALK)
        _hand_over(OLD_SIGNATURE)
        op.execute(f"REVOKE SELECT ON memoria.memory_types FROM {OWNER}")
    op.execute(f"CREATE INDEX {OLD_SUBJECT_INDEX} ON memoria.memory_attributes (tenant, lower(subject))")
    op.execute("ALTER TABLE memoria.memory_attributes DROP COLUMN subject_lower")  # drops its index too
    op.execute(f"DROP INDEX memoria.{INDEX}")
