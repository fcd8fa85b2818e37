-- A page of the current tenant's memories in id order, after the cursor, with optional filters.
SELECT m.id, m.tenant, m.memory_type, m.content, m.context, m.metadata, m.external_id,
       m.importance::float8 AS importance, m.pinned, m.created_at,
       coalesce(m.valid_from, m.created_at) AS valid_from, m.valid_to,
       (SELECT a.superseded_by FROM memoria.memory_attributes a
        WHERE a.tenant = m.tenant AND a.memory_id = m.id AND a.superseded_by IS NOT NULL
        ORDER BY a.valid_to, a.id LIMIT 1) AS superseded_by
FROM memoria.memories m
WHERE m.tenant = current_setting('memoria.tenant')
  AND m.id > %(after)s
  AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
  AND (%(where)s::jsonb IS NULL OR m.metadata @> %(where)s::jsonb)
ORDER BY m.id
LIMIT %(limit)s
