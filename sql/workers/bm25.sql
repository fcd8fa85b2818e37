-- BM25 worker (Okapi BM25 with Lucene's non-negative IDF):
--   score(d) = sum over query terms t of qtf(t) * idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * |d| / avgdl))
--   idf(t)   = ln(1 + (N - df + 0.5) / (df + 0.5))
-- N, df and avgdl are summed over the selected shards, so scores from several shards compare.
-- Postings are read in impact order, at most %(per_term)s per term: a common term (low IDF) costs
-- a bounded index range instead of a scan of every document that contains it.
WITH q AS (
    SELECT term, count(*) AS qtf FROM unnest(%(terms)s::text[]) AS term GROUP BY term
), stats AS (
    SELECT sum(n_docs)::float8 AS n, sum(sum_len)::float8 / nullif(sum(n_docs), 0) AS avgdl
    FROM memoria.bm25_docs
    WHERE tenant = current_setting('memoria.tenant')
      AND (%(types)s::text[] IS NULL OR memory_type = ANY(%(types)s::text[]))
), idf AS (
    SELECT q.term, q.qtf, ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5)) AS idf
    FROM q
    CROSS JOIN stats s
    CROSS JOIN LATERAL (
        SELECT sum(t.df)::float8 AS df FROM memoria.bm25_terms t
        WHERE t.tenant = current_setting('memoria.tenant') AND t.term = q.term
          AND (%(types)s::text[] IS NULL OR t.memory_type = ANY(%(types)s::text[]))
    ) d
    WHERE d.df > 0
), postings AS (
    SELECT p.memory_id, p.memory_type, i.qtf, i.idf, p.tf, p.doc_len
    FROM idf i
    CROSS JOIN LATERAL (
        SELECT mt.memory_id, mt.memory_type, mt.tf, mt.doc_len
        FROM memoria.memory_terms mt
        WHERE mt.tenant = current_setting('memoria.tenant') AND mt.term = i.term
          AND (%(memory_type)s::text IS NULL OR mt.memory_type = %(memory_type)s::text)
        ORDER BY mt.impact DESC
        LIMIT %(per_term)s
    ) p
)
SELECT p.memory_id, p.memory_type,
       sum(p.qtf * p.idf * p.tf * (%(k1)s + 1)
           / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.doc_len / s.avgdl))) AS score
FROM postings p CROSS JOIN stats s
GROUP BY p.memory_id, p.memory_type
ORDER BY score DESC, p.memory_id
LIMIT %(limit)s
