-- Graph worker (plain tables): bounded breadth-first walk from the query's entities over
-- co-occurrence edges, then the memories that mention a reached entity. hops = entity hops + 1, so
-- depth 1 means "memories mentioning a query entity".
-- Bounded, so the work grows with the limits and not with how many memories mention a hub entity:
--   fan-out: each entity of the frontier follows at most %(fanout)s edges, the strongest first
--            (weight desc, then entity id); the seeds are the query's entities themselves. An edge
--            is stored once per pair, from the smaller entity id (migration 0017): an entity's
--            neighbours are the other ends of the edges it starts (primary key) and ends (dst index);
--   mentions: each reached entity offers at most %(entity_memories)s memories, the most recent first
--            (memory id desc), read index-only and backwards, so at most %(entity_memories)s index
--            entries per entity: an untyped walk from the primary key (tenant, entity_id, memory_id)
--            INCLUDE (memory_type) (migration 0019; before, it read up to that many per memory type
--            and merged them), a typed one from (entity_id, memory_type, memory_id) (migration 0007).
--            Exactly one of the two branches runs: the other's condition on memory_type is false.
-- A memory's hops is the fewest entity hops among the reached entities that offered it, entity_hits
-- the number of them; rows come hops first, then entity_hits desc, then the most recent.
-- Migration 0007 (migrations/versions/0007_bounded_graph_walk_attribute_subject.py) gives
-- memoria.graph_walk (the AGE path) the same walk; 0017 and 0019 edit it as they edit this one.
WITH RECURSIVE walk(entity_id, hops) AS (
    SELECT e.id, 0
    FROM memoria.entities e
    WHERE e.tenant = current_setting('memoria.tenant') AND e.norm_name = ANY(%(entities)s::text[])
    UNION
    SELECT n.dst_id, w.hops + 1
    FROM walk w
    CROSS JOIN LATERAL (
        SELECT x.dst_id FROM (
            SELECT ed.dst_id, ed.weight FROM memoria.entity_edges ed
            WHERE ed.src_id = w.entity_id AND ed.tenant = current_setting('memoria.tenant')
            UNION ALL
            SELECT ed.src_id, ed.weight FROM memoria.entity_edges ed
            WHERE ed.dst_id = w.entity_id AND ed.tenant = current_setting('memoria.tenant')
        ) x
        ORDER BY x.weight DESC, x.dst_id
        LIMIT %(fanout)s
    ) n
    WHERE w.hops + 1 < %(depth)s
), reached AS (
    SELECT entity_id, min(hops) AS hops FROM walk GROUP BY entity_id
), offered AS (
    SELECT r.hops, m.memory_id, m.memory_type
    FROM reached r
    CROSS JOIN LATERAL (
        SELECT me.memory_id, me.memory_type FROM memoria.memory_entities me
        WHERE me.tenant = current_setting('memoria.tenant') AND me.entity_id = r.entity_id
          AND %(memory_type)s::text IS NULL
        ORDER BY me.memory_id DESC
        LIMIT %(entity_memories)s
    ) m
    UNION ALL
    SELECT r.hops, m.memory_id, m.memory_type
    FROM reached r
    CROSS JOIN LATERAL (
        SELECT me.memory_id, me.memory_type FROM memoria.memory_entities me
        WHERE me.entity_id = r.entity_id AND me.memory_type = %(memory_type)s::text
          AND me.tenant = current_setting('memoria.tenant')
        ORDER BY me.memory_id DESC
        LIMIT %(entity_memories)s
    ) m
)
SELECT o.memory_id, o.memory_type, min(o.hops) + 1 AS hops, count(*) AS entity_hits
FROM offered o
GROUP BY o.memory_id, o.memory_type
ORDER BY hops, entity_hits DESC, o.memory_id DESC
LIMIT %(limit)s
