-- BM25 postings of the new memories of the current tenant, with their impact: the BM25
-- term-frequency factor under the average length of the shard including this batch. The shard's
-- statistics are read, not locked (update_docs.sql adds to them at the end of the batch): impact
-- only orders the postings, scores are recomputed from tf, doc_len and the current statistics.
WITH new_docs AS (
    SELECT memory_id, memory_type, doc_len, terms, tfs FROM stage_memories
    WHERE tenant = current_setting('memoria.tenant') AND memory_id IS NOT NULL
), stats AS (
    SELECT b.memory_type,
           (b.sum_len + coalesce(d.sum_len, 0))::float8 / (b.n_docs + coalesce(d.n_docs, 0)) AS avg_len
    FROM (SELECT memory_type, count(*) AS n_docs, sum(doc_len) AS sum_len FROM new_docs GROUP BY memory_type) b
    LEFT JOIN memoria.bm25_docs d
           ON d.tenant = current_setting('memoria.tenant') AND d.memory_type = b.memory_type
)
INSERT INTO memoria.memory_terms (tenant, memory_type, term, memory_id, tf, doc_len, impact)
SELECT current_setting('memoria.tenant'), n.memory_type, t.term, n.memory_id, t.tf, n.doc_len,
       t.tf * (%(k1)s + 1) / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * n.doc_len / greatest(s.avg_len, 1e-9)))
FROM new_docs n
JOIN stats s USING (memory_type)
CROSS JOIN LATERAL unnest(n.terms, n.tfs) AS t (term, tf)
