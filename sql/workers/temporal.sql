-- Temporal worker: the memories stored in the window of time the query speaks of ("last week",
-- "four weeks ago": memoria_pg/query/time_window.py resolves it against the query's time), nearest to
-- the query first. A question about a time is answered by what was said then; the vector and BM25
-- workers, blind to time, may rank a closer match from another month above it. The window's newest
-- window_rows memories (2,000) are compared (an index range scan of (tenant, created_at), then their
-- vectors), so a wide window over a large tenant costs a bounded read.
SELECT w.id AS memory_id, w.memory_type, w.embedding <=> %(embedding)s AS distance
FROM (
    SELECT m.id, m.memory_type, m.embedding
    FROM memoria.memories m
    WHERE m.tenant = current_setting('memoria.tenant')
      AND (%(memory_type)s::text IS NULL OR m.memory_type = %(memory_type)s::text)
      AND m.created_at >= %(start)s::timestamptz AND m.created_at < %(end)s::timestamptz
    ORDER BY m.created_at DESC
    LIMIT %(window_rows)s
) w
ORDER BY distance, w.id
LIMIT %(limit)s
