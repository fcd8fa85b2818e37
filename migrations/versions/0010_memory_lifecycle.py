"""The memory lifecycle: validity, supersession of single-valued facts, history, and removal that keeps
every derived statistic exact.

Memories get `valid_from` (NULL: their created_at) and `valid_to` (NULL: still valid; set by
MemorySystem.invalidate, cleared by restore); queries leave out memories not valid at the query time
(as_of, or now). Attribute triples get `valid_from` (NULL: their memory's validity start), `valid_to`
and `superseded_by` (the memory whose newer fact ended this one), maintained by memoria.supersede for
the single-valued attributes the library names (Config.single_valued_attributes).

memoria.memory_history is the append-only log of what happened to each memory (stored, updated,
invalidated, restored, deleted): memoria_app may read, append and delete (erasure) its rows, never update
them. Its rows carry no memory text except an update's previous version, which a delete removes.

Functions (SECURITY INVOKER: they run as memoria_app, under row-level security, for the transaction's
tenant, and lock shared rows in the ingest's order so that they never deadlock with it):

    memoria.remove_derived(memory_ids bigint[], forget_usage boolean) -> bigint[]
        takes the given memories' contribution out of every derived table (postings, BM25 document and
        term statistics, mentions, co-occurrence weights, entities no memory mentions any more,
        attributes; with forget_usage, a deletion's, also access statistics and trace rows), re-runs
        supersession for their facts' keys, and returns the ids of the entities they mentioned (the
        AGE mirror's part: memoria.graph_forget)
    memoria.supersede(subjects text[], attributes text[]) -> integer
        recomputes valid_to / superseded_by of the facts of those (subject_lower, attribute) keys: by
        time (valid_from, then memory id), each run of equal values is ended by the next run's start

With the AGE graph, two SECURITY DEFINER functions owned by memoria_graph_owner, with 0003's hygiene:
    memoria.graph_forget(memory_ids bigint[], entity_ids bigint[]) -> integer
        removes the memories' vertices and mentions, re-copies the RELATED weights among the entities
        from entity_edges (dropping edges that no longer exist) and drops entities that no longer exist
    memoria.graph_erase() -> integer
        removes every vertex and edge of the tenant

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

import importlib.util
from pathlib import Path

from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

APP_ROLE = "memoria_app"
OWNER = "memoria_graph_owner"

COLUMNS = """
ALTER TABLE memoria.memories ADD COLUMN valid_from timestamptz, ADD COLUMN valid_to timestamptz;
ALTER TABLE memoria.memory_attributes
    ADD COLUMN valid_from timestamptz, ADD COLUMN valid_to timestamptz, ADD COLUMN superseded_by bigint;
COMMENT ON COLUMN memoria.memories.valid_from IS 'when the memory starts to hold (NULL: created_at)';
COMMENT ON COLUMN memoria.memories.valid_to IS 'when it stopped holding (invalidated); NULL: it holds';
COMMENT ON COLUMN memoria.memory_attributes.valid_to IS 'when a newer fact of the same subject and attribute started';
COMMENT ON COLUMN memoria.memory_attributes.superseded_by IS 'the memory (memories.id) of that newer fact';
-- Since 0009 memoria_app holds INSERT and UPDATE on these tables column by column (never on `id`).
GRANT INSERT (valid_from, valid_to), UPDATE (valid_from, valid_to) ON memoria.memories TO memoria_app;
GRANT INSERT (valid_from, valid_to, superseded_by), UPDATE (valid_from, valid_to, superseded_by)
    ON memoria.memory_attributes TO memoria_app;
"""

HISTORY = """
CREATE TABLE memoria.memory_history (
    id bigint GENERATED ALWAYS AS IDENTITY,
    tenant text NOT NULL,
    memory_id bigint NOT NULL,
    event text NOT NULL CHECK (event IN ('stored', 'updated', 'invalidated', 'restored', 'deleted')),
    at timestamptz NOT NULL DEFAULT now(),
    detail jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (tenant, id)  -- every key of a tenant table includes the tenant (0009)
);
CREATE INDEX memory_history_memory ON memoria.memory_history (tenant, memory_id, id);
ALTER TABLE memoria.memory_history ENABLE ROW LEVEL SECURITY;
ALTER TABLE memoria.memory_history FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON memoria.memory_history
    USING (tenant = current_setting('memoria.tenant', true))
    WITH CHECK (tenant = current_setting('memoria.tenant', true));
