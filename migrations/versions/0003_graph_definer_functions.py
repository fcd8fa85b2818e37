"""The AGE graph only through SECURITY DEFINER functions: memoria_app loses every privilege on it.

The graph `memoria_graph` (label tables "Memory", "Entity", "MENTIONS", "RELATED") cannot have row-level
security: PostgreSQL would then refuse AGE's non-leakproof graphid and agtype operators as index
conditions, and every probe of the graph worker and the sync would become a scan of a whole label. So
memoria_app gets no privilege on the graph at all (schema, tables, sequences; nor on ag_catalog, which
it no longer needs), and the library reaches it through four functions in schema memoria:

    memoria.graph_walk(entity_names text[], max_depth integer, type_filter text, row_limit integer)
        -> (memory_id bigint, memory_type text, hops integer, entity_hits bigint)
        the graph worker: the rows and order of sql/workers/graph.sql, walked over the label tables
    memoria.graph_sync(memory_ids bigint[]) -> integer
        mirrors the given memories of the current tenant (other ids are ignored) with their mentions,
        entities and co-occurrence weights; idempotent; O(batch)
    memoria.graph_rebuild() -> (label text, total bigint)
        rebuilds the current tenant's part of the graph from the plain tables
    memoria.graph_counts() -> (label text, total bigint)
        vertices and edges per label of the current tenant

Each one takes the tenant from current_setting('memoria.tenant') (the transaction's tenant, as the
row-level-security policies do) and raises insufficient_privilege when it is unset or empty; no
argument names a tenant. EXECUTE is revoked from PUBLIC and granted to memoria_app only.

The functions run as memoria_graph_owner, a NOLOGIN NOBYPASSRLS role created here, not as the user that
runs the migration (often a superuser): it may read and write the four label tables and read the four
plain tables it mirrors, nothing else, and row-level security still applies to it on the plain tables.
Creating the role needs CREATEROLE, as 0001 does for memoria_app; an operator without it creates the role
beforehand (NOLOGIN NOBYPASSRLS) and grants it to the user that runs the migrations.
Definer hygiene: search_path is pinned to pg_catalog, pg_temp and every name is schema-qualified; no
temporary table (a caller could pre-create one with a trigger that would run as the definer); no dynamic
SQL; values are plpgsql variables, intermediate sets are arrays. Every probe into a large table is
either an `= ANY(array)` index scan or a LATERAL subquery behind OFFSET 0 (a parameterized index lookup
per row, whatever the statistics on agtype expressions say). Plans, whatever the caller's settings: the
sync, the rebuild and the counts force custom plans, so the arrays' real sizes reach the planner (a
generic plan would guess a fixed size for every unnest and could join them badly); the walk forces its
generic plan, built once per session: its shape is fixed by the probes (the same plan either way, checked
with auto_explain on 20k memories, also when the plan was built on a 100-memory graph), and it saves the
planning, about 0.3 ms of a 0.3-0.6 ms depth-1 walk.

The functions are written out here, not loaded from sql/: a migration must stay what it was when it ran.
When the graph does not exist (no AGE, or migrated with use_age off) this migration does nothing.

Library versions before this migration write and walk the label tables as memoria_app, which this
migration forbids: upgrade the library and the schema together.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

APP_ROLE = "memoria_app"
OWNER = "memoria_graph_owner"
LABELS = ("Entity", "Memory", "MENTIONS", "RELATED")
MIRRORED = ("memoria.memories", "memoria.entities", "memoria.memory_entities", "memoria.entity_edges")
SIGNATURES = (
    "memoria.graph_walk(text[], integer, text, integer)",
    "memoria.graph_sync(bigint[])",
    "memoria.graph_rebuild()",
    "memoria.graph_counts()",
)

# The prologue of every function: the tenant of the transaction, or an error.
_TENANT = r"""
    IF v_tenant IS NULL OR v_tenant = '' THEN
        RAISE EXCEPTION 'memoria.tenant is not set: the graph functions act for the tenant of the transaction'
            USING ERRCODE = 'insufficient_privilege',
                  HINT = 'SELECT set_config(''memoria.tenant'', <tenant>, true) in the same transaction first';
    END IF;
