-- V3 in one statement: the vector worker's search (workers/vector_exact or workers/vector, chosen
-- by the tenant's size as VectorWorker chooses it) becomes the final CTE's hits, and the rest of
-- sql/final_candidates.sql (fusion of the one source, cap, validity, the rows) runs on them in the
-- same statement: the hits never travel to the client and back. The search replaces the marker
-- line below (candidates.py, v3_statement). Each hit's rank is its place by (distance, id), as
-- Worker.hits ranks them; a NaN distance (a stored vector of zero norm) is left out, as
-- fused_scores leaves it out of the final CTE. Each row comes back with its hit's distance and
-- rank and the number of hits, which the caller of V4's final CTE knows already (candidates.py, _V3_EDITS).
WITH hits AS (
    SELECT v.memory_id, v.memory_type, 'vector'::text AS source,
           (row_number() OVER (ORDER BY v.distance, v.memory_id))::int AS rank, v.distance::float8 AS score
    FROM (
-- @search
    ) v
    WHERE v.distance <> 'NaN'::float8
