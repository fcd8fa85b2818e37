-- The access statistics of the memories a ranked query returned (the ranking's access signal).
-- An upsert into memory_access, not an update of the memories: their shards stay all-visible for
-- the vector worker's index-only scans. The ids are taken from memories under row-level security, so
-- an id that is not a memory of the tenant counts nothing; the conflict target (tenant, memory_id) is
-- the key of migration 0009. Rows go in id order: concurrent queries returning overlapping memories in
-- different orders would otherwise deadlock.
INSERT INTO memoria.memory_access AS a (tenant, memory_id, access_count, last_accessed_at)
SELECT DISTINCT m.tenant, m.id, 1, now()
FROM memoria.memories m
WHERE m.tenant = current_setting('memoria.tenant') AND m.id = ANY(%(ids)s::bigint[])
ORDER BY m.id
ON CONFLICT (tenant, memory_id) DO UPDATE
SET access_count = a.access_count + 1, last_accessed_at = excluded.last_accessed_at
