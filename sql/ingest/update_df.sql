-- Document frequencies; rows are upserted in term order so concurrent writers never deadlock.
INSERT INTO memoria.bm25_terms AS t (tenant, memory_type, term, df)
SELECT current_setting('memoria.tenant'), s.memory_type, st.term, count(*)
FROM stage_terms st
JOIN stage_memories s USING (row_no)
WHERE s.tenant = current_setting('memoria.tenant') AND s.memory_id IS NOT NULL
GROUP BY s.memory_type, st.term
ORDER BY st.term, s.memory_type
ON CONFLICT (tenant, term, memory_type) DO UPDATE SET df = t.df + excluded.df
