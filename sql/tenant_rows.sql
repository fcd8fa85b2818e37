-- How many memories the current tenant holds per memory type (the BM25 document counts, kept by
-- ingestion). Read once per query, in the entity lookup's transaction: shard selection skips the
-- tenant's empty shards, and the vector worker searches exactly up to VECTOR_EXACT_MAX_ROWS memories
-- per type and with HNSW above.
SELECT memory_type, n_docs
FROM memoria.bm25_docs
WHERE tenant = current_setting('memoria.tenant')
