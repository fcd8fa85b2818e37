-- The current tenant's memories in id order, as ingest records (MemorySystem.export): one statement
-- read through a cursor, so the export is one snapshot however long it takes. valid_from is NULL when
-- the memory holds from its created_at; the embedding only when asked for.
SELECT m.id, m.memory_type, m.content, m.context, m.metadata, m.external_id,
       m.importance::float8 AS importance, m.pinned, m.created_at, m.valid_from, m.valid_to,
       CASE WHEN %(embeddings)s THEN m.embedding END AS embedding
FROM memoria.memories m
WHERE m.tenant = current_setting('memoria.tenant')
  AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
  AND (%(where)s::jsonb IS NULL OR m.metadata @> %(where)s::jsonb)
ORDER BY m.id
