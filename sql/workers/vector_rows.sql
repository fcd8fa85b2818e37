-- How many memories the current tenant holds per shard (the BM25 document counts, kept by ingestion):
-- the vector worker searches exactly below VECTOR_EXACT_MAX_ROWS and with HNSW above.
SELECT memory_type, n_docs
FROM memoria.bm25_docs
WHERE tenant = current_setting('memoria.tenant')
