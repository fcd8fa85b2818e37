-- A memory's history, oldest first (by time: a delete re-writes its 'updated' entries, sql/lifecycle/delete.sql).
SELECT h.id, h.memory_id, h.event, h.at, h.detail
FROM memoria.memory_history h
WHERE h.tenant = current_setting('memoria.tenant') AND h.memory_id = %(id)s
ORDER BY h.at, h.id