"""

_DEFINER = """
LANGUAGE plpgsql {volatility} SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = {plans}
"""

# The graph worker. Same walk and rows as sql/workers/graph.sql over the plain tables:
#   seeds  = (:Entity) vertices of the tenant whose norm_name is a query entity
#   walk   = breadth-first over (:Entity)-[:RELATED]->(:Entity), entity hops < max_depth
#   result = (:Memory)-[:MENTIONS]->(reached entity); hops = min entity hops + 1,
#            entity_hits = how many reached entities the memory mentions
# SQL over the label tables, not Cypher: a Cypher variable-length match enumerates every path instead of a
# breadth-first frontier, and a Cypher property filter scans the whole label. Each step is a btree probe
# (Entity (tenant, norm_name), RELATED (start_id, end_id), MENTIONS (end_id, start_id), Memory (id)).
# RELATED edges only join entities of one tenant; the seeds and the memories are checked for the tenant.
GRAPH_WALK = r"""
CREATE FUNCTION memoria.graph_walk(entity_names text[], max_depth integer, type_filter text, row_limit integer)
RETURNS TABLE (memory_id bigint, memory_type text, hops integer, entity_hits bigint)
""" + _DEFINER.format(volatility="STABLE", plans="force_generic_plan") + r"""
AS $fn$
#variable_conflict use_column
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
BEGIN
""" + _TENANT + r"""
    RETURN QUERY
    WITH RECURSIVE walk(entity_gid, hops) AS (
        SELECT v.id, 0
        FROM memoria_graph."Entity" v
        WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant
          AND ag_catalog.agtype_object_field_text(v.properties, 'norm_name') = ANY (entity_names)
        UNION
        SELECT r.end_id, w.hops + 1
        FROM walk w
        CROSS JOIN LATERAL (
            SELECT e.end_id FROM memoria_graph."RELATED" e
            WHERE e.start_id OPERATOR(ag_catalog.=) w.entity_gid OFFSET 0
        ) r
        WHERE w.hops + 1 < max_depth
    ), reached AS (
        SELECT w.entity_gid, min(w.hops) AS hops FROM walk w GROUP BY w.entity_gid
    ), hits AS (
        SELECT me.start_id AS memory_gid, min(r.hops) + 1 AS hops, count(*) AS entity_hits
        FROM reached r
        CROSS JOIN LATERAL (
            SELECT e.start_id FROM memoria_graph."MENTIONS" e
            WHERE e.end_id OPERATOR(ag_catalog.=) r.entity_gid OFFSET 0
        ) me
        GROUP BY me.start_id
    ), found AS (
        SELECT ag_catalog.agtype_object_field_text(mv.properties, 'memory_id')::bigint AS memory_id,
               ag_catalog.agtype_object_field_text(mv.properties, 'memory_type') AS memory_type,
               h.hops, h.entity_hits
        FROM hits h
        CROSS JOIN LATERAL (
            SELECT v.properties FROM memoria_graph."Memory" v
            WHERE v.id OPERATOR(ag_catalog.=) h.memory_gid OFFSET 0
        ) mv
        WHERE ag_catalog.agtype_object_field_text(mv.properties, 'tenant') = v_tenant
          AND (type_filter IS NULL
               OR ag_catalog.agtype_object_field_text(mv.properties, 'memory_type') = type_filter)
    )
    SELECT f.memory_id, f.memory_type, f.hops, f.entity_hits
    FROM found f
    ORDER BY f.hops, f.entity_hits DESC, f.memory_id
    LIMIT row_limit;
END
$fn$
"""

# The batch sync (the ingest calls it with the ids of the batch's new memories). Idempotent: a vertex or
# edge that exists is kept, RELATED weights are copied (absolute) from entity_edges and an unchanged edge
# is not rewritten. One index scan per table for the batch's memories, mentions and entities, one probe
# per batch vertex for the graph ids: O(batch) whatever the graph's size.
GRAPH_SYNC = r"""
CREATE FUNCTION memoria.graph_sync(memory_ids bigint[])
RETURNS integer
""" + _DEFINER.format(volatility="VOLATILE", plans="force_custom_plan") + r"""
AS $fn$
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
    mem_ids bigint[];                 -- the tenant's memories among memory_ids
    mem_types text[];
    mem_gids ag_catalog.graphid[];    -- their vertices (parallel to mem_gid_ids)
    mem_gid_ids bigint[];
    men_memory bigint[];              -- their mentions (memory_id, entity_id)
    men_entity bigint[];
    ent_ids bigint[];                 -- the mentioned entities' vertices
    ent_gids ag_catalog.graphid[];
