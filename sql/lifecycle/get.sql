-- One memory of the current tenant with its validity and, when a newer fact superseded one of its
-- single-valued facts, the memory stating it (the earliest such end).
SELECT m.id, m.tenant, m.memory_type, m.content, m.context, m.metadata, m.external_id,
       m.importance::float8 AS importance, m.pinned, m.created_at,
       coalesce(m.valid_from, m.created_at) AS valid_from, m.valid_to,
       (SELECT a.superseded_by FROM memoria.memory_attributes a
        WHERE a.tenant = m.tenant AND a.memory_id = m.id AND a.superseded_by IS NOT NULL
        ORDER BY a.valid_to, a.id LIMIT 1) AS superseded_by
FROM memoria.memories m
WHERE m.tenant = current_setting('memoria.tenant')
  AND (%(id)s::bigint IS NULL OR m.id = %(id)s::bigint)
  AND (%(external_id)s::text IS NULL OR m.external_id = %(external_id)s::text)
ORDER BY m.id
LIMIT 2
