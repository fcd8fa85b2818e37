-- How many memories the current tenant holds per memory type (the BM25 document counts, kept by
-- ingestion). Read once per query, in query processing's transaction: shard selection skips the
-- tenant's empty shards, and the vector worker searches exactly up to VECTOR_EXACT_MAX_ROWS memories
-- per type and with HNSW above. The entity lookup reads them in its own statement (sql/query_lookup.sql);
-- this one runs when the query has nothing to look up.
-- half_index: above %(hnsw_min_rows)s memories (the exact bound), whether the tenant's own HNSW index of
-- the type over half-precision vectors is there (memoria_pg/db/vector_indexes.py: the index's name is
-- a hash of the type and the tenant; only a valid one counts), so that the vector worker orders by the
-- expression it indexes (sql/workers/vector_half.sql).
SELECT d.memory_type, d.n_docs,
       d.n_docs > %(hnsw_min_rows)s AND EXISTS (  -- a valid index of the halfvec form (db/vector_indexes.py)
           SELECT 1 FROM pg_catalog.pg_index i
           WHERE i.indisvalid AND i.indexrelid = pg_catalog.to_regclass('memoria.memories_vh_' || left(
               encode(sha256(convert_to(d.memory_type || '/' || d.tenant, 'UTF8')), 'hex'), 24))) AS half_index
FROM memoria.bm25_docs d
WHERE d.tenant = current_setting('memoria.tenant')
