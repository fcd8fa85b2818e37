-- Insert the staged memories of the current tenant, the late ones or the others; duplicates
-- (same tenant, type and dedup key) are skipped, and each new row's id is written back to the stage.
-- Rows go in key order: two writers whose batches share keys then wait for each other in one order.
WITH inserted AS (
    INSERT INTO memoria.memories AS m
        (tenant, memory_type, external_id, dedup_key, content, context, metadata, importance, pinned,
         created_at, valid_from, valid_to, embedding, doc_len)
    SELECT tenant, memory_type, external_id, dedup_key, content, context, metadata, importance, pinned,
           created_at, valid_from, valid_to, embedding, doc_len
    FROM stage_memories
    WHERE tenant = current_setting('memoria.tenant') AND late = %(late)s
    ORDER BY memory_type, dedup_key
    ON CONFLICT (tenant, memory_type, dedup_key) DO NOTHING
    RETURNING m.id, m.memory_type, m.dedup_key
)
UPDATE stage_memories s
SET memory_id = i.id
FROM inserted i
WHERE s.tenant = current_setting('memoria.tenant')
  AND s.memory_type = i.memory_type AND s.dedup_key = i.dedup_key
