-- Vector worker: cosine distance over one shard's HNSW index (iterative scan keeps the tenant
-- filter from starving the result; the outer ORDER BY restores exact order after relaxed_order).
WITH nearest AS MATERIALIZED (
    SELECT m.id AS memory_id, m.memory_type, m.embedding <=> %(embedding)s AS distance
    FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant')
      AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
    ORDER BY m.embedding <=> %(embedding)s
    LIMIT %(limit)s
)
SELECT memory_id, memory_type, distance FROM nearest ORDER BY distance
