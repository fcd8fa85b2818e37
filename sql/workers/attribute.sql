-- Attribute worker: memories stating the query's subject's attribute. distance is the trigram
-- distance of subject plus attribute (0 = exact), so near spellings still match.
SELECT a.memory_id, a.memory_type,
       min((lower(a.subject) <-> lower(%(subject)s)) + (lower(a.attribute) <-> lower(%(attribute)s))) AS distance,
       (array_agg(a.value ORDER BY (lower(a.subject) <-> lower(%(subject)s)) + (lower(a.attribute) <-> lower(%(attribute)s))))[1] AS value
FROM memoria.memory_attributes a
WHERE a.tenant = current_setting('memoria.tenant')
  AND (%(memory_type)s::text IS NULL OR a.memory_type = %(memory_type)s::text)
  AND lower(a.subject) %% lower(%(subject)s)
  AND lower(a.attribute) %% lower(%(attribute)s)
GROUP BY a.memory_id, a.memory_type
ORDER BY distance, a.memory_id
LIMIT %(limit)s