GRANT SELECT, DELETE ON memoria.memory_history TO memoria_app;
-- not on id: OVERRIDING SYSTEM VALUE would let memoria_app choose one (0009)
GRANT INSERT (tenant, memory_id, event, at, detail) ON memoria.memory_history TO memoria_app;
"""

# Runs of equal values ordered by time; each run ends where the next one starts. Facts of other keys,
# and facts whose end did not change, are not written. Facts of the same time are ordered by their
# memory's dedup key (its content hash or external id, not its id: the order does not depend on which
# was stored first), then by their order in the memory.
SUPERSEDE = r"""
CREATE FUNCTION memoria.supersede(subjects text[], attributes text[]) RETURNS integer
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
    changed integer;
BEGIN
    WITH keys AS (
        SELECT DISTINCT k.subject_lower, k.attribute FROM unnest(subjects, attributes) AS k(subject_lower, attribute)
    ), facts AS (
        SELECT a.id, a.memory_id, m.dedup_key, a.subject_lower, a.attribute, pg_catalog.lower(a.value) AS v,
               coalesce(a.valid_from, m.valid_from, m.created_at) AS t
        FROM keys k
        JOIN memoria.memory_attributes a
          ON a.tenant = v_tenant AND a.subject_lower = k.subject_lower AND a.attribute = k.attribute
        JOIN memoria.memories m ON m.id = a.memory_id AND m.memory_type = a.memory_type AND m.tenant = v_tenant
    ), starts AS (
        SELECT f.*, CASE WHEN f.v IS DISTINCT FROM lag(f.v) OVER w THEN 1 ELSE 0 END AS starts_run
        FROM facts f WINDOW w AS (PARTITION BY f.subject_lower, f.attribute ORDER BY f.t, f.dedup_key, f.id)
    ), runs AS (
        SELECT s.*, sum(s.starts_run) OVER (PARTITION BY s.subject_lower, s.attribute
                                            ORDER BY s.t, s.dedup_key, s.id) AS run
        FROM starts s
    ), run_starts AS (
        SELECT r.subject_lower, r.attribute, r.run, min(r.t) AS start_t,
               (array_agg(r.memory_id ORDER BY r.t, r.dedup_key, r.id))[1] AS first_memory
        FROM runs r GROUP BY r.subject_lower, r.attribute, r.run
    ), ends AS (
        SELECT r.id, n.start_t AS valid_to, n.first_memory AS superseded_by
        FROM runs r
        LEFT JOIN run_starts n ON n.subject_lower = r.subject_lower AND n.attribute = r.attribute AND n.run = r.run + 1
    )
    UPDATE memoria.memory_attributes a SET valid_to = e.valid_to, superseded_by = e.superseded_by
    FROM ends e
    WHERE a.id = e.id AND a.tenant = v_tenant
      AND (a.valid_to, a.superseded_by) IS DISTINCT FROM (e.valid_to, e.superseded_by);
    GET DIAGNOSTICS changed = ROW_COUNT;
    RETURN changed;
END
$fn$;
"""

# Shared rows are locked in the ingest's order (bm25_docs by type, bm25_terms by term and type,
# entities by norm_name, edges by ends) before they change, so a removal and an ingest batch of the same
# tenant wait for each other instead of deadlocking.
REMOVE_DERIVED = r"""
CREATE FUNCTION memoria.remove_derived(memory_ids bigint[], forget_usage boolean) RETURNS bigint[]
LANGUAGE plpgsql SECURITY INVOKER SET search_path = pg_catalog, pg_temp AS $fn$
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
    ids bigint[];
    ent_ids bigint[];
    key_subjects text[];
    key_attributes text[];
    r_types text[];                   -- postings removed per (memory type, term): the df decrements
    r_terms text[];
    r_counts integer[];
    p_src bigint[];                   -- co-occurrences removed per entity pair: the weight decrements
    p_dst bigint[];
    p_counts integer[];
