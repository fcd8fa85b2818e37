-- Candidate construction: every completed worker's hits (and relevance-pool ids) arrive as arrays,
-- are merged and deduplicated by memory id, scored by weighted reciprocal-rank fusion over the top
-- %(depth)s of each source, capped at RANKING_CANDIDATE_LIMIT, and only then joined to the rows and
-- embeddings (the expensive part).
WITH hits AS (
    SELECT h.*
    FROM unnest(%(ids)s::bigint[], %(types)s::text[], %(sources)s::text[], %(ranks)s::int[],
                %(scores)s::float8[]) AS h(memory_id, memory_type, source, rank, score)
), weights AS (
    SELECT * FROM unnest(%(weight_sources)s::text[], %(weight_values)s::float8[]) AS w(source, weight)
), merged AS (
    SELECT h.memory_id, h.memory_type,
           array_agg(h.source ORDER BY h.source) AS sources,
           jsonb_object_agg(h.source, h.score) AS scores,
           jsonb_object_agg(h.source, h.rank) AS ranks,
           sum(CASE WHEN h.rank <= %(depth)s THEN coalesce(w.weight, 0) / (%(rrf_k)s + h.rank) ELSE 0 END)
               AS retrieval_score,
           min(h.score) FILTER (WHERE h.source = 'vector') AS distance
    FROM hits h LEFT JOIN weights w USING (source)
    GROUP BY h.memory_id, h.memory_type
), capped AS (
    SELECT * FROM merged
    ORDER BY retrieval_score DESC, distance ASC NULLS LAST, memory_id
    LIMIT %(cap)s
)
SELECT c.memory_id, c.sources, c.scores, c.ranks, c.retrieval_score,
       m.tenant, m.memory_type, m.content, m.metadata,
       m.importance::text AS importance,  -- as printed: the result is fetched in binary (candidates.py)
       m.created_at,
       m.last_accessed_at, m.access_count, m.embedding
FROM capped c
JOIN memoria.memories m ON m.id = c.memory_id AND m.memory_type = c.memory_type
WHERE m.tenant = current_setting('memoria.tenant')
  AND m.id = ANY(%(ids)s::bigint[])  -- lets the planner probe each shard's id index with the whole list
ORDER BY c.retrieval_score DESC, c.distance ASC NULLS LAST, c.memory_id
