-- Document counts and lengths per shard of the current tenant; rows are upserted (locked) in one
-- order, so concurrent writers never deadlock.
INSERT INTO memoria.bm25_docs AS d (tenant, memory_type, n_docs, sum_len)
SELECT current_setting('memoria.tenant'), memory_type, count(*), sum(doc_len)
FROM stage_memories
WHERE tenant = current_setting('memoria.tenant') AND memory_id IS NOT NULL
GROUP BY memory_type
ORDER BY memory_type
ON CONFLICT (tenant, memory_type) DO UPDATE
    SET n_docs = d.n_docs + excluded.n_docs, sum_len = d.sum_len + excluded.sum_len
