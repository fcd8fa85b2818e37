-- The staged memories of the current tenant that were not inserted (duplicates: their tenant, type
-- and dedup key are stored already), each with the id of the memory stored under that key.
SELECT s.row_no, m.id
FROM stage_memories s
JOIN memoria.memories m
  ON m.tenant = s.tenant AND m.memory_type = s.memory_type AND m.dedup_key = s.dedup_key
WHERE s.tenant = current_setting('memoria.tenant') AND s.memory_id IS NULL