BEGIN
    SELECT coalesce(array_agg(m.id ORDER BY m.id), '{}') INTO ids
    FROM memoria.memories m WHERE m.id = ANY (memory_ids) AND m.tenant = v_tenant;
    IF pg_catalog.cardinality(ids) = 0 THEN
        RETURN '{}';
    END IF;

    -- BM25: document counts and lengths, then document frequencies, then the postings.
    PERFORM 1 FROM memoria.bm25_docs d
    WHERE d.tenant = v_tenant
      AND d.memory_type IN (SELECT DISTINCT m.memory_type FROM memoria.memories m WHERE m.id = ANY (ids) AND m.tenant = v_tenant)
    ORDER BY d.memory_type FOR UPDATE;
    UPDATE memoria.bm25_docs d SET n_docs = d.n_docs - g.n, sum_len = d.sum_len - g.len
    FROM (SELECT m.memory_type, count(*) AS n, sum(m.doc_len) AS len
          FROM memoria.memories m WHERE m.id = ANY (ids) AND m.tenant = v_tenant GROUP BY m.memory_type) g
    WHERE d.tenant = v_tenant AND d.memory_type = g.memory_type;
    DELETE FROM memoria.bm25_docs d WHERE d.tenant = v_tenant AND d.n_docs <= 0;

    SELECT coalesce(array_agg(g.memory_type ORDER BY g.term, g.memory_type), '{}'),
           coalesce(array_agg(g.term ORDER BY g.term, g.memory_type), '{}'),
           coalesce(array_agg(g.n ORDER BY g.term, g.memory_type), '{}')
    INTO r_types, r_terms, r_counts
    FROM (SELECT t.memory_type, t.term, count(*)::integer AS n FROM memoria.memory_terms t
          WHERE t.tenant = v_tenant AND t.memory_id = ANY (ids) GROUP BY t.memory_type, t.term) g;
    PERFORM 1 FROM memoria.bm25_terms b JOIN unnest(r_types, r_terms) AS r(memory_type, term)
        ON r.memory_type = b.memory_type AND r.term = b.term
    WHERE b.tenant = v_tenant ORDER BY b.term, b.memory_type FOR UPDATE OF b;
    UPDATE memoria.bm25_terms b SET df = b.df - r.n
    FROM unnest(r_types, r_terms, r_counts) AS r(memory_type, term, n)
    WHERE b.tenant = v_tenant AND b.memory_type = r.memory_type AND b.term = r.term;
    DELETE FROM memoria.bm25_terms b USING unnest(r_types, r_terms) AS r(memory_type, term)
    WHERE b.tenant = v_tenant AND b.memory_type = r.memory_type AND b.term = r.term AND b.df <= 0;
    DELETE FROM memoria.memory_terms t WHERE t.tenant = v_tenant AND t.memory_id = ANY (ids);

    -- Entities: co-occurrence weights, mentions, then entities no memory mentions any more.
    SELECT coalesce(array_agg(DISTINCT me.entity_id), '{}') INTO ent_ids
    FROM memoria.memory_entities me WHERE me.tenant = v_tenant AND me.memory_id = ANY (ids);
    PERFORM 1 FROM memoria.entities e WHERE e.tenant = v_tenant AND e.id = ANY (ent_ids) ORDER BY e.norm_name FOR UPDATE;
    SELECT coalesce(array_agg(g.src_id ORDER BY g.src_id, g.dst_id), '{}'),
           coalesce(array_agg(g.dst_id ORDER BY g.src_id, g.dst_id), '{}'),
           coalesce(array_agg(g.n ORDER BY g.src_id, g.dst_id), '{}')
    INTO p_src, p_dst, p_counts
    FROM (SELECT a.entity_id AS src_id, b.entity_id AS dst_id, count(*)::integer AS n
          FROM memoria.memory_entities a
          JOIN memoria.memory_entities b
            ON b.memory_id = a.memory_id AND b.entity_id <> a.entity_id AND b.tenant = v_tenant
          WHERE a.tenant = v_tenant AND a.memory_id = ANY (ids)
          GROUP BY a.entity_id, b.entity_id) g;
    PERFORM 1 FROM memoria.entity_edges ed JOIN unnest(p_src, p_dst) AS p(src_id, dst_id)
        ON p.src_id = ed.src_id AND p.dst_id = ed.dst_id
    WHERE ed.tenant = v_tenant ORDER BY ed.src_id, ed.dst_id FOR UPDATE OF ed;
    UPDATE memoria.entity_edges ed SET weight = ed.weight - p.n
    FROM unnest(p_src, p_dst, p_counts) AS p(src_id, dst_id, n)
    WHERE ed.tenant = v_tenant AND ed.src_id = p.src_id AND ed.dst_id = p.dst_id;
    DELETE FROM memoria.entity_edges ed USING unnest(p_src, p_dst) AS p(src_id, dst_id)
    WHERE ed.tenant = v_tenant AND ed.src_id = p.src_id AND ed.dst_id = p.dst_id AND ed.weight <= 0;
    DELETE FROM memoria.memory_entities me WHERE me.tenant = v_tenant AND me.memory_id = ANY (ids);
    DELETE FROM memoria.entities e
    WHERE e.tenant = v_tenant AND e.id = ANY (ent_ids)
      AND NOT EXISTS (SELECT 1 FROM memoria.memory_entities me WHERE me.entity_id = e.id AND me.tenant = v_tenant);

    -- Attributes (and the supersession of the facts they ended or continued), access, traces.
    SELECT coalesce(array_agg(a.subject_lower), '{}'), coalesce(array_agg(a.attribute), '{}')
    INTO key_subjects, key_attributes
    FROM (SELECT DISTINCT a.subject_lower, a.attribute FROM memoria.memory_attributes a
          WHERE a.tenant = v_tenant AND a.memory_id = ANY (ids)) a;
    DELETE FROM memoria.memory_attributes a WHERE a.tenant = v_tenant AND a.memory_id = ANY (ids);
    PERFORM memoria.supersede(key_subjects, key_attributes);
    IF forget_usage THEN  -- a deletion; an update keeps them
        DELETE FROM memoria.memory_access x WHERE x.tenant = v_tenant AND x.memory_id = ANY (ids);
        DELETE FROM memoria.query_trace_candidates c WHERE c.tenant = v_tenant AND c.memory_id = ANY (ids);
    END IF;
    RETURN ent_ids;
