-- Graph worker (Apache AGE): the same walk and the same rows as workers/graph.sql, over the AGE
-- graph memoria_graph (mirrored by memoria_pg/graph_age.py) instead of the plain tables:
--   seeds  = (:Entity) vertices of the current tenant whose norm_name is a query entity
--   walk   = breadth-first over (:Entity)-[:RELATED]->(:Entity), entity hops < depth
--   result = (:Memory)-[:MENTIONS]->(reached entity); hops = min entity hops + 1,
--            entity_hits = how many reached entities the memory mentions
-- Written as SQL over AGE's label tables, not Cypher: a Cypher variable-length match enumerates
-- every path instead of a breadth-first frontier (and AGE takes no parameter in its bounds), and a
-- Cypher property filter is a scan of the whole label. Here every step is a btree probe (indexes
-- from the migration: Entity (tenant, norm_name), RELATED (start_id, end_id), MENTIONS (end_id,
-- start_id), Memory (id)). The probes are LATERAL subqueries behind OFFSET 0 so the plan is a
-- parameterized nested loop whatever the (often missing) statistics on agtype expressions say:
-- without that, missing statistics on the label tables can turn a probe into a scan of the label.
-- Tenant: the label tables have no row-level security (PostgreSQL would then refuse AGE's
-- non-leakproof operators as index conditions), so the seeds and the memories are filtered on their
-- tenant property here; RELATED edges only ever join entities of one tenant.
-- The worker also binds cypher_params (the agtype map for Cypher); this statement does not use it.
WITH RECURSIVE walk(entity_gid, hops) AS (
    SELECT v.id, 0
    FROM memoria_graph."Entity" v
    WHERE ag_catalog.agtype_object_field_text(v.properties, 'tenant') = current_setting('memoria.tenant')
      AND ag_catalog.agtype_object_field_text(v.properties, 'norm_name') = ANY(%(entities)s::text[])
    UNION
    SELECT r.end_id, w.hops + 1
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT e.end_id FROM memoria_graph."RELATED" e
        WHERE e.start_id OPERATOR(ag_catalog.=) w.entity_gid OFFSET 0
    ) r
    WHERE w.hops + 1 < %(depth)s
), reached AS (
    SELECT entity_gid, min(hops) AS hops FROM walk GROUP BY entity_gid
), hits AS (
    SELECT me.start_id AS memory_gid, min(r.hops) + 1 AS hops, count(*) AS entity_hits
    FROM reached r
    CROSS JOIN LATERAL (
        SELECT e.start_id FROM memoria_graph."MENTIONS" e
        WHERE e.end_id OPERATOR(ag_catalog.=) r.entity_gid OFFSET 0
    ) me
    GROUP BY me.start_id
)
SELECT ag_catalog.agtype_object_field_text(mv.properties, 'memory_id')::bigint AS memory_id,
       ag_catalog.agtype_object_field_text(mv.properties, 'memory_type') AS memory_type,
       h.hops, h.entity_hits
FROM hits h
CROSS JOIN LATERAL (
    SELECT v.properties FROM memoria_graph."Memory" v
    WHERE v.id OPERATOR(ag_catalog.=) h.memory_gid OFFSET 0
) mv
WHERE ag_catalog.agtype_object_field_text(mv.properties, 'tenant') = current_setting('memoria.tenant')
  AND (%(memory_type)s::text IS NULL
       OR ag_catalog.agtype_object_field_text(mv.properties, 'memory_type') = %(memory_type)s::text)
ORDER BY h.hops, h.entity_hits DESC, memory_id
LIMIT %(limit)s
