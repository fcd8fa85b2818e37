-- Vector worker, HNSW over half-precision vectors: the tenant's own index of the shard, built on the
-- embedding cast to halfvec(384) with halfvec_cosine_ops (memoria_pg/db/vector_indexes.py), found by
-- ordering on that same expression. The worker takes this statement only for a memory type whose index of
-- this form the query's lookup found valid (sql/query_lookup.sql); otherwise sql/workers/vector.sql,
-- ordered by the full-precision distance. The distances returned are the full-precision ones of the
-- rows the graph search found, re-sorted (relaxed_order and the half-precision order may differ there
-- in the last digits). 384 is the embedding's dimension count: the worker writes the configured one.
WITH nearest AS MATERIALIZED (
    SELECT m.id AS memory_id, m.memory_type, m.embedding <=> %(embedding)s AS distance
    FROM memoria.memories m
    WHERE m.tenant = %(tenant)s::text
      AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
    ORDER BY m.embedding::halfvec(384) <=> %(embedding)s::halfvec(384)
    LIMIT %(limit)s
)
SELECT memory_id, memory_type, distance FROM nearest ORDER BY distance