BEGIN
""" + _TENANT + r"""
    SELECT coalesce(array_agg(m.id ORDER BY m.id), '{}'), coalesce(array_agg(m.memory_type ORDER BY m.id), '{}')
    INTO mem_ids, mem_types
    FROM memoria.memories m
    WHERE m.id = ANY (memory_ids) AND m.tenant = v_tenant;
    IF pg_catalog.cardinality(mem_ids) = 0 THEN
        RETURN 0;
    END IF;

    SELECT coalesce(array_agg(me.memory_id), '{}'), coalesce(array_agg(me.entity_id), '{}')
    INTO men_memory, men_entity
    FROM memoria.memory_entities me
    WHERE me.memory_id = ANY (mem_ids) AND me.tenant = v_tenant;

    INSERT INTO memoria_graph."Memory" (properties)
    SELECT ag_catalog.agtype_build_map('tenant', v_tenant, 'memory_id', b.id, 'memory_type', b.memory_type)
    FROM unnest(mem_ids, mem_types) AS b(id, memory_type)
    ORDER BY b.id
    ON CONFLICT ((ag_catalog.agtype_object_field_text(properties, 'memory_id')::bigint)) DO NOTHING;

    INSERT INTO memoria_graph."Entity" (properties)
    SELECT ag_catalog.agtype_build_map('tenant', v_tenant, 'entity_id', e.id, 'name', e.name,
                                       'norm_name', e.norm_name, 'kind', e.kind)
    FROM memoria.entities e
    WHERE e.id = ANY (men_entity) AND e.tenant = v_tenant
    ORDER BY e.id
    ON CONFLICT ((ag_catalog.agtype_object_field_text(properties, 'entity_id')::bigint)) DO NOTHING;

    -- The graph ids of both ends (every vertex exists by now).
    SELECT coalesce(array_agg(b.id), '{}'), coalesce(array_agg(v.id), '{}')
    INTO mem_gid_ids, mem_gids
    FROM unnest(mem_ids) AS b(id)
    CROSS JOIN LATERAL (
        SELECT v.id FROM memoria_graph."Memory" v
        WHERE (ag_catalog.agtype_object_field_text(v.properties, 'memory_id')::bigint) = b.id
          AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant OFFSET 0
    ) v;
    SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(v.id), '{}')
    INTO ent_ids, ent_gids
    FROM (SELECT DISTINCT u.id FROM unnest(men_entity) AS u(id)) d
    CROSS JOIN LATERAL (
        SELECT v.id FROM memoria_graph."Entity" v
        WHERE (ag_catalog.agtype_object_field_text(v.properties, 'entity_id')::bigint) = d.id
          AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant OFFSET 0
    ) v;

    INSERT INTO memoria_graph."MENTIONS" (start_id, end_id, properties)
    SELECT mv.gid, ev.gid, ag_catalog.agtype_build_map('tenant', v_tenant)
    FROM unnest(men_memory, men_entity) AS m(memory_id, entity_id)
    JOIN unnest(mem_gid_ids, mem_gids) AS mv(memory_id, gid) ON mv.memory_id = m.memory_id
    JOIN unnest(ent_ids, ent_gids) AS ev(entity_id, gid) ON ev.entity_id = m.entity_id
    ORDER BY ev.gid, mv.gid
    ON CONFLICT (end_id, start_id) DO NOTHING;

    -- Entity pairs co-mentioned by a batch memory get a RELATED edge whose weight is the current
    -- entity_edges weight.
    INSERT INTO memoria_graph."RELATED" AS r (start_id, end_id, properties)
    SELECT s.gid, d.gid, ag_catalog.agtype_build_map('tenant', v_tenant, 'weight', ed.weight)
    FROM (
        SELECT DISTINCT a.entity_id AS src_id, b.entity_id AS dst_id
        FROM unnest(men_memory, men_entity) AS a(memory_id, entity_id)
        JOIN unnest(men_memory, men_entity) AS b(memory_id, entity_id)
          ON b.memory_id = a.memory_id AND b.entity_id <> a.entity_id
    ) p
    JOIN unnest(ent_ids, ent_gids) AS s(entity_id, gid) ON s.entity_id = p.src_id
    JOIN unnest(ent_ids, ent_gids) AS d(entity_id, gid) ON d.entity_id = p.dst_id
    CROSS JOIN LATERAL (
        SELECT ed.weight FROM memoria.entity_edges ed
        WHERE ed.src_id = p.src_id AND ed.dst_id = p.dst_id AND ed.tenant = v_tenant OFFSET 0
    ) ed
    ORDER BY s.gid, d.gid
    ON CONFLICT (start_id, end_id) DO UPDATE SET properties = excluded.properties
    WHERE ag_catalog.agtype_object_field_text(r.properties, 'weight')
          IS DISTINCT FROM ag_catalog.agtype_object_field_text(excluded.properties, 'weight');

    RETURN pg_catalog.cardinality(mem_ids);
