-- Fusion worker: semantic and lexical retrieval in one statement, fused by weighted reciprocal rank
-- over the top %(depth)s of each (rank fusion is immune to the two scales; a shallow depth keeps the
-- long tail of either source from outvoting the other's confident hits).
--   score = w / (k + rank_vector) + (1 - w) / (k + rank_bm25),  w = FUSION_SEMANTIC_WEIGHT
WITH vec AS (
{vector}
), lex AS (
{bm25}
), ranked AS (
    SELECT memory_id, memory_type, row_number() OVER (ORDER BY distance, memory_id) AS r, 'v' AS src
    FROM vec
    UNION ALL
    SELECT memory_id, memory_type, row_number() OVER (ORDER BY score DESC, memory_id) AS r, 'l' AS src
    FROM lex
)
SELECT memory_id, memory_type,
       sum(CASE WHEN src = 'v' THEN %(weight)s ELSE 1 - %(weight)s END / (%(rrf_k)s + r)) AS score,
       min(r) FILTER (WHERE src = 'v') AS vector_rank,
       min(r) FILTER (WHERE src = 'l') AS bm25_rank
FROM ranked
WHERE r <= %(depth)s
GROUP BY memory_id, memory_type
ORDER BY score DESC, memory_id
LIMIT %(fusion_limit)s
