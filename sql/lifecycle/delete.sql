-- Delete memories of the current tenant whose derived rows memoria.remove_derived took out: the rows,
-- the text their history kept (an update's previous values: each 'updated' entry is replaced by one
-- of the same time that keeps which fields changed, not what they said; the history is append-only
-- to the library's role, so it is a delete and an insert), and a 'deleted' entry for each.
WITH gone AS (
    DELETE FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant') AND m.id = ANY(%(ids)s::bigint[])
    RETURNING m.id, m.memory_type
), scrubbed AS (
    DELETE FROM memoria.memory_history h
    WHERE h.tenant = current_setting('memoria.tenant') AND h.memory_id = ANY(%(ids)s::bigint[])
      AND h.event = 'updated'
    RETURNING h.memory_id, h.at, h.detail - 'previous' AS detail
), kept AS (
    INSERT INTO memoria.memory_history (tenant, memory_id, event, at, detail)
    SELECT current_setting('memoria.tenant'), s.memory_id, 'updated', s.at, s.detail
    FROM scrubbed s
    ORDER BY s.memory_id, s.at
)
INSERT INTO memoria.memory_history (tenant, memory_id, event, detail)
SELECT current_setting('memoria.tenant'), g.id, 'deleted', jsonb_build_object('memory_type', g.memory_type)
FROM gone g
ORDER BY g.id
RETURNING memory_id
