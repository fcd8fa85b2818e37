-- BM25 with pseudo-relevance feedback (issue #14; an RM3-style expansion, in the database): the query's
-- terms plus the %(feedback_terms)s terms that best describe the seeds (%(seeds)s: the memories the
-- first fusion ranked highest), scored as the BM25 worker scores (sql/workers/bm25.sql, the same
-- formula and statistics). A term's weight in the seeds is the sum over them of tf / |d| (how much of
-- each seed it is) times its IDF (how rare it is in the tenant); the query's own terms are left out
-- of the expansion, as are all but the %(feedback_pool)s terms of highest tf / |d| (a bound on the
-- document-frequency probes: long seeds have a hundred distinct terms). An expansion term reads at
-- most %(feedback_per_term)s postings in impact order, the query's terms %(per_term)s as in bm25.sql.
WITH stats AS (
    SELECT sum(n_docs)::float8 AS n, sum(sum_len)::float8 / nullif(sum(n_docs), 0) AS avgdl
    FROM memoria.bm25_docs
    WHERE tenant = current_setting('memoria.tenant')
      AND (%(types)s::text[] IS NULL OR memory_type = ANY(%(types)s::text[]))
), seed_terms AS (
    SELECT mt.term, sum(mt.tf::float8 / greatest(mt.doc_len, 1)) AS weight
    FROM memoria.memory_terms mt
    WHERE mt.tenant = current_setting('memoria.tenant') AND mt.memory_id = ANY(%(seeds)s::bigint[])
      AND (%(types)s::text[] IS NULL OR mt.memory_type = ANY(%(types)s::text[]))
      AND mt.term <> ALL(%(terms)s::text[])
    GROUP BY mt.term
    ORDER BY weight DESC, mt.term
    LIMIT %(feedback_pool)s
), q AS (
    SELECT term, count(*) AS qtf, %(per_term)s::int AS per_term FROM unnest(%(terms)s::text[]) AS term GROUP BY term
), terms AS (
    SELECT q.term, q.qtf, q.per_term, d.df FROM q
    CROSS JOIN LATERAL (
        SELECT sum(t.df)::float8 AS df FROM memoria.bm25_terms t
        WHERE t.tenant = current_setting('memoria.tenant') AND t.term = q.term
          AND (%(types)s::text[] IS NULL OR t.memory_type = ANY(%(types)s::text[]))
    ) d
    UNION ALL
    (SELECT st.term, 1, %(feedback_per_term)s::int, d.df FROM seed_terms st
     CROSS JOIN stats s
     CROSS JOIN LATERAL (
         SELECT sum(t.df)::float8 AS df FROM memoria.bm25_terms t
         WHERE t.tenant = current_setting('memoria.tenant') AND t.term = st.term
           AND (%(types)s::text[] IS NULL OR t.memory_type = ANY(%(types)s::text[]))
     ) d
     WHERE d.df > 0
     ORDER BY st.weight * ln(1 + (s.n - d.df + 0.5) / (d.df + 0.5)) DESC, st.term
     LIMIT %(feedback_terms)s)
), idf AS (
    SELECT t.term, t.qtf, t.per_term, ln(1 + (s.n - t.df + 0.5) / (t.df + 0.5)) AS idf
    FROM terms t CROSS JOIN stats s
    WHERE t.df > 0
), postings AS (
    SELECT p.memory_id, p.memory_type, i.qtf, i.idf, p.tf, p.doc_len
    FROM idf i
    CROSS JOIN LATERAL (
        SELECT mt.memory_id, mt.memory_type, mt.tf, mt.doc_len
        FROM memoria.memory_terms mt
        WHERE mt.tenant = current_setting('memoria.tenant') AND mt.term = i.term
          AND (%(memory_type)s::text IS NULL OR mt.memory_type = %(memory_type)s::text)
        ORDER BY mt.impact DESC
        LIMIT i.per_term
    ) p
)
SELECT p.memory_id, p.memory_type,
       sum(p.qtf * p.idf * p.tf * (%(k1)s + 1)
           / (p.tf + %(k1)s * (1 - %(b)s + %(b)s * p.doc_len / s.avgdl))) AS score
FROM postings p CROSS JOIN stats s
GROUP BY p.memory_id, p.memory_type
ORDER BY score DESC, p.memory_id
LIMIT %(limit)s
