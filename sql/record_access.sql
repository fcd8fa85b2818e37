-- The access statistics of the memories a ranked query returned (the ranking's access signal).
-- An upsert into memory_access, not an update of the memories: their shards stay all-visible for
-- the vector worker's index-only scans. Rows go in id order: concurrent queries returning
-- overlapping memories in different orders would otherwise deadlock.
INSERT INTO memoria.memory_access AS a (memory_id, tenant, access_count, last_accessed_at)
SELECT DISTINCT id, current_setting('memoria.tenant'), 1, now()
FROM unnest(%(ids)s::bigint[]) AS u(id)
ORDER BY id
ON CONFLICT (memory_id) DO UPDATE
SET access_count = a.access_count + 1, last_accessed_at = excluded.last_accessed_at
