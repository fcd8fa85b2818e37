-- Graph worker (plain tables): breadth-first walk from the query's entities over co-occurrence
-- edges, then the memories that mention a reached entity. hops = entity hops + 1, so depth 1 means
-- "memories mentioning a query entity"; entity_hits counts the reached entities a memory mentions.
WITH RECURSIVE walk(entity_id, hops) AS (
    SELECT e.id, 0
    FROM memoria.entities e
    WHERE e.tenant = current_setting('memoria.tenant') AND e.norm_name = ANY(%(entities)s::text[])
    UNION
    SELECT ed.dst_id, w.hops + 1
    FROM walk w
    JOIN memoria.entity_edges ed ON ed.src_id = w.entity_id
    WHERE w.hops + 1 < %(depth)s AND ed.tenant = current_setting('memoria.tenant')
), reached AS (
    SELECT entity_id, min(hops) AS hops FROM walk GROUP BY entity_id
)
SELECT me.memory_id, me.memory_type, min(r.hops) + 1 AS hops, count(*) AS entity_hits
FROM reached r
JOIN memoria.memory_entities me ON me.entity_id = r.entity_id
WHERE me.tenant = current_setting('memoria.tenant')
  AND (%(memory_type)s::text IS NULL OR me.memory_type = %(memory_type)s::text)
GROUP BY me.memory_id, me.memory_type
ORDER BY hops, entity_hits DESC, me.memory_id
LIMIT %(limit)s