END
$fn$
"""

# Counts per label for the tenant (scans of the labels: a diagnostic, not a query-path statement).
GRAPH_COUNTS = r"""
CREATE FUNCTION memoria.graph_counts()
RETURNS TABLE (label text, total bigint)
""" + _DEFINER.format(volatility="STABLE", plans="force_custom_plan") + r"""
AS $fn$
#variable_conflict use_column
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
BEGIN
""" + _TENANT + r"""
    RETURN QUERY
    SELECT 'Memory'::text, count(*) FROM memoria_graph."Memory" v
    WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant
    UNION ALL
    SELECT 'Entity'::text, count(*) FROM memoria_graph."Entity" v
    WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant
    UNION ALL
    SELECT 'MENTIONS'::text, count(*) FROM memoria_graph."MENTIONS" e
    WHERE ag_catalog.agtype_object_field_text(e.properties, 'tenant') = v_tenant
    UNION ALL
    SELECT 'RELATED'::text, count(*) FROM memoria_graph."RELATED" e
    WHERE ag_catalog.agtype_object_field_text(e.properties, 'tenant') = v_tenant;
END
$fn$
"""

# The tenant's part of the graph from the plain tables, as a bulk load: every memory and every entity
# (also those no memory mentions any more) gets a vertex, MENTIONS mirrors memory_entities and RELATED
# mirrors entity_edges as a whole. Other tenants' vertices and edges are untouched.
GRAPH_REBUILD = r"""
CREATE FUNCTION memoria.graph_rebuild()
RETURNS TABLE (label text, total bigint)
""" + _DEFINER.format(volatility="VOLATILE", plans="force_custom_plan") + r"""
AS $fn$
#variable_conflict use_column
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
    mem_ids bigint[];
    mem_gids ag_catalog.graphid[];
    ent_ids bigint[];
    ent_gids ag_catalog.graphid[];
BEGIN
""" + _TENANT + r"""
    DELETE FROM memoria_graph."RELATED" e WHERE ag_catalog.agtype_object_field_text(e.properties, 'tenant') = v_tenant;
    DELETE FROM memoria_graph."MENTIONS" e WHERE ag_catalog.agtype_object_field_text(e.properties, 'tenant') = v_tenant;
    DELETE FROM memoria_graph."Memory" v WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant;
    DELETE FROM memoria_graph."Entity" v WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant;

    WITH added AS (
        INSERT INTO memoria_graph."Memory" (properties)
        SELECT ag_catalog.agtype_build_map('tenant', v_tenant, 'memory_id', m.id, 'memory_type', m.memory_type)
        FROM memoria.memories m
        WHERE m.tenant = v_tenant
        ORDER BY m.id
        ON CONFLICT ((ag_catalog.agtype_object_field_text(properties, 'memory_id')::bigint)) DO NOTHING
        RETURNING id, properties
    )
    SELECT coalesce(array_agg(ag_catalog.agtype_object_field_text(a.properties, 'memory_id')::bigint), '{}'),
           coalesce(array_agg(a.id), '{}')
    INTO mem_ids, mem_gids
    FROM added a;

    WITH added AS (
        INSERT INTO memoria_graph."Entity" (properties)
        SELECT ag_catalog.agtype_build_map('tenant', v_tenant, 'entity_id', e.id, 'name', e.name,
                                           'norm_name', e.norm_name, 'kind', e.kind)
        FROM memoria.entities e
        WHERE e.tenant = v_tenant
        ORDER BY e.id
        RETURNING id, properties
    )
    SELECT coalesce(array_agg(ag_catalog.agtype_object_field_text(a.properties, 'entity_id')::bigint), '{}'),
           coalesce(array_agg(a.id), '{}')
    INTO ent_ids, ent_gids
    FROM added a;

    INSERT INTO memoria_graph."MENTIONS" (start_id, end_id, properties)
    SELECT mv.gid, ev.gid, ag_catalog.agtype_build_map('tenant', v_tenant)
    FROM memoria.memory_entities me
    JOIN unnest(mem_ids, mem_gids) AS mv(memory_id, gid) ON mv.memory_id = me.memory_id
    JOIN unnest(ent_ids, ent_gids) AS ev(entity_id, gid) ON ev.entity_id = me.entity_id
    WHERE me.tenant = v_tenant
    ORDER BY ev.gid, mv.gid;

    INSERT INTO memoria_graph."RELATED" (start_id, end_id, properties)
    SELECT s.gid, d.gid, ag_catalog.agtype_build_map('tenant', v_tenant, 'weight', ed.weight)
    FROM memoria.entity_edges ed
    JOIN unnest(ent_ids, ent_gids) AS s(entity_id, gid) ON s.entity_id = ed.src_id
    JOIN unnest(ent_ids, ent_gids) AS d(entity_id, gid) ON d.entity_id = ed.dst_id
    WHERE ed.tenant = v_tenant
    ORDER BY s.gid, d.gid;

    RETURN QUERY SELECT c.label, c.total FROM memoria.graph_counts() c;
