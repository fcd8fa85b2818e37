-- Vector worker, exact: the cosine distance to every vector of the tenant in the shard, read from the
-- covering index memories (tenant) INCLUDE (memory_type, id, embedding) by an index-only scan
-- (migration 0004). Chosen when the tenant holds few memories in the shard (VectorWorker): then it is
-- as cheap as a graph search, and it has no recall loss.
-- cosine_distance() is the function behind <=>: the same values, but no HNSW index can serve it.
SELECT m.id AS memory_id, m.memory_type, cosine_distance(m.embedding, %(embedding)s) AS distance
FROM memoria.memories m
WHERE m.tenant = current_setting('memoria.tenant')
  AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
ORDER BY distance, m.id
LIMIT %(limit)s
