-- Vector worker, HNSW: cosine distance over the tenant's own HNSW index of the shard (iterative scan
-- keeps the filters from starving the result; the outer ORDER BY restores exact order after
-- relaxed_order). The tenant is named as a value (the row-level security policy still checks
-- memoria.tenant): on this statement's custom plan the planner proves a per-tenant partial HNSW
-- index's predicate (WHERE tenant = '<tenant>', memoria_pg/db/vector_indexes.py) and searches the
-- tenant's own graph. A tenant without one yet has no HNSW index to use (there is no shared one since
-- migration 0016): the same statement is then an exact search over the covering index, and a sort.
WITH nearest AS MATERIALIZED (
    SELECT m.id AS memory_id, m.memory_type, m.embedding <=> %(embedding)s AS distance
    FROM memoria.memories m
    WHERE m.tenant = %(tenant)s::text
      AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
    ORDER BY m.embedding <=> %(embedding)s
    LIMIT %(limit)s
)
SELECT memory_id, memory_type, distance FROM nearest ORDER BY distance
