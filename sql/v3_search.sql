-- V3 in one statement: the vector search becomes the final CTE's hits, and the rest of
-- sql/final_candidates.sql (fusion of the one source, cap, validity, the rows) runs on them in the
-- same statement, so the hits never travel to the client and back (candidates.py, v3_statement).
-- The search is the vector worker's exact form (workers/vector_exact, which replaces the marker line
-- below), run while the tenant holds at most %(exact_max_rows)s memories per memory type it has (the
-- BM25 document counts, as VectorWorker decides from sql/tenant_rows; a one-time filter on the
-- `sizes` row). A larger tenant gets no row here: its search is HNSW on its own per-tenant indexes
-- (db/vector_indexes.py), which only a custom plan naming the tenant can take, not this statement's
-- cached generic plan, so the caller runs the vector worker and the final CTE on its hits then
-- (QueryPipeline.retrieve_v3_in). Each hit's rank is its place by (distance, id), as Worker.hits
-- ranks them; a NaN distance (a stored vector of zero norm) is left out, as fused_scores leaves it
-- out of the final CTE. Each row comes back with its hit's distance and rank, the number of hits,
-- and the query processor's entity lookup (the stored names of %(norms)s among the tenant's
-- entities, sql/query_lookup.sql), read once (candidates.py, _V3_EDITS).
WITH sizes AS MATERIALIZED (
    SELECT %(exact_max_rows)s::numeric > 0
           AND coalesce(sum(d.n_docs), 0) <= %(exact_max_rows)s::numeric * greatest(1, count(*)) AS exact
    FROM memoria.bm25_docs d
    WHERE d.tenant = current_setting('memoria.tenant')
), hits AS (
    SELECT v.memory_id, v.memory_type, 'vector'::text AS source,
           (row_number() OVER (ORDER BY v.distance, v.memory_id))::int AS rank, v.distance::float8 AS score
    FROM (
        SELECT e.memory_id, e.memory_type, e.distance FROM (
-- @exact
        ) e WHERE (SELECT s.exact FROM sizes s)
    ) v
    WHERE v.distance <> 'NaN'::float8
