-- Entities of the new memories: read the ones the tenant has, insert the others (in name order, for
-- concurrent writers; rewriting every known entity's row, as an upsert of all did, cost a row version
-- and a row lock per name and batch: -5% CPU in this statement on SciFact, -15% on MS MARCO), then
-- link memories to entities with each one's place in the memory's text order (ordinal), and count
-- co-occurrence edges between the mentions memoria.co_occurs pairs (at most three places apart:
-- migration 0013; memoria.remove_derived subtracts the same pairs), each pair once, from the smaller
-- entity id (migration 0017: the graph walks read an edge from both ends). Every conflict
-- target is a unique key that includes the tenant (migration 0009).
WITH mentions AS (
    SELECT DISTINCT ON (s.memory_id, e.norm_name) s.memory_id, s.memory_type, e.name, e.norm_name,
           e.ordinal::smallint AS ordinal
    FROM stage_memories s
    CROSS JOIN LATERAL unnest(s.entity_names, s.entity_norms) WITH ORDINALITY AS e (name, norm_name, ordinal)
    WHERE s.tenant = current_setting('memoria.tenant') AND s.memory_id IS NOT NULL
    ORDER BY s.memory_id, e.norm_name, e.ordinal
), known AS (  -- the entities the tenant has (as this statement sees them): read, not written again
    SELECT e.id, e.norm_name
    FROM memoria.entities e
    WHERE e.tenant = current_setting('memoria.tenant') AND e.norm_name IN (SELECT norm_name FROM mentions)
), upserted AS (  -- the others; one a concurrent batch has inserted since is returned by the no-op update
    INSERT INTO memoria.entities AS en (tenant, name, norm_name)
    SELECT DISTINCT ON (m.norm_name) current_setting('memoria.tenant'), m.name, m.norm_name
    FROM mentions m
    WHERE NOT EXISTS (SELECT 1 FROM known k WHERE k.norm_name = m.norm_name)
    ORDER BY m.norm_name, m.name
    ON CONFLICT (tenant, norm_name) DO UPDATE SET name = en.name
    RETURNING en.id, en.norm_name
), ids AS (
    SELECT id, norm_name FROM known
    UNION ALL
    SELECT id, norm_name FROM upserted
), links AS (
    INSERT INTO memoria.memory_entities (tenant, entity_id, memory_id, memory_type, ordinal)
    SELECT current_setting('memoria.tenant'), u.id, m.memory_id, m.memory_type, m.ordinal
    FROM mentions m JOIN ids u USING (norm_name)
    ON CONFLICT (tenant, entity_id, memory_id) DO NOTHING
    RETURNING entity_id, memory_id, ordinal
)
INSERT INTO memoria.entity_edges AS ed (tenant, src_id, dst_id, weight)
SELECT current_setting('memoria.tenant'), a.entity_id, b.entity_id, count(*)
FROM links a
JOIN links b ON a.memory_id = b.memory_id AND a.entity_id < b.entity_id AND memoria.co_occurs(a.ordinal, b.ordinal)
GROUP BY a.entity_id, b.entity_id
ORDER BY a.entity_id, b.entity_id
ON CONFLICT (tenant, src_id, dst_id) DO UPDATE SET weight = ed.weight + excluded.weight
