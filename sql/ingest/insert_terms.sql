-- BM25 maintenance for the new memories of the current tenant: shard statistics first, then the
-- postings with their impact (the BM25 term-frequency factor under the updated average length).
WITH new_docs AS (
    SELECT row_no, memory_id, memory_type, doc_len FROM stage_memories WHERE memory_id IS NOT NULL
), stats AS (
    INSERT INTO memoria.bm25_docs AS d (tenant, memory_type, n_docs, sum_len)
    SELECT current_setting('memoria.tenant'), memory_type, count(*), sum(doc_len)
    FROM new_docs GROUP BY memory_type
    ORDER BY memory_type  -- rows are upserted (locked) in one order, so concurrent writers never deadlock
    ON CONFLICT (tenant, memory_type) DO UPDATE
        SET n_docs = d.n_docs + excluded.n_docs, sum_len = d.sum_len + excluded.sum_len
    RETURNING d.memory_type, d.n_docs, d.sum_len
)
INSERT INTO memoria.memory_terms (tenant, memory_type, term, memory_id, tf, doc_len, impact)
SELECT current_setting('memoria.tenant'), n.memory_type, t.term, n.memory_id, t.tf, n.doc_len,
       t.tf * (%(k1)s + 1) / (t.tf + %(k1)s * (1 - %(b)s + %(b)s * n.doc_len
                                                 / greatest(s.sum_len::float8 / s.n_docs, 1e-9)))
FROM stage_terms t
JOIN new_docs n USING (row_no)
JOIN stats s USING (memory_type)
