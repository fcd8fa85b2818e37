-- How many memories the current tenant holds per memory type (the BM25 document counts, kept by
-- ingestion). Read once per query, in query processing's transaction: shard selection skips the
-- tenant's empty shards, and the vector worker searches exactly up to VECTOR_EXACT_MAX_ROWS memories
-- per type and with HNSW above. The entity lookup reads them in its own statement (sql/query_lookup.sql);
-- this one runs when the query has nothing to look up.
SELECT memory_type, n_docs
FROM memoria.bm25_docs
WHERE tenant = current_setting('memoria.tenant')
