-- Delete memories of the current tenant whose derived rows memoria.remove_derived took out: the rows,
-- the text their history kept (an update's previous version), and a 'deleted' entry for each.
WITH gone AS (
    DELETE FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant') AND m.id = ANY(%(ids)s::bigint[])
    RETURNING m.id, m.memory_type
), scrubbed AS (
    DELETE FROM memoria.memory_history h
    WHERE h.tenant = current_setting('memoria.tenant') AND h.memory_id = ANY(%(ids)s::bigint[])
      AND h.event = 'updated'
)
INSERT INTO memoria.memory_history (tenant, memory_id, event, detail)
SELECT current_setting('memoria.tenant'), g.id, 'deleted', jsonb_build_object('memory_type', g.memory_type)
FROM gone g
ORDER BY g.id
RETURNING memory_id