END
$fn$;
"""

# Facts stored before this revision: superseded by the library's default list of single-valued
# attributes (Config.single_valued_attributes as of this revision, written out: a migration stays what
# it was). A deployment with its own list re-runs memoria.supersede for its keys.
BACKFILL = r"""
DO $do$
DECLARE
    v_tenant text;
    subs text[];
    attrs text[];
BEGIN
    FOR v_tenant IN SELECT DISTINCT a.tenant FROM memoria.memory_attributes a ORDER BY 1 LOOP
        PERFORM pg_catalog.set_config('memoria.tenant', v_tenant, true);
        SELECT coalesce(array_agg(k.subject_lower), '{}'), coalesce(array_agg(k.attribute), '{}') INTO subs, attrs
        FROM (SELECT DISTINCT a.subject_lower, a.attribute FROM memoria.memory_attributes a
              WHERE a.tenant = v_tenant
                AND (a.attribute IN ('location', 'employer', 'occupation', 'age', 'spouse', 'partner', 'boss',
                                     'manager', 'address', 'phone number', 'email')
                     OR a.attribute LIKE 'favourite %')) k;
        PERFORM memoria.supersede(subs, attrs);
    END LOOP;
    PERFORM pg_catalog.set_config('memoria.tenant', '', true);
END
$do$;
"""

GRAPH_DEFINER = """
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan
"""

_TENANT = r"""
    IF v_tenant IS NULL OR v_tenant = '' THEN
        RAISE EXCEPTION 'memoria.tenant is not set: the graph functions act for the tenant of the transaction'
            USING ERRCODE = 'insufficient_privilege';
    END IF;
"""

GRAPH_FORGET = (
    r"""
