-- Vector worker, exact, for a tenant with many vectors in the shard (VectorWorker: at least
-- BOUNDED_MIN_ROWS times the limit): the same rows in the same order as workers/vector_exact, with
-- fewer of them sorted. The distance of the k-th nearest (k = %(limit)s) of the first %(sample)s
-- vectors the scan reads is at least that of the k-th nearest of them all, so every row of the answer
-- is within it: only the rows within it go to the sort (at 100k, ~350 of 7,000), and the sort was a
-- third of this statement's time. The sampled rows are read twice; a bound needs k of them.
-- No bound (fewer than k sampled) is NaN, which PostgreSQL orders after every number and equal to
-- itself: every distance is within it. A NaN distance (a zero vector) is left out only when k
-- sampled rows are nearer, and then it could not be among the k nearest either.
-- Each distance is computed once (the OFFSET 0 keeps the subquery, and its projection, apart from
-- the filter above it). cosine_distance() is the function behind <=>, as in workers/vector_exact.
-- A search split by type (VectorWorker.split_search) cuts this text before its last SELECT: the
-- sample and the bound, from the largest of its exactly searched types, and that SELECT once per
-- type, all within the one bound (the nearest k of a subset are no nearer than those of all).
WITH sample AS (
    SELECT cosine_distance(m.embedding, %(embedding)s) AS distance
    FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant')
      AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
    LIMIT %(sample)s
), bound AS (  -- the k-th nearest sampled distance, if k were sampled
    SELECT max(k.distance) AS distance
    FROM (SELECT s.distance FROM sample s ORDER BY s.distance LIMIT %(limit)s) k
    HAVING count(*) >= %(limit)s
)
SELECT x.memory_id, x.memory_type, x.distance
FROM (
    SELECT m.id AS memory_id, m.memory_type, cosine_distance(m.embedding, %(embedding)s) AS distance
    FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant')
      AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
    OFFSET 0
) x
WHERE x.distance <= coalesce((SELECT b.distance FROM bound b), 'NaN'::float8)
ORDER BY x.distance, x.memory_id
LIMIT %(limit)s
