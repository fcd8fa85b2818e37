-- The ids of the current tenant's memories a `forget` filter matches, locked for the deletion.
SELECT m.id
FROM memoria.memories m
WHERE m.tenant = current_setting('memoria.tenant')
  AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
  AND (%(before)s::timestamptz IS NULL OR m.created_at < %(before)s::timestamptz)
  AND (%(where)s::jsonb IS NULL OR m.metadata @> %(where)s::jsonb)
ORDER BY m.id
FOR UPDATE
