-- Relevance pool for a typed query: the type's pinned memories and those marked highly important
-- (importance >= 0.9); when the whole type holds at most %(small_pool)s memories of the tenant, all
-- of them (the selected pool). Ordered by closeness to the query so the pool has a retrieval rank.
WITH pool_size AS (
    SELECT count(*) AS n FROM (
        SELECT 1 FROM memoria.memories
        WHERE tenant = current_setting('memoria.tenant') AND memory_type = %(memory_type)s
        LIMIT %(small_pool)s + 1) s
)
SELECT m.id AS memory_id, m.memory_type, m.pinned, m.embedding <=> %(embedding)s AS distance
FROM memoria.memories m, pool_size
WHERE m.tenant = current_setting('memoria.tenant') AND m.memory_type = %(memory_type)s
  AND (m.pinned OR m.importance >= 0.9 OR pool_size.n <= %(small_pool)s)
ORDER BY m.pinned DESC, distance, m.id
LIMIT %(limit)s
