-- Relevance pool for a typed query: the type's pinned memories and those marked highly important
-- (importance >= 0.9); when the whole type holds at most %(small_pool)s memories of the tenant, all
-- of them (the selected pool). Ordered by closeness to the query so the pool has a retrieval rank.
-- Three branches, of which a one-time filter on the pool's size runs either the first or the other
-- two: as one OR the statement read every memory of the type to test it (3,500 heap rows, ~4 ms for a
-- 12k-memory tenant at 100k, growing with the tenant), where the index (tenant, pinned, importance)
-- reads only the pinned and the important ones. 0.9 is a real, as importance is: stored 0.9 counts.
WITH pool_size AS MATERIALIZED (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM memoria.memories
        WHERE tenant = current_setting('memoria.tenant') AND memory_type = %(memory_type)s
        LIMIT %(small_pool)s + 1) s
), pool AS (
    SELECT m.id, m.memory_type, m.pinned, m.embedding
    FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant') AND m.memory_type = %(memory_type)s
      AND (SELECT n FROM pool_size) <= %(small_pool)s
    UNION ALL
    SELECT m.id, m.memory_type, m.pinned, m.embedding
    FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant') AND m.memory_type = %(memory_type)s
      AND (SELECT n FROM pool_size) > %(small_pool)s AND m.pinned
    UNION ALL
    SELECT m.id, m.memory_type, m.pinned, m.embedding
    FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant') AND m.memory_type = %(memory_type)s
      AND (SELECT n FROM pool_size) > %(small_pool)s AND NOT m.pinned AND m.importance >= 0.9::real
)
SELECT p.id AS memory_id, p.memory_type, p.pinned, p.embedding <=> %(embedding)s AS distance
FROM pool p
ORDER BY p.pinned DESC, distance, p.id
LIMIT %(limit)s
