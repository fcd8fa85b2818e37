-- Append an entry to a memory's history.
INSERT INTO memoria.memory_history (tenant, memory_id, event, detail)
VALUES (current_setting('memoria.tenant'), %(id)s, %(event)s, %(detail)s)
