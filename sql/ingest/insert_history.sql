-- The first entry of each new memory's history (memoria.memory_history, migration 0010).
INSERT INTO memoria.memory_history (tenant, memory_id, event)
SELECT current_setting('memoria.tenant'), memory_id, 'stored'
FROM stage_memories
WHERE tenant = current_setting('memoria.tenant') AND memory_id IS NOT NULL
ORDER BY memory_id
