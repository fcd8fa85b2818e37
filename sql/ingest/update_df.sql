-- Document frequencies; rows are upserted in term order so concurrent writers never deadlock.
-- A memory's staged terms are distinct, so each one counts one document.
INSERT INTO memoria.bm25_terms AS t (tenant, memory_type, term, df)
SELECT current_setting('memoria.tenant'), s.memory_type, u.term, count(*)
FROM stage_memories s
CROSS JOIN LATERAL unnest(s.terms) AS u (term)
WHERE s.tenant = current_setting('memoria.tenant') AND s.memory_id IS NOT NULL
GROUP BY s.memory_type, u.term
ORDER BY u.term, s.memory_type
ON CONFLICT (tenant, term, memory_type) DO UPDATE SET df = t.df + excluded.df
