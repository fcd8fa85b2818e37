-- Attribute worker: memories stating the query's subject's attribute. The subject must match
-- case-insensitively: subject_lower is the stored lower(subject) (migration 0007), so the lookup is a
-- text equality, leakproof, which the (tenant, subject_lower) index serves under row-level security
-- (lower(subject) = ... is not: lower() is not leakproof and would run after the policy, on every
-- attribute row of the tenant). The attribute may be spelled differently: distance is its trigram
-- distance (0 = exact), computed on the subject's rows only.
SELECT a.memory_id, a.memory_type,
       min(lower(a.attribute) <-> lower(%(attribute)s)) AS distance,
       (array_agg(a.value ORDER BY lower(a.attribute) <-> lower(%(attribute)s), a.id))[1] AS value,
       -- whether one of the facts still held at the query time (no newer fact superseded it: 0010)
       bool_or(a.valid_to IS NULL OR a.valid_to > coalesce(%(valid_at)s::timestamptz, now())) AS current
FROM memoria.memory_attributes a
WHERE a.tenant = current_setting('memoria.tenant')
  AND a.subject_lower = lower(%(subject)s)
  AND (%(memory_type)s::text IS NULL OR a.memory_type = %(memory_type)s::text)
  AND similarity(lower(a.attribute), lower(%(attribute)s)) >= 0.3
GROUP BY a.memory_id, a.memory_type
ORDER BY distance, a.memory_id
LIMIT %(limit)s
