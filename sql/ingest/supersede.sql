-- Supersession of the single-valued facts the batch stated (memoria.supersede, migration 0010): each
-- (subject, attribute) key the batch's memories of the current tenant state is recomputed by time. The
-- keys are locked first, in key order (transaction-scoped advisory locks): two batches stating the
-- same key then recompute it one after the other, each seeing the other's facts.
WITH keys AS (
    SELECT DISTINCT lower(a.subject) AS subject_lower, lower(a.attribute) AS attribute
    FROM stage_attributes a JOIN stage_memories s USING (row_no)
    WHERE s.tenant = current_setting('memoria.tenant') AND s.memory_id IS NOT NULL
      AND (lower(a.attribute) = ANY(%(exact)s::text[]) OR lower(a.attribute) LIKE ANY(%(prefixes)s::text[]))
), locked AS (
    SELECT k.*, pg_advisory_xact_lock(hashtextextended(
               current_setting('memoria.tenant') || chr(31) || k.subject_lower || chr(31) || k.attribute, 0))
    FROM (SELECT * FROM keys ORDER BY subject_lower, attribute) k
)
SELECT memoria.supersede(coalesce(array_agg(subject_lower), '{}'), coalesce(array_agg(attribute), '{}'))
FROM locked
