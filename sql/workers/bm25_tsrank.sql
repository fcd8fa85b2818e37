-- Baseline for benchmarks only: PostgreSQL's own ts_rank_cd over the 'simple' tsvector.
SELECT m.id AS memory_id, m.memory_type, ts_rank_cd(m.tsv, q) AS score
FROM memoria.memories m, to_tsquery('simple', %(tsquery)s) q
WHERE m.tenant = current_setting('memoria.tenant')
  AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
  AND m.tsv @@ q
ORDER BY score DESC, m.id
LIMIT %(limit)s
