INSERT INTO memoria.memory_attributes (tenant, memory_id, memory_type, subject, attribute, value)
SELECT current_setting('memoria.tenant'), s.memory_id, s.memory_type, a.subject, a.attribute, a.value
FROM stage_attributes a JOIN stage_memories s USING (row_no)
WHERE s.tenant = current_setting('memoria.tenant') AND s.memory_id IS NOT NULL