CREATE FUNCTION memoria.graph_forget(memory_ids bigint[], entity_ids bigint[]) RETURNS integer
"""
    + GRAPH_DEFINER
    + r"""
AS $fn$
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
    mem_gids ag_catalog.graphid[];
    ent_ids bigint[];
    ent_gids ag_catalog.graphid[];
    gone integer;
BEGIN
"""
    + _TENANT
    + r"""
    SELECT coalesce(array_agg(v.id), '{}') INTO mem_gids
    FROM unnest(memory_ids) AS b(id)
    CROSS JOIN LATERAL (
        SELECT v.id FROM memoria_graph."Memory" v
        WHERE (ag_catalog.agtype_object_field_text(v.properties, 'memory_id')::bigint) = b.id
          AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant OFFSET 0
    ) v;
    DELETE FROM memoria_graph."MENTIONS" e WHERE e.start_id OPERATOR(ag_catalog.=) ANY (mem_gids);
    DELETE FROM memoria_graph."Memory" v WHERE v.id OPERATOR(ag_catalog.=) ANY (mem_gids);
    GET DIAGNOSTICS gone = ROW_COUNT;

    SELECT coalesce(array_agg(d.id), '{}'), coalesce(array_agg(v.id), '{}') INTO ent_ids, ent_gids
    FROM (SELECT DISTINCT u.id FROM unnest(entity_ids) AS u(id)) d
    CROSS JOIN LATERAL (
        SELECT v.id FROM memoria_graph."Entity" v
        WHERE (ag_catalog.agtype_object_field_text(v.properties, 'entity_id')::bigint) = d.id
          AND ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant OFFSET 0
    ) v;
    -- RELATED edges among the entities: the weight of entity_edges, or gone with it.
    DELETE FROM memoria_graph."RELATED" r
    USING unnest(ent_ids, ent_gids) AS s(entity_id, gid), unnest(ent_ids, ent_gids) AS d(entity_id, gid)
    WHERE r.start_id OPERATOR(ag_catalog.=) s.gid AND r.end_id OPERATOR(ag_catalog.=) d.gid
      AND NOT EXISTS (SELECT 1 FROM memoria.entity_edges ed
                      WHERE ed.src_id = s.entity_id AND ed.dst_id = d.entity_id AND ed.tenant = v_tenant);
    UPDATE memoria_graph."RELATED" r
    SET properties = ag_catalog.agtype_build_map('tenant', v_tenant, 'weight', ed.weight)
    FROM unnest(ent_ids, ent_gids) AS s(entity_id, gid), unnest(ent_ids, ent_gids) AS d(entity_id, gid),
         memoria.entity_edges ed
    WHERE r.start_id OPERATOR(ag_catalog.=) s.gid AND r.end_id OPERATOR(ag_catalog.=) d.gid
      AND ed.src_id = s.entity_id AND ed.dst_id = d.entity_id AND ed.tenant = v_tenant
      AND ag_catalog.agtype_object_field_text(r.properties, 'weight') IS DISTINCT FROM ed.weight::text;
    -- Entities that no longer exist, with every edge that still touches them.
    DELETE FROM memoria_graph."RELATED" r
    USING unnest(ent_ids, ent_gids) AS g(entity_id, gid)
    WHERE (r.start_id OPERATOR(ag_catalog.=) g.gid OR r.end_id OPERATOR(ag_catalog.=) g.gid)
      AND NOT EXISTS (SELECT 1 FROM memoria.entities e WHERE e.id = g.entity_id AND e.tenant = v_tenant);
    DELETE FROM memoria_graph."MENTIONS" m
    USING unnest(ent_ids, ent_gids) AS g(entity_id, gid)
    WHERE m.end_id OPERATOR(ag_catalog.=) g.gid
      AND NOT EXISTS (SELECT 1 FROM memoria.entities e WHERE e.id = g.entity_id AND e.tenant = v_tenant);
    DELETE FROM memoria_graph."Entity" v
    USING unnest(ent_ids, ent_gids) AS g(entity_id, gid)
    WHERE v.id OPERATOR(ag_catalog.=) g.gid
      AND NOT EXISTS (SELECT 1 FROM memoria.entities e WHERE e.id = g.entity_id AND e.tenant = v_tenant);
    RETURN gone;
