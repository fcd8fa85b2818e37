-- A memory's new version (memoria.remove_derived took the old one's derived rows out first); a new
-- memory type moves the row to that shard.
UPDATE memoria.memories m
SET content = %(content)s, context = %(context)s, metadata = %(metadata)s, importance = %(importance)s,
    pinned = %(pinned)s, memory_type = %(memory_type)s, dedup_key = %(dedup_key)s, embedding = %(embedding)s,
    doc_len = %(doc_len)s
WHERE m.tenant = current_setting('memoria.tenant') AND m.id = %(id)s
