-- Invalidate (valid_to set) or restore (valid_to NULL) a memory of the current tenant.
UPDATE memoria.memories m SET valid_to = %(valid_to)s::timestamptz
WHERE m.tenant = current_setting('memoria.tenant') AND m.id = %(id)s
RETURNING m.id