END
$fn$
"""
)

GRAPH_ERASE = (
    r"""
CREATE FUNCTION memoria.graph_erase() RETURNS integer
"""
    + GRAPH_DEFINER
    + r"""
AS $fn$
DECLARE
    v_tenant text := pg_catalog.current_setting('memoria.tenant', true);
    gone integer;
BEGIN
"""
    + _TENANT
    + r"""
    DELETE FROM memoria_graph."RELATED" e WHERE ag_catalog.agtype_object_field_text(e.properties, 'tenant') = v_tenant;
    DELETE FROM memoria_graph."MENTIONS" e WHERE ag_catalog.agtype_object_field_text(e.properties, 'tenant') = v_tenant;
    DELETE FROM memoria_graph."Memory" v WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant;
    GET DIAGNOSTICS gone = ROW_COUNT;
    DELETE FROM memoria_graph."Entity" v WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = v_tenant;
    RETURN gone;
END
$fn$
"""
)

GRAPH_SIGNATURES = ("memoria.graph_forget(bigint[], bigint[])", "memoria.graph_erase()")
OLD_COLUMNS = "' pinned, created_at, last_accessed_at, access_count, embedding, doc_len, context'"
NEW_COLUMNS = "' pinned, created_at, last_accessed_at, access_count, embedding, doc_len, context, valid_from, valid_to'"


def _add_memory_type_0008() -> str:
    """add_memory_type as 0008 left it (0001's text with 0008's column list), as a CREATE OR REPLACE."""
    path = Path(__file__).with_name("0008_memory_access_table.py")
    spec = importlib.util.spec_from_file_location("memoria_migration_0008", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function = module._add_memory_type_0001().replace(module.OLD_COLUMNS, module.NEW_COLUMNS)
    assert OLD_COLUMNS in function, "0008's add_memory_type column list changed"
    return function


def _graph_exists() -> bool:
    bind = op.get_bind()
    return bool(
        bind.exec_driver_sql("SELECT 1 FROM pg_namespace WHERE nspname = 'ag_catalog'").first()
        and bind.exec_driver_sql("SELECT 1 FROM ag_catalog.ag_graph WHERE name = 'memoria_graph'").first()
    )


def upgrade() -> None:
    op.execute(COLUMNS)
    op.execute(HISTORY)
    op.execute(SUPERSEDE)
    op.execute(REMOVE_DERIVED)
    for signature in ("memoria.supersede(text[], text[])", "memoria.remove_derived(bigint[], boolean)"):
        op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
        op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")
    op.execute(_add_memory_type_0008().replace(OLD_COLUMNS, NEW_COLUMNS))
    op.execute(BACKFILL)
    if _graph_exists():
        op.execute(GRAPH_FORGET)
        op.execute(GRAPH_ERASE)
        op.execute(f"GRANT CREATE ON SCHEMA memoria TO {OWNER}")
        for signature in GRAPH_SIGNATURES:
            op.execute(f"REVOKE ALL ON FUNCTION {signature} FROM PUBLIC")
            op.execute(f"GRANT EXECUTE ON FUNCTION {signature} TO {APP_ROLE}")
            op.execute(f"ALTER FUNCTION {signature} OWNER TO {OWNER}")
        op.execute(f"REVOKE CREATE ON SCHEMA memoria FROM {OWNER}")


def downgrade() -> None:
    if _graph_exists():
        for signature in GRAPH_SIGNATURES:
            op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    op.execute(_add_memory_type_0008())
    op.execute("DROP FUNCTION memoria.remove_derived(bigint[], boolean)")
    op.execute("DROP FUNCTION memoria.supersede(text[], text[])")
    op.execute("DROP TABLE memoria.memory_history")
    op.execute("ALTER TABLE memoria.memory_attributes DROP COLUMN valid_from, DROP COLUMN valid_to, "
               "DROP COLUMN superseded_by")
    op.execute("ALTER TABLE memoria.memories DROP COLUMN valid_from, DROP COLUMN valid_to")
