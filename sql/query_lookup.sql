-- Query processing's one read: the stored names of the query's n-grams that are known entities of
-- the current tenant (kind 'entity', name) and the tenant's memories per memory type (kind 'rows':
-- the BM25 document counts, as sql/tenant_rows.sql reads them), in one round trip.
SELECT 'entity' AS kind, e.name, NULL::bigint AS n_docs
FROM memoria.entities e
WHERE e.tenant = current_setting('memoria.tenant') AND e.norm_name = ANY(%(norms)s::text[])
UNION ALL
SELECT 'rows', d.memory_type, d.n_docs
FROM memoria.bm25_docs d
WHERE d.tenant = current_setting('memoria.tenant')
