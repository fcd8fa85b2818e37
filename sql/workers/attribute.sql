-- Attribute worker: memories stating the query's subject's attribute. The subject must match
-- (case-insensitively: an equality the (tenant, lower(subject)) index serves under row-level
-- security); the attribute may be spelled differently: distance is its trigram distance (0 = exact).
SELECT a.memory_id, a.memory_type,
       min(lower(a.attribute) <-> lower(%(attribute)s)) AS distance,
       (array_agg(a.value ORDER BY lower(a.attribute) <-> lower(%(attribute)s), a.id))[1] AS value
FROM memoria.memory_attributes a
WHERE a.tenant = current_setting('memoria.tenant')
  AND lower(a.subject) = lower(%(subject)s)
  AND (%(memory_type)s::text IS NULL OR a.memory_type = %(memory_type)s::text)
  AND similarity(lower(a.attribute), lower(%(attribute)s)) >= 0.3
GROUP BY a.memory_id, a.memory_type
ORDER BY distance, a.memory_id
LIMIT %(limit)s