END
$fn$
"""

OWNER_ROLE = r"""
DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = 'memoria_graph_owner') THEN
        CREATE ROLE memoria_graph_owner NOLOGIN NOBYPASSRLS;
    END IF;
    -- The user that runs the migrations hands the functions over to the role (and may drop them later).
    IF NOT pg_catalog.pg_has_role(current_user, 'memoria_graph_owner',
            CASE WHEN pg_catalog.current_setting('server_version_num')::int >= 160000 THEN 'SET' ELSE 'MEMBER' END) THEN
        EXECUTE pg_catalog.format('GRANT memoria_graph_owner TO %I', current_user);
    END IF;
END
$do$
"""


def _label_tables() -> str:
    return ", ".join(f'memoria_graph."{label}"' for label in LABELS)


def _label_sequences() -> str:
    return ", ".join(f'memoria_graph."{label}_id_seq"' for label in LABELS)


def _graph_exists() -> bool:
    bind = op.get_bind()
    return bool(
        bind.exec_driver_sql("SELECT 1 FROM pg_namespace WHERE nspname = 'ag_catalog'").first()
        and bind.exec_driver_sql("SELECT 1 FROM ag_catalog.ag_graph WHERE name = 'memoria_graph'").first()
    )


def upgrade() -> None:
    if not _graph_exists():
        return
    op.execute(OWNER_ROLE)
    # What the functions' owner may touch: the four label tables (and their id sequences, for the
    # column defaults) and, under row-level security, the four plain tables they mirror.
    op.execute(f"GRANT USAGE ON SCHEMA ag_catalog, memoria_graph, memoria TO {OWNER}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {_label_tables()} TO {OWNER}")
    op.execute(f"GRANT USAGE ON SEQUENCE {_label_sequences()} TO {OWNER}")
    op.execute(f"GRANT SELECT ON {', '.join(MIRRORED)} TO {OWNER}")
    for ddl in (GRAPH_COUNTS, GRAPH_WALK, GRAPH_SYNC, GRAPH_REBUILD):
        op.execute(ddl)
    # Grants first, owner last: ALTER ... OWNER hands the ACL over to the new owner as it is. The new
    # owner needs CREATE on the schema for the change of owner only.
    op.execute(f"GRANT CREATE ON SCHEMA memoria TO {OWNER}")
    for signature in SIGNATURES:
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")
        op.execute(f"ALTER FUNCTION {signature} OWNER TO {OWNER}")
    op.execute(f"REVOKE CREATE ON SCHEMA memoria FROM {OWNER}")
    # Everything 0001 granted memoria_app on the graph, and ag_catalog: it calls the functions only.
    op.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA memoria_graph FROM {APP_ROLE}")
    op.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA memoria_graph FROM {APP_ROLE}")
    op.execute(f"REVOKE ALL ON SCHEMA memoria_graph, ag_catalog FROM {APP_ROLE}")


def downgrade() -> None:
    if not _graph_exists():
        return
    for signature in SIGNATURES:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    # The role itself is kept, like memoria_app: other databases of the server may use it.
    role = op.get_bind().exec_driver_sql(
        "SELECT 1 FROM pg_roles WHERE rolname = %s", (OWNER,)).first()
    if role:
        op.execute(f"REVOKE ALL ON {', '.join(MIRRORED)} FROM {OWNER}")
        op.execute(f"REVOKE ALL ON SEQUENCE {_label_sequences()} FROM {OWNER}")
        op.execute(f"REVOKE ALL ON {_label_tables()} FROM {OWNER}")
        op.execute(f"REVOKE ALL ON SCHEMA ag_catalog, memoria_graph, memoria FROM {OWNER}")
    # 0001's grants, statement for statement.
    op.execute(f"GRANT USAGE ON SCHEMA ag_catalog, memoria_graph TO {APP_ROLE}")
    op.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA memoria_graph TO {APP_ROLE}")
    op.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA memoria_graph TO {APP_ROLE}")
