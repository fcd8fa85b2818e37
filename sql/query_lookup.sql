-- Query processing's one read: the stored names of the query's n-grams that are known entities of
-- the current tenant (kind 'entity', name) and the tenant's memories per memory type (kind 'rows':
-- the BM25 document counts, as sql/tenant_rows.sql reads them, with whether the tenant's own HNSW
-- index of that type over half-precision vectors is there to search), in one round trip.
SELECT 'entity' AS kind, e.name, NULL::bigint AS n_docs, NULL::boolean AS half_index
FROM memoria.entities e
WHERE e.tenant = current_setting('memoria.tenant') AND e.norm_name = ANY(%(norms)s::text[])
UNION ALL
SELECT 'rows', d.memory_type, d.n_docs,
       d.n_docs > %(hnsw_min_rows)s AND EXISTS (  -- a valid index of the halfvec form (db/vector_indexes.py)
           SELECT 1 FROM pg_catalog.pg_index i
           WHERE i.indisvalid AND i.indexrelid = pg_catalog.to_regclass('memoria.memories_vh_' || left(
               encode(sha256(convert_to(d.memory_type || '/' || d.tenant, 'UTF8')), 'hex'), 24)))
FROM memoria.bm25_docs d
WHERE d.tenant = current_setting('memoria.tenant')
